"""Per-call latency of ``guardpolicy.compile`` (``gp.bench``, ``make demo``'s timings and the
benchmark ``bench/bench_runtime.py``, ``make bench``), interleaved runs on ``tools/common/timing``.

* ``pair_variants`` (``measure``): per recipe, ``gp.compile(model, policy)`` (the policy carries
  the recipe's filter, ``config`` and ``stance`` lines) against its twin ``(torch)``:
  ``torch.compile`` with torch's own filter function, the config knob patched around the
  first (compiling) call only, and ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``
  entered once per block of timed calls; plus ``measure_trivial()``: the fixed cost on a trivial
  compiled function (``x + 1``, eager backend) against ``torch.compile``.

Timing (``guardpolicy.tools.common.timing``, the engine the bench command uses too): after warm-up,
blocks of calls, round-robin over the variants with the first one rotating, ``time.perf_counter_ns`` around each call, the GC off; medians and p90 in µs, and
ratios of medians within the same run. Each variant gets its own copy of the model's class (a
new ``forward`` code object), so each has exactly one cache entry, as a user's model does.
Every variant's output is checked against eager's before timing. The benchmarks build each
variant more than once (``measure(copies=)``) and pool the copies: two builds of the same
variant differ by a few percent on this machine, however many calls are timed.
"""

from __future__ import annotations

import copy
import datetime
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..api import loading
from ..runtime import torch_internals
from .common.models import build, output_tensor
from ..api.policy import Policy
from ..api.policy_text import PolicyText
from ..runtime.compiled import compile as _gp_compile
from ..runtime.logs import tool_objects
from .common.compare import TOLERANCE, compare
from .common.timing import WARMUP, Variant, block_mean, machine_description, pooled, spread_line, summarize, time_blocks  # noqa: F401 - re-exported


def gp_compile(model: Any, policy: Policy | str, **options: Any) -> Any:
    """``guardpolicy.compile`` for a timed variant: the tool's own object
    (``logs.tool_objects``), so a stance recovery of it is not logged to the user."""
    with tool_objects():
        return _gp_compile(model, policy, **options)


@dataclass
class Recipe:
    """One way to cut guard overhead, as a policy for ``gp.compile`` and the torch way."""

    name: str
    std: str | None  # std policy / torch filter name, None: keep everything
    ift: bool
    stance: bool
    default: str = "keep"  # the std policy's own default (a `use` does not bring it)

    def policy_source(self) -> str:
        ident = "".join(c if c.isalnum() else "_" for c in self.name)
        settings = (("config install_free_tensors = true",) if self.ift else ()) + (
            (f"stance skip_guard_eval_unsafe after {WARMUP} calls",) if self.stance else ())
        return PolicyText(f"p_{ident}", body=(f"use {self.std}" if self.std else "keep when true",),
                          default=self.default, unsafe=True, settings=settings).render()


RECIPES = [
    Recipe("skip_guard_on_all_nn_modules +ift", "skip_guard_on_all_nn_modules", ift=True, stance=False),
    Recipe("stance after warm-up", None, ift=False, stance=True),
    Recipe("recommended (nn modules +ift +stance)", "skip_guard_on_all_nn_modules", ift=True, stance=True),
    Recipe("zero-guard floor (all +ift +stance)", "skip_all_guards", ift=True, stance=True, default="drop"),
]


def own_class_copy(model: Any) -> Any:
    """A deep copy of ``model`` whose class is a new subclass with a fresh ``forward`` code
    object: its own Dynamo cache, so variants of one model never share cache entries."""
    model = copy.deepcopy(model)
    model.__class__ = own_class(type(model))
    return model


def own_class(cls: type) -> type:
    """A subclass of ``cls`` of the same name whose ``forward`` runs a fresh code object."""
    forward = cls.forward
    fresh = types.FunctionType(forward.__code__.replace(), forward.__globals__, forward.__name__,
                               forward.__defaults__, forward.__closure__)
    fresh.__kwdefaults__ = forward.__kwdefaults__
    fresh.__dict__.update(forward.__dict__)
    return type(cls.__name__, (cls,), {"forward": fresh, "__module__": cls.__module__})


