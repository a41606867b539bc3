"""The models people serve (tests/python/models) as test_sound_audit_state.py and
test_sound_audit_suggest.py use them: their names (``NAMES``; ``AUDITED``, with the Llama's
whole-audit runs as ``soak``), ``_built`` (one built afresh from its file), and an independent
record of state (``_record``, ``_assert_same``): what the audit and suggest must leave as they
found it.

Models: ``decoder_model`` (token and position ``nn.Embedding``, LoRA ``lora_scale`` floats,
KV caches as inputs, a module-level config dict), ``llama_model`` (transformers
``LlamaForCausalLM`` from a small config, ``StaticCache``, one greedy decode step),
``dropout_model`` (``train()`` mode, ``nn.Dropout`` and ``torch.rand_like``),
``gated_model`` (``self.layers[: self.n_active]``, ``if self.temperature > 0``) and
``lora_model`` (an adapter swapped for one of another rank)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from guardpolicy.tools.common import model_spec as _model_spec

MODELS = Path(__file__).resolve().parent / "models"
NAMES = ("decoder_model", "llama_model", "dropout_model", "gated_model", "lora_model")
#: NAMES with the Llama's whole-audit runs as `soak` (tens of seconds each): `make test` runs
#: them; the portability legs run the other models' and the Llama's targeted tests.
AUDITED = [pytest.param(n, marks=pytest.mark.soak) if n == "llama_model" else n for n in NAMES]


def _built(name: str):
    return _model_spec.resolve(str(MODELS / f"{name}.py")).build()


# --------------------------------------------------------------------------- an independent record of state


def _tensors(obj, prefix="in"):
    """Every tensor reachable from inputs (tuples, lists, dicts, objects' ``__dict__``)."""
    out, stack, seen = {}, [(prefix, obj)], set()
    while stack:
        path, x = stack.pop()
        if id(x) in seen or isinstance(x, (str, int, float, bool, type(None), type)):
            continue
        seen.add(id(x))
        if isinstance(x, torch.Tensor):
            out[path] = x
        elif isinstance(x, dict):
            stack += [(f"{path}[{k!r}]", v) for k, v in x.items()]
        elif isinstance(x, (list, tuple)):
            stack += [(f"{path}[{i}]", v) for i, v in enumerate(x)]
        elif hasattr(x, "__dict__") and not callable(x):
            stack += [(f"{path}.{k}", v) for k, v in vars(x).items()]
    return out


def _record(model, args, kwargs):
    """What must not change: per module its class, ``__dict__`` (identity of every value, and
    the hook dicts' contents), parameter and buffer values, and the inputs' tensors (values and
    identity), plus torch's global RNG state."""
    modules = {n: (type(m), {k: id(v) for k, v in vars(m).items()},
                   {k: list(v.items()) for k, v in vars(m).items() if "hooks" in k and isinstance(v, dict)})
               for n, m in model.named_modules()}
    values = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}
    ids = {k: id(v) for k, v in model.state_dict(keep_vars=True).items()}
    inputs = {k: (id(v), v.detach().clone()) for k, v in _tensors((args, kwargs)).items()}
    return modules, values, ids, inputs, torch.get_rng_state()


def _assert_same(before, model, args, kwargs):
    modules, values, ids, inputs, rng = before
    after = _record(model, args, kwargs)
    assert after[0] == modules
    assert after[2] == ids
    for k, v in values.items():
        assert torch.equal(after[1][k], v), f"{k} changed"
    assert after[3].keys() == inputs.keys()
    for k, (ident, v) in inputs.items():
        assert after[3][k][0] == ident and torch.equal(after[3][k][1], v), f"input {k} changed"
    assert torch.equal(after[4], rng), "the caller's RNG state changed"
