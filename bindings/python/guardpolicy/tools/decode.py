"""Tokens per second of a greedy decode loop: a small HF Llama (``LlamaForCausalLM`` from a
config, random weights, nothing downloaded) writing a ``StaticCache`` in place, one token
per call of the compiled decode step, as a serving loop does.

``variants(model, suggested)`` builds the rows of ``bench/bench_llama_tokens.py`` and of
``make demo``'s Llama row, each a ``guardpolicy.tools.latency.Variant`` whose call is one
decode step of its own loop (its own model copy, cache and position):

* ``eager``: the model, uncompiled;
* ``torch.compile``: no filter, Inductor;
* ``torch's recipe``: ``torch.compile(options={"guard_filter_fn":
  torch.compiler.skip_guard_on_all_nn_modules_unsafe})``, ``install_free_tensors`` patched
  around the compiling call, ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``
  entered around each timed block (the torch way, as ``latency.torch_way``);
* the suggested policy (``gp.suggest``) with its ``verify every 100 calls``;
* the same with ``dispatch direct``.

Each step feeds the previous step's greedy token at the next ``cache_position``; when the
cache is full the loop goes back to the prompt (the cache's write position rewound), the
same few µs in every variant. Tokens/s is ``1e6 / block mean µs`` (the mean counts each
block's verified call); the per-step latency is the median and p90 of single steps.
"""

from __future__ import annotations

import dataclasses

from typing import Any

from ..api import loading
from ..api.policy_text import PolicyText
from ..runtime import torch_internals
from . import latency
from .common.compare import TOLERANCE, compare
from .common.extras import require

#: The prompt every loop starts from.
PROMPT = (1, 5, 7)
#: The StaticCache's length: the loop goes back to the prompt after this many positions.
MAX_CACHE = 64
#: Decode steps per variant compared with eager's before timing.
CHECK_STEPS = 8


def config() -> Any:
    """The small ``LlamaConfig`` (2 layers, width 32, 4 heads, 2 key/value heads,
    vocabulary 128): tests/python/models/llama_model.py's."""
    transformers = require("transformers", "the HF Llama decode loop")
    return transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def cache_keyword(model: Any) -> str:
    """The keyword ``model.forward`` takes its KV cache by: ``cache`` in the transformers of
    the torch 2.13+ legs (5.25; ``past_key_values`` is a deprecated alias there), or
    ``past_key_values`` in older ones (5.17, the torch 2.11 and 2.12 legs'). Passing the other name
    is no error in 5.17: ``cache=`` lands in the forward's ``**kwargs`` unread, and every
    decode step then attends to its own token only."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def build_model(seed: int = 0) -> Any:
    import torch

    transformers = require("transformers", "the HF Llama decode loop")
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config()).eval()


class Decoder:
    """A greedy decode loop: each call is one decode step of ``step`` (the model, compiled or
    not) on this loop's own ``StaticCache``, prefilled with ``PROMPT`` by ``model``."""

    def __init__(self, model: Any, step: Any):
        import torch

        transformers = require("transformers", "the HF Llama decode loop")
        self.step = step
        self.cache = transformers.StaticCache(config=model.config, max_cache_len=MAX_CACHE)
        self.cache_keyword = cache_keyword(model)
        with torch.no_grad():
            out = model(input_ids=torch.tensor([PROMPT]), **{self.cache_keyword: self.cache},
                        cache_position=torch.arange(len(PROMPT)))
        self.first = out.logits[:, -1:].argmax(-1)
        self.rewind()

    def rewind(self) -> None:
        """Back to the end of the prompt: the next step writes position ``len(PROMPT)``."""
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(len(PROMPT))
        self.token, self.pos = self.first, len(PROMPT)

    def kwargs(self) -> dict:
        """The decode step's keyword arguments at the current position (``gp.suggest`` takes them)."""
        import torch

        return {"input_ids": self.token, self.cache_keyword: self.cache, "cache_position": torch.tensor([self.pos])}

    def __call__(self) -> Any:
        if self.pos == MAX_CACHE:
            self.rewind()
        out = self.step(**self.kwargs())
        self.token = out.logits[:, -1:].argmax(-1)
        self.pos += 1
        return out

    def logits(self, steps: int = CHECK_STEPS) -> list:
        """The logits of ``steps`` steps from the prompt, then back to the prompt."""
        self.rewind()
        out = [self().logits for _ in range(steps)]
        self.rewind()
        return out


