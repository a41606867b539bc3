"""guardpolicy.tools.latency: each recipe's policy decides as the torch filter it is timed
against (a `use` does not bring the used policy's default: the recipe must state it)."""

import pytest
import torch

from guardpolicy import load
from guardpolicy.tools import latency

from conftest import capture_entries


@pytest.mark.parametrize("recipe", latency.RECIPES, ids=lambda r: r.name)
def test_each_recipe_policy_decides_as_its_torch_twin(recipe):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    entries = capture_entries(model, torch.randn(2, 4))
    policy = load(recipe.policy_source())
    torch_way = getattr(torch.compiler, f"{recipe.std}_unsafe") if recipe.std else (lambda es: [True] * len(es))
    assert policy(entries) == list(torch_way(entries))
    assert policy.config == ({"install_free_tensors": True} if recipe.ift else {})
    assert (policy.stance is not None) == recipe.stance


def test_own_class_copy_gives_each_variant_its_own_cache_entry():
    model = torch.nn.Linear(2, 2)
    a, b = latency.own_class_copy(model), latency.own_class_copy(model)
    assert type(a).forward.__code__ is not type(b).forward.__code__
    x = torch.ones(1, 2)
    assert torch.equal(a(x), model(x)) and isinstance(a, torch.nn.Linear)
