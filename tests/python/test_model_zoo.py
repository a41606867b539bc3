"""suggest on the models people compile beyond language models (tests/python/models), each:
``gp.suggest`` (eager audit) → the policy under ``gp.compile`` on ``inductor`` and ``eager`` →
changes made after warm-up → every call equals eager's (``torch.testing.assert_close``, the
same tolerances the audit compares with). Real compiles throughout.

Zoo: ``resnet_model`` (conv + BatchNorm2d in ``eval()``: ``channels_last`` model then input,
``.half()`` and ``.to(torch.bfloat16)`` with matching input, back to float), ``vit_model``
(patch-embedding conv, class token, ``nn.MultiheadAttention``: a block's ``LayerNorm`` eps and
the head swapped), ``unet_model`` (GroupNorm, timestep embedding, ``scale`` passed per call:
0, -1, other timesteps, a larger batch), ``peft_lora_model`` (two PEFT LoRA adapters: ``set_adapter``,
``disable_adapter()``, back), ``batchnorm_dropout_model`` (BatchNorm1d + Dropout handed over in
``eval()``: ``.train()`` / ``.eval()``, under the same seed as eager).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from guardpolicy.runtime.torch_internals import inductor_fallback_random
from guardpolicy.tools.common import model_spec as _model_spec

MODELS = Path(__file__).resolve().parent / "models"
ZOO = ("resnet_model", "vit_model", "unet_model", "peft_lora_model", "batchnorm_dropout_model")
BACKENDS = ("inductor", "eager")


def _built(name: str):
    return _model_spec.resolve(str(MODELS / f"{name}.py")).build()


@pytest.fixture(scope="module")
def suggested():
    """Per zoo model: the policy ``gp.suggest`` writes (eager audit, verify every 5 calls)."""
    return {name: gp.suggest(_built(name).fn, *_built(name).args, verify=5, **_built(name).kwargs)
            for name in ZOO}


def _seeded(fn, *args, **kwargs):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return fn(*args, **kwargs)


def _check_steps(name: str, suggested, backend: str, steps) -> None:
    """Compiles the model under its suggested policy, warms it up, then per step ``(what,
    change)``: ``change(model, args, kwargs)`` returns the call's new ``(args, kwargs)``;
    the first call after it and the two after that equal eager's."""
    torch.compiler.reset()
    b = _built(name)
    model, args, kwargs = b.fn, b.args, dict(b.kwargs)
    opt = gp.compile(model, gp.load(suggested[name].text), backend=backend)
    with torch.no_grad(), inductor_fallback_random():
        for _ in range(3):
            torch.testing.assert_close(_seeded(opt, *args, **kwargs), _seeded(model, *args, **kwargs))
        for what, change in steps:
            args, kwargs = change(model, args, kwargs)
            for call in range(3):
                out, ref = _seeded(opt, *args, **kwargs), _seeded(model, *args, **kwargs)
                where = f"{name} {backend} after {what}, call {call}"
                torch.testing.assert_close(out, ref, msg=lambda m, where=where: f"{where}: {m}")
    torch.compiler.reset()


def _to(model, args, kwargs, inputs=True, **how):
    """``model.to(**how)``, and the floating inputs too unless ``inputs=False``."""
    model.to(**how)
    if not inputs:
        return args, kwargs
    return tuple(a.to(**how) if a.is_floating_point() else a for a in args), kwargs


def _moved(inputs=True, **how):
    return lambda m, a, k: _to(m, a, k, inputs, **how)


