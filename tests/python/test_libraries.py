"""``watch_state`` on models of the libraries people compile (issue 48), real ``torch.compile``
on the ``eager`` backend: a diffusers UNet and Flux transformer whole, the Flux transformer
compiled block by block (``gp.compile_repeated_blocks``, as diffusers' own
``compile_repeated_blocks``) with a LoRA loaded after the compile, a PEFT LoRA model whose
adapters are toggled and switched between calls, and state that libraries rewrite on every
call (accelerate's ``cpu_offload``, diffusers' layerwise casting) applied after warm-up. Every
call is compared with eager on the same model; compiles are compared with plain
``torch.compile``'s on the same sequence. Models from configs with random weights
(guardpolicy.tools.common.library_models, as bench/bench_libraries.py's): nothing is
downloaded."""

from __future__ import annotations

import peft
import pytest
import torch
from torch import nn

import guardpolicy as gp
from guardpolicy.tools.common.library_models import build_flux, build_peft_llama, build_unet

counters = torch._dynamo.utils.counters


def _first(out):
    return out[0]  # a tuple's or a ModelOutput's first field: sample, logits


def _same(compiled, model, kwargs):
    with torch.no_grad():
        torch.testing.assert_close(_first(compiled(**kwargs)), _first(model(**kwargs)), atol=1e-5, rtol=1e-4)


def _call(model, kwargs):
    with torch.no_grad():
        model(**kwargs)


@pytest.mark.parametrize("build", [build_unet, lambda: build_flux(layers=2)], ids=["unet", "flux"])
def test_a_diffusers_model_is_watched_and_served_right(build):
    torch._dynamo.reset()
    model, kwargs = build()
    compiled = gp.compile(model, "watch_state", backend="eager")
    for _ in range(3):
        _same(compiled, model, kwargs)
    watches = gp.stats(compiled).watches
    watched = sum(f.guards for f in watches.frames)
    assert watched > 20 * len(watches.unwatched), (watched, watches.unwatched)  # __getattr__ no longer keeps them


def _graphs(run) -> int:
    torch._dynamo.reset()
    counters.clear()
    run()
    return counters["stats"]["unique_graphs"]


def test_flux_compiled_block_by_block_as_diffusers_compiles_it():
    """Compiles within 1.2x of diffusers' own ``compile_repeated_blocks`` (plain torch.compile
    of each block); the module tree and state dict kept; a LoRA added after the compile is
    served right."""
    model, kwargs = build_flux(layers=2)
    torch_graphs = _graphs(lambda: (model.compile_repeated_blocks(backend="eager"), _call(model, kwargs)))
    model, kwargs = build_flux(layers=2)
    keys = list(model.state_dict())
    eager = build_flux(layers=2)[0]
    graphs = _graphs(lambda: (gp.compile_repeated_blocks(model, "watch_state", backend="eager"),
                              [_same(model, eager, kwargs) for _ in range(3)]))
    assert graphs <= 1.2 * torch_graphs, (graphs, torch_graphs)
    assert list(model.state_dict()) == keys
    lora = peft.LoraConfig(r=4, target_modules=["to_q", "to_v"], init_lora_weights=False)
    torch.manual_seed(1)
    model.add_adapter(lora)
    torch.manual_seed(1)
    eager.add_adapter(lora)
    for _ in range(2):
        _same(model, eager, kwargs)


def _peft():
    """Adapters ``a`` and ``b``, each drawn non-zero (each changes the output)."""
    return build_peft_llama(adapters=("a", "b"), init_lora_weights=False)


def _peft_sequence(model, call):
    """Calls with adapter ``a``, none (``disable_adapter``), ``b`` and ``a`` again, each against
    eager on the same model."""
    kwargs = _peft()[1]
    out = []
    with torch.no_grad():
        for step in ("a", "off", "b", "a", "off", "a"):
            if step == "off":
                with model.disable_adapter():
                    out.append((call(**kwargs).logits, model(**kwargs).logits))
            else:
                model.set_adapter(step)
                out.append((call(**kwargs).logits, model(**kwargs).logits))
    return out


def test_peft_adapters_toggled_and_switched_between_calls():
    model, _ = _peft()
    torch_graphs = _graphs(lambda: _peft_sequence(model, torch.compile(model, backend="eager")))
    model, _ = _peft()
    compiled = gp.compile(model, "watch_state", backend="eager")
    torch._dynamo.reset()
    counters.clear()
    for got, expected in _peft_sequence(model, compiled):
        torch.testing.assert_close(got, expected)
    assert counters["stats"]["unique_graphs"] <= torch_graphs
    assert not torch.allclose(*[out for out, _ in _peft_sequence(model, compiled)[:2]])  # the toggle mattered


def test_peft_adapter_names_per_call_compiles_as_torch_compile_does():
    """PEFT's mixed-batch API (``adapter_names=[...]`` per row): each call registers a new
    ``functools.partial`` pre-hook on every LoRA layer and removes it after. torch guards the
    partial part by part and compiles once per order of names; so does ``watch_state``
    (it compiled on every call up to torch's limit before)."""
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])

    def sequence(model, call):
        with torch.no_grad():
            for i in range(8):
                names = ["a", "b"] if i % 2 == 0 else ["b", "a"]
                torch.testing.assert_close(call(input_ids=ids, adapter_names=names).logits,
                                           model(input_ids=ids, adapter_names=names).logits)

    model, _ = _peft()
    torch_graphs = _graphs(lambda: sequence(model, torch.compile(model, backend="eager")))
    model, _ = _peft()
    compiled = gp.compile(model, "watch_state", backend="eager")
    assert _graphs(lambda: sequence(model, compiled)) == torch_graphs == 2


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)]).eval()


def _offload(m):
    import accelerate

    accelerate.cpu_offload(m, execution_device=torch.device("cpu"))


def _casting(m):
    from diffusers.hooks import apply_layerwise_casting

    apply_layerwise_casting(m, storage_dtype=torch.bfloat16, compute_dtype=torch.float32)


@pytest.mark.parametrize("change", [_offload, _casting], ids=["accelerate cpu_offload", "diffusers layerwise casting"])
def test_hooks_that_rewrite_the_weights_on_every_call_after_warm_up(change):
    """Served right on every call (layerwise casting raised on every call before issue 48); the
    per-call cost: bench/bench_per_call_changes.py."""
    torch._dynamo.reset()
    x = torch.randn(2, 16)
    model, reference = _mlp(), _mlp()
    compiled = gp.compile(model, "watch_state", backend="eager")
    with torch.no_grad():
        for _ in range(5):
            compiled(x)
        change(model)
        change(reference)
        for _ in range(12):
            torch.testing.assert_close(compiled(x), reference(x))
