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


def test_pooled_copies_keep_each_copys_block_mean_and_their_spread():
    a = latency.Variant("no filter", None, samples=[100, 100, 300, 300], block=2)
    b = latency.Variant("no filter", None, samples=[200, 200, 200, 200], block=2)
    c = latency.Variant("eager", None, samples=[50, 50, 50, 50], block=2)
    pooled = latency.pooled([a, c, b])
    assert [v.label for v in pooled] == ["no filter", "eager"]
    assert pooled[0].samples == [100, 100, 300, 300, 200, 200, 200, 200]
    assert pooled[0].copy_means == [200.0, 200.0] and pooled[0].block == 2
    # block means of "no filter", pooled: 100, 300, 200, 200 -> median 200
    assert latency.block_mean(pooled[0]) == 200.0
    a.samples = [100] * 4
    rows = latency.summarize(latency.pooled([a, b]))
    assert rows[0]["copy_spread"] == pytest.approx(1.0)  # 200 / 100 - 1
    assert "up to 100.0%" in latency.spread_line(rows)
    c.label = "no filter"
    assert latency.spread_line(latency.summarize([c])) == ""


def test_measure_with_copies_builds_each_variant_again_and_pools_the_calls():
    built = []

    def make(model, inputs, backend):
        fn = torch.compile(latency.own_class_copy(model), backend=backend)
        built.append(fn)
        return [latency.Variant("eager", model), latency.Variant("no filter", fn)]

    tables = latency.measure(make, ["mlp"], ["eager"], calls=40, block=10, copies=2)
    [rows] = tables.values()
    assert [r["variant"] for r in rows] == ["eager", "no filter"]
    assert len(built) == 2 and built[0] is not built[1]
    assert all(r["copy_spread"] is not None and r["copy_spread"] >= 0 for r in rows)