RESNET_STEPS = [
    ("model.to(channels_last)", _moved(False, memory_format=torch.channels_last)),
    ("input channels_last", _moved(memory_format=torch.channels_last)),
    ("model and input .half()", _moved(dtype=torch.float16)),
    ("model and input bfloat16", _moved(dtype=torch.bfloat16)),
    ("back to float32, contiguous", _moved(dtype=torch.float32, memory_format=torch.contiguous_format)),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_resnet_like_with_batchnorm_in_eval_after_layout_and_dtype_changes(backend, suggested):
    _check_steps("resnet_model", suggested, backend, RESNET_STEPS)


def _vit_steps():
    def eps(m, a, k):
        m.blocks[0].norm1.eps = 1e-2
        return a, k

    def head(m, a, k):
        m.head = torch.nn.Linear(m.head.in_features, 3)
        return a, k

    return [("blocks[0].norm1.eps = 1e-2", eps), ("head swapped for a Linear(32, 3)", head),
            ("a batch of 1", lambda m, a, k: ((a[0][:1],), k))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_vit_like_after_an_eps_change_and_a_new_head(backend, suggested):
    _check_steps("vit_model", suggested, backend, _vit_steps())


def _scale(value):
    return lambda m, a, k: (a, {**k, "scale": value})


UNET_STEPS = [("scale=0.0", _scale(0.0)), ("scale=-1.0", _scale(-1.0)),
              ("other timesteps", lambda m, a, k: ((a[0], torch.tensor([999, 0])), k)),
              ("a batch of 4", lambda m, a, k: ((torch.cat([a[0], a[0]]), torch.cat([a[1], a[1]])), k))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unet_like_with_scale_passed_per_call(backend, suggested):
    _check_steps("unet_model", suggested, backend, UNET_STEPS)


def _calls(method: str, *margs):
    """A step that calls ``model.<method>(*margs)`` and leaves the inputs as they are."""
    def change(m, a, k):
        getattr(m, method)(*margs)
        return a, k

    return change


@pytest.mark.parametrize("backend", BACKENDS)
def test_peft_lora_adapters_switched_by_set_adapter(backend, suggested):
    _check_steps("peft_lora_model", suggested, backend, [("set_adapter('b')", _calls("set_adapter", "b")),
                                                         ("set_adapter('a')", _calls("set_adapter", "a"))])


@pytest.mark.parametrize("backend", BACKENDS)
def test_peft_lora_disable_adapter_returns_the_base_models_output(backend, suggested):
    torch.compiler.reset()
    b = _built("peft_lora_model")
    model, (x,) = b.fn, b.args
    opt = gp.compile(model, gp.load(suggested["peft_lora_model"].text), backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), model(x))
        with model.disable_adapter():
            base = model(x)
            torch.testing.assert_close(opt(x), base)
        torch.testing.assert_close(opt(x), model(x))
        assert not torch.allclose(model(x), base)  # the adapters change the output: the test can fail
    torch.compiler.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_batchnorm_dropout_handed_over_in_eval_then_train_and_eval(backend, suggested):
    _check_steps("batchnorm_dropout_model", suggested, backend,
                 [(".train()", _calls("train")), (".eval()", _calls("eval"))])


def test_suggest_on_the_batchnorm_model_in_eval_writes_a_policy_and_leaves_its_statistics(suggested):
    b = _built("batchnorm_dropout_model")
    before = {k: v.clone() for k, v in b.fn.state_dict().items()}
    s = gp.suggest(b.fn, *b.args, verify=5)
    assert s.text.startswith("guardpolicy 1\n") and "unsafe policy suggested" in s.text
    gp.load(s.text)
    for k, v in b.fn.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not b.fn.training
    tried = [t.mutation for g in s.suggestion.audit.groups for t in g.trials if g.name.endswith("training")]
    assert "False -> True" in tried  # the audit ran the model in train() and put its statistics back


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_policy_keeps_what_its_audit_found_dangerous(name, suggested):
    s = suggested[name]
    dangerous = [f for f in s.findings if f["verdict"] == "dangerous"]
    assert dangerous, name  # each zoo model has state whose change the audit showed matters
    assert all(f["decision"] == "keep" for f in dangerous)
    assert any(f["decision"] == "drop" for f in s.findings), name