def own_copy(model_or_fn: Any) -> Any:
    """``own_class_copy`` for an ``nn.Module``; for a function, a new function over a copy
    of its code object (its own Dynamo cache)."""
    if isinstance(model_or_fn, torch.nn.Module):
        return own_class_copy(model_or_fn)
    fn = model_or_fn
    fresh = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    fresh.__kwdefaults__ = fn.__kwdefaults__
    return fresh


def as_policy(spec: Any) -> Policy:
    """A ``Policy``, a std policy name or a policy file, loaded."""
    if isinstance(spec, Policy):
        return spec
    if spec in loading.STD_POLICIES:
        return loading.load_std(spec)
    return loading.load(spec)


def policy_variants(model: Any, inputs: tuple, kwargs: dict, policies: list[Policy], backend: str) -> list[Variant]:
    """eager, no filter, and each policy through ``gp.compile`` (compiled)."""
    eager = copy.deepcopy(model) if isinstance(model, torch.nn.Module) else model
    out = [Variant("eager", eager)]
    fn = torch.compile(own_copy(model), backend=backend)
    fn(*inputs, **kwargs)
    out.append(Variant("no filter", fn))
    for policy in policies:
        fn = gp_compile(own_copy(model), policy, backend=backend)
        fn(*inputs, **kwargs)
        out.append(Variant(f"{policy.name} (gp.compile)", fn))
    return out


def measure_model(model: Any, inputs: tuple, kwargs: dict, policies: list[Policy], backend: str,
                  calls: int, block: int) -> list[dict]:
    """The summary rows of ``policy_variants`` for one model and backend, under no_grad."""
    torch.compiler.reset()
    try:
        with torch.no_grad():
            variants = policy_variants(model, inputs, kwargs, policies, backend)
            check_outputs(variants, inputs, kwargs)
            run(variants, inputs, calls, block, kwargs)
    finally:
        torch.compiler.reset()
    return summarize(variants)


def own_add() -> Callable:
    def add(x):
        return x + 1

    return types.FunctionType(add.__code__.replace(), globals(), "add")


def stance_block() -> Any:
    return torch.compiler.set_stance(skip_guard_eval_unsafe=True)


def torch_way(model: Any, backend: str, recipe: Recipe, inputs: tuple) -> Variant:
    options = {}
    if recipe.std:
        options["guard_filter_fn"] = getattr(torch.compiler, f"{recipe.std}_unsafe")
    fn = torch.compile(model, backend=backend, options=options or None)
    with torch_internals.config_patch(install_free_tensors=recipe.ift):
        fn(*inputs)  # compiles with the knob, the torch way: set once, around the compile
    return Variant(f"{recipe.name} (torch)", fn, stance_block if recipe.stance else None)


def gp_way(model: Any, backend: str, recipe: Recipe, inputs: tuple) -> Variant:
    fn = gp_compile(model, loading.load(recipe.policy_source()), backend=backend)
    fn(*inputs)
    return Variant(f"{recipe.name} (gp.compile)", fn, twin=f"{recipe.name} (torch)")



def pair_variants(model: Any, inputs: tuple, backend: str) -> list[Variant]:
    """eager, no filter, and per recipe its torch-way and gp.compile variants (compiled)."""
    out = [Variant("eager", copy.deepcopy(model)), no_filter(model, inputs, backend)]
    for recipe in RECIPES:
        out.append(torch_way(own_class_copy(model), backend, recipe, inputs))
        out.append(gp_way(own_class_copy(model), backend, recipe, inputs))
    return out


def no_filter(model: Any, inputs: tuple, backend: str) -> Variant:
    fn = torch.compile(own_class_copy(model), backend=backend)
    fn(*inputs)
    return Variant("no filter", fn)


