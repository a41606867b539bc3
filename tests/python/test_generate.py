"""Serving an LLM as transformers does: ``model.generate`` with a ``StaticCache`` compiled
through ``CompileConfig(options={"guard_filter_fn": policy})``, and a hand-written greedy
decode loop through ``gp.compile``; both give uncompiled generation's tokens exactly
(docs/serving.md). A small ``LlamaForCausalLM`` from a config: random weights, nothing
downloaded."""

from __future__ import annotations

import pytest
import torch
import transformers

import guardpolicy as gp
from guardpolicy.api.policy_text import PolicyText
from guardpolicy.tools.decode import cache_keyword

PROMPT_LEN, NEW_TOKENS = 8, 12


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                      max_position_embeddings=128)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 256, (1, PROMPT_LEN))
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static")
    return model, ids, ref


def greedy_decode(model, step, ids):
    """Prefill with ``model``, then one token per call of ``step`` (the compiled model),
    writing the StaticCache in place; the prompt and the new tokens. The cache goes by the
    keyword this transformers' forward takes (``cache_keyword``: a ``cache=`` that 5.17 does
    not read would leave every step without the prompt, and the tokens unlike generate's)."""
    cache = {cache_keyword(model): transformers.StaticCache(config=model.config, max_cache_len=64)}
    with torch.no_grad():
        logits = model(ids, **cache, cache_position=torch.arange(ids.shape[1])).logits
        tokens = [logits[:, -1:].argmax(-1)]
        for i in range(NEW_TOKENS - 1):
            position = torch.tensor([ids.shape[1] + i])
            tokens.append(step(tokens[-1], **cache, cache_position=position).logits[:, -1:].argmax(-1))
    return torch.cat([ids, *tokens], dim=1)


def test_generate_with_a_policy_gives_uncompiled_generations_tokens(llama):
    model, ids, ref = llama
    policy = gp.load_std("skip_guard_on_all_nn_modules")
    compile_config = transformers.CompileConfig(backend="eager", mode=None, options={"guard_filter_fn": policy})
    compile_config._compile_all_devices = True  # transformers compiles on CUDA only unless told
    torch.compiler.reset()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static",
                             compile_config=compile_config)
    assert torch.equal(out, ref)
    assert out.shape == (1, PROMPT_LEN + NEW_TOKENS)
    assert hasattr(model, "_compiled_call")  # generate did compile the decode step
    del model._compiled_call


def test_a_decode_loop_through_gp_compile_gives_the_same_tokens(llama):
    model, ids, ref = llama
    torch.compiler.reset()
    opt = gp.compile(model, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager")
    assert torch.equal(greedy_decode(model, opt, ids), ref)
    assert gp.stats(opt).compiles == 1  # every decode step reuses one graph: the cache is written in place
    dropped = [e for e in gp.explain(opt)[0] if not e.keep]
    assert dropped and all(e.rule is not None for e in dropped)


def test_the_tokens_per_second_loops_decode_greedily_and_report_tokens_per_second():
    """``guardpolicy.tools.decode`` (bench/bench_llama_tokens.py, the demo's Llama row): each
    loop's steps are uncompiled generation's greedy tokens, the compiled loops equal eager's
    (checked in ``variants``), and the rows carry tokens/s from the timed steps."""
    from guardpolicy.tools import decode, latency

    model = decode.build_model()
    ids = torch.tensor([decode.PROMPT])
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=6, do_sample=False, cache_implementation="static")
        loop = decode.Decoder(model, model)
        steps = [loop.first] + [loop().logits[:, -1:].argmax(-1) for _ in range(5)]
    assert torch.equal(torch.cat([ids, *steps], dim=1), ref)
    policy = PolicyText("suggested_tiny", body=("keep when true",), unsafe=True, settings=("verify every 100 calls",))
    assert "  verify every 100 calls\n  dispatch direct\n  default keep" in decode.with_direct(policy).render()
    torch.compiler.reset()
    with torch.no_grad():
        vs = decode.variants(model, policy, backend="eager")
        latency.run(vs, (), 8, 4)
    rows = decode.rows(vs)
    assert [r["variant"] for r in rows] == ["eager", "torch.compile (no filter)", decode.TORCH_RECIPE,
                                            decode.SUGGESTED, decode.DIRECT]
    for r, v in zip(rows, vs):
        assert len(v.samples) == 8 and r["tokens_per_s"] == pytest.approx(1e6 / r["block_mean_us"])
    assert rows[1]["vs_no_filter"] == 1.0
    assert all(v.fn.pos > len(decode.PROMPT) for v in vs)  # each loop advanced its own cache
    torch.compiler.reset()