TORCH_RECIPE = "torch's recipe (nn modules +ift +stance)"
SUGGESTED = "suggested + verify"
DIRECT = "suggested + verify + direct dispatch"
CHECKED = "suggested, every kept guard checked per call (watch as keep) + verify + direct dispatch"


def with_direct(suggested: PolicyText) -> PolicyText:
    """The suggested policy with a ``dispatch direct`` line."""
    return suggested.with_settings("dispatch direct")


def variants(model: Any, suggested: PolicyText, backend: str = "inductor",
             without_direct: bool = True, checked: bool = False, one_line: str = "") -> list[latency.Variant]:
    """The five decode loops (module docstring; ``without_direct=False``: four, no
    ``suggested + verify`` without direct dispatch; ``checked``: one more, the suggested
    policy's ``default watch`` read as ``default keep``, as before the runtime watched;
    ``one_line``: one more, labelled so, ``gp.compile(model, "watch_state")``), each
    compiled by its first call, and
    checked against eager's logits over ``CHECK_STEPS`` steps (SystemExit naming the first
    that differs)."""
    import torch

    recipe = latency.RECIPES[2]  # skip_guard_on_all_nn_modules +ift +stance
    out = [latency.Variant("eager", Decoder(model, model))]
    out.append(latency.Variant("torch.compile (no filter)",
                               Decoder(model, torch.compile(latency.own_copy(model), backend=backend))))
    fn = torch.compile(latency.own_copy(model), backend=backend,
                       options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe})
    loop = Decoder(model, fn)
    with torch_internals.config_patch(install_free_tensors=recipe.ift):
        loop()  # compiles with the knob, the torch way
    loop.rewind()
    out.append(latency.Variant(TORCH_RECIPE, loop, latency.stance_block))
    policies = ((SUGGESTED, suggested.render()),) if without_direct else ()
    if checked:
        policies += ((CHECKED, with_direct(dataclasses.replace(suggested, default="keep")).render()),)
    loaded = [(label, loading.load(text)) for label, text in policies]
    loaded += [(one_line, loading.load_std("watch_state"))] if one_line else []
    for label, policy in loaded + [(DIRECT, loading.load(with_direct(suggested).render()))]:
        out.append(latency.Variant(label, Decoder(model, latency.gp_compile(latency.own_copy(model), policy,
                                                                            backend=backend))))
    ref = out[0].fn.logits()
    for v in out[1:]:
        for i, (got, want) in enumerate(zip(v.fn.logits(), ref)):
            if (problem := compare(got, want)) is not None:
                raise SystemExit(f"{v.label}: decode step {i} differs from eager: {problem} ({TOLERANCE})")
    return out


def suggest(model: Any, backend: str = "inductor", **options: Any) -> Any:
    """``gp.suggest``'s tool on one decode step of ``model`` (its own loop): a
    ``suggest.Suggestion`` (``.text``, the policy; ``.audit``, the mutation audit)."""
    from .suggest import suggest as suggest_policy

    return suggest_policy(model, (), Decoder(model, model).kwargs(), backend=backend, **options)


def rows(vs: list[latency.Variant]) -> list[dict]:
    """``latency.summarize`` rows, the baseline ``torch.compile (no filter)``, each with
    ``tokens_per_s`` (from the block mean) and ``vs_eager_tokens``."""
    for v in vs:
        if v.label.startswith("torch.compile"):
            v.label, keep = "no filter", v.label
    out = latency.summarize(vs)
    for v, r in zip(vs, out):
        if v.label == "no filter":
            v.label = r["variant"] = keep
        r["tokens_per_s"] = 1e6 / r["block_mean_us"]
    eager = out[0]["tokens_per_s"]
    for r in out:
        r["vs_eager_tokens"] = r["tokens_per_s"] / eager
    return out


def table(rows_: list[dict]) -> list[str]:
    lines = ["| variant | tokens/s | per step: median µs | p90 µs | tokens/s / eager | step / no filter |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows_:
        lines.append(f"| {r['variant']} | {r['tokens_per_s']:.0f} | {r['median_us']:.1f} | {r['p90_us']:.1f} | "
                     f"{r['vs_eager_tokens']:.2f} | {r['vs_no_filter']:.2f} |")
    return lines