def trivial_variants() -> list[Variant]:
    """``x + 1`` four ways: torch.compile and gp.compile (keep everything), each also with the
    stance (torch's entered once per block; the policy's after warm-up)."""
    plain = loading.load(Recipe("plain", None, ift=False, stance=False).policy_source())
    stance = loading.load(Recipe("stance", None, ift=False, stance=True).policy_source())
    return [Variant("torch.compile", torch.compile(own_add(), backend="eager")),
            Variant("gp.compile", gp_compile(own_add(), plain, backend="eager"), twin="torch.compile"),
            Variant("torch.compile + set_stance", torch.compile(own_add(), backend="eager"), stance_block),
            Variant("gp.compile + stance", gp_compile(own_add(), stance, backend="eager"),
                    twin="torch.compile + set_stance")]


def measure(make: Callable[[Any, tuple, str], list[Variant]], models: list[str], backends: list[str],
            calls: int, block: int, progress: Callable[[str], None] = lambda _: None,
            copies: int = 1) -> dict[str, list[dict]]:
    """Per ``"model, backend"``: the summary rows of the variants ``make`` builds.

    ``copies``: each variant built that many times (``make`` called again: its own model
    copy, cache entry and compiled code), all interleaved in one run, ``calls`` split
    evenly among them and pooled per variant. Identical variants built twice differ on
    this machine by a few percent that more calls do not average out (where their objects
    lie in memory); pooling copies does, and each row's ``copy_spread`` says how far its
    copies were apart."""
    tables = {}
    for name in models:
        model, inputs = build(name)
        for backend in backends:
            torch.compiler.reset()
            progress(f"{name}, {backend}: compiling")
            variants = [v for _ in range(copies) for v in make(model, inputs, backend)]
            check_outputs(variants, inputs)
            progress(f"{name}, {backend}: timing")
            run(variants, inputs, calls // copies, block)
            tables[f"{name}, {backend}"] = summarize(pooled(variants))
    torch.compiler.reset()
    return tables


def measure_trivial(calls: int = 4000, block: int = 200) -> list[dict]:
    torch.compiler.reset()
    variants = trivial_variants()
    run(variants, (torch.ones(4),), calls, block)
    torch.compiler.reset()
    return summarize(variants)


def machine() -> str:
    """``machine_description()`` plus this process's torch threads (a run setting)."""
    return f"{machine_description()}, {torch.get_num_threads()} torch thread(s)"


def stamp(calls: int, block: int, copies: int = 1) -> str:
    pooled_from = f" (pooled from {copies} copies of it)" if copies > 1 else ""
    return (f"{datetime.date.today().isoformat()}, {machine()}; {calls} timed calls per variant{pooled_from}, "
            f"interleaved in blocks of {block}")


def run(variants: list[Variant], inputs: tuple, calls: int, block: int, kwargs: dict | None = None) -> None:
    """Warms up every variant (``Variant.warm_up``), then times ``calls // block`` full blocks
    per variant (``timing.time_blocks``: interleaved, rotating, GC off)."""
    kwargs = kwargs or {}
    for v in variants:
        v.warm_up(*inputs, **kwargs)
    time_blocks(variants, inputs, (calls // block) * block, block, kwargs)


def check_outputs(variants: list[Variant], inputs: tuple, kwargs: dict | None = None) -> None:
    """Raises SystemExit naming the first variant whose output differs from eager's."""
    kwargs = kwargs or {}
    ref = output_tensor(variants[0].fn(*inputs, **kwargs))
    for v in variants[1:]:
        out = output_tensor(v.fn(*inputs, **kwargs))
        if (problem := compare(out, ref)) is not None:
            raise SystemExit(f"{v.label}: output differs from eager: {problem} ({TOLERANCE})")


def table(rows: list[dict], twins: bool = True) -> list[str]:
    """Markdown rows: median and p90 (µs), the ratio to no filter and to the torch way."""
    head = "| variant | median µs | p90 µs | / no filter |" + (" / torch way |" if twins else "")
    lines = [head, "|---|---:|---:|---:|" + ("---:|" if twins else "")]
    for r in rows:
        cells = f"| {r['variant']} | {r['median_us']:.1f} | {r['p90_us']:.1f} | {r['vs_no_filter']:.2f} |"
        if twins:
            cells += f" {r['vs_torch_way']:.3f} |" if r["vs_torch_way"] is not None else " |"
        lines.append(cells)
    return lines
