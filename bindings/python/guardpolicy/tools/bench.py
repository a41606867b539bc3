"""``python -m guardpolicy bench``: per-call guard overhead of a model under every way of
cutting it that torch and guardpolicy offer, measured in one interleaved run.

    python -m guardpolicy bench [--model mlp|gpt2|bert|llama|SCRIPT.py ...]
                                [--policy FILE[:NAME] ...] [--calls N] [--json OUT] [--plot OUT.png]

``make demo`` runs this through ``python -m guardpolicy demo`` (``guardpolicy.tools.demo``).

Variants (one table row each; ``via`` says how the model was compiled)
-----------------------------------------------------------------------
* ``eager``: the model itself, no ``torch.compile``.
* ``no filter`` (``torch.compile``, no ``guard_filter_fn``): the baseline of every ratio.
* ``no filter +ift``: ``guardpolicy.compile`` with a keep-everything policy carrying
  ``config install_free_tensors = true`` (recipe 1 of "Reducing Guard Overhead");
  ``no filter +ift (torch)``: the same knob set the torch way, ``torch._dynamo.config.patch
  (install_free_tensors=True)`` around compilation and around each block of timed calls
  (entering it is not timed), i.e. what a global setting costs.
* ``stance after N``: ``guardpolicy.compile`` with a keep-everything policy carrying
  ``stance skip_guard_eval_unsafe after N calls`` (recipe 4; N = ``--stance-after``);
  ``set_stance (torch)``: ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``
  entered around each block of timed calls after warm-up (entering it is not timed).
* per ``guardpolicy.STD_POLICIES`` name (recipe 2 and the other built-ins):
  ``NAME``: ``guardpolicy.load_std(NAME)`` as ``guard_filter_fn`` of ``torch.compile``;
  ``torch.NAME_unsafe``: torch's own function as ``guard_filter_fn``;
  ``NAME +ift``: ``guardpolicy.compile`` with a policy written on the fly (``use NAME``, the
  std policy's ``default``, ``config install_free_tensors = true``);
  ``torch.NAME_unsafe +ift``: torch's function with the config patched as above.
* per ``--policy FILE``: ``POLICY``, ``guardpolicy.compile(model, policy)`` (its own
  ``config`` and ``stance`` lines apply); for a policy with ``config`` or ``stance`` lines,
  ``POLICY (torch)``: the policy as ``guard_filter_fn`` of ``torch.compile`` with its config
  patched and its stance entered the torch way (as above); and, unless the policy already
  sets it, ``POLICY +ift`` with ``install_free_tensors`` added to its config lines.

The ``guardpolicy.compile`` rows pay what it adds per call: nothing for ``config`` lines
(they act inside this object's compiles only) and one per-call hook for a ``stance`` line;
the pairs with the ``(torch)`` rows show it. Every compiled variant uses ``--backend``
(default ``eager``; ``inductor`` is what users run, and compiles each variant).

Columns
-------
* ``offered``/``kept``: guards offered to the filter and kept, summed over the compiled
  frames (no filter: Dynamo's pre-filter ``CompilationMetrics.guard_count``, all kept).
* ``tree``: leaf guards (relational guards counted once) plus the root's epilogue lambda
  guards in the final guard-manager tree of every cache entry of the variant; for stance
  variants ``full>diff``, where ``diff`` is the tree that runs under
  ``skip_guard_eval_unsafe`` (``GuardManagerWrapper.diff_guard_root``).
* ``guard µs``: torch's own guard-evaluation figure,
  ``torch._C._dynamo.guards.profile_guard_manager(root, f_locals, 1)`` (µs for one check;
  torch 2.13 evicts the CPU caches before it, so this is a cold-cache figure: the "Guard
  eval latency" that ``TORCH_LOGS=guards`` prints after each compile), median of
  ``--guard-iters`` samples. ``warm µs``: ``root.check(f_locals)`` called back to back
  (best of 15 samples of about 1 ms each), the steady-state cost. Both are sampled
  round-robin over the variants, on the tree that runs per call (the diff tree for stance
  variants), with ``f_locals`` the frame's locals on entry (the forward's arguments bound
  by name, plus a decorated forward's closure variables). "-" where torch lacks the
  function, the variant has several cache entries or frames, or the bound locals do not
  pass the guards.
* ``median``/``p90``: per-call latency in µs of ``--calls`` individually timed calls
  (``time.perf_counter_ns``), all under ``torch.no_grad()``; ``vs base``/``vs eager``:
  median over the baseline's / eager's median.

How the run goes (per model)
----------------------------
One ``torch._dynamo.reset()``; every variant is compiled in turn (first call, timed as
``compile_s``) and warmed up (``max(--warmup, --stance-after)`` calls); its guard trees are
counted and its guard evaluation profiled once all variants exist; then ``--calls`` timed
calls per variant, round-robin in blocks of ``--block`` calls, with the garbage collector
off, so that machine noise hits every variant alike. Afterwards each variant is checked:
no recompilation while timing, output equal to eager's, and each standard policy offered
and kept exactly what torch's own function did (with and without ``+ift``).

Two details of torch 2.13 shape the run. Variants of one model share one code object and
so one cache-entry list, and Dynamo matches a cache entry to a call by backend *equality*;
two ``backend="eager"`` wrappers compare equal whatever their ``guard_filter_fn``, so each
variant gets its own backend function that calls the registered ``"eager"`` backend (same
compiled code, distinct cache entries). The list is most-recently-used first and lookup
compares backends in order, so each block starts with one untimed call that brings the
variant's entry to the front; the timed calls then measure what a single compiled model
pays.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import io
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import PolicyError
from ..loading import STD_POLICIES, load, load_std
from .._files import refuse_bad_outputs, write_file
from ._model_spec import MODEL_HELP
from ._models import DEMO_MODELS, output_tensor
from ..policy import Policy
from ..runtime import stats

EAGER = "eager"
BASELINE = "no filter"
IFT = " +ift"
IFT_CONFIG = {"install_free_tensors": True}

VIA_EAGER = "eager"
VIA_TORCH = "torch.compile"
VIA_GP = "gp.compile"


# --------------------------------------------------------------------------- recording


class RecordingFilter:
    """A ``guard_filter_fn`` that forwards to ``policy`` and counts what it decided.

    ``frames``: filter calls (torch makes one per compiled frame); ``offered``: guard
    entries passed in, summed over frames; ``kept``/``dropped``: ``True``/``False``
    decisions, summed over frames. All counts are plain guard counts.
    """

    def __init__(self, policy: Callable[[Any], Any]):
        self.policy = policy
        self.frames = 0
        self.offered = 0
        self.kept = 0

    @property
    def dropped(self) -> int:
        return self.offered - self.kept

    def counts(self) -> tuple[int, int, int]:
        return self.frames, self.offered, self.kept

    def __call__(self, entries):
        decisions = self.policy(entries)
        if len(decisions) != len(entries):
            raise AssertionError(f"policy returned {len(decisions)} decisions for {len(entries)} guards")
        self.frames += 1
        self.offered += len(entries)
        self.kept += sum(1 for d in decisions if d is True)
        return decisions


class _RecordingPolicy(Policy):
    """A ``Policy`` for ``guardpolicy.compile`` that decides as ``inner``, counts its
    decisions in ``recorder`` and reports ``inner``'s ``config`` plus ``extra_config``."""

    __slots__ = ("recorder", "_extra_config")

    def __init__(self, inner: Policy, extra_config: dict[str, Any] | None = None):
        super().__init__(inner._compiled)
        self.recorder = RecordingFilter(inner)
        self._extra_config = dict(extra_config or {})

    def __call__(self, entries):
        return self.recorder(entries)

    @property
    def config(self) -> dict[str, Any]:
        return {**super().config, **self._extra_config}


_TAG_PREFIX = "gpbench_"


def _tagged_backend(tag: str) -> Callable:
    """A backend function distinct per variant (see the module docstring) that calls the
    registered backend named in ``tag`` (``"eager:3"``, ``"inductor:3"``), so the compiled
    code is exactly that backend's."""
    from torch._dynamo import lookup_backend

    inner = lookup_backend(tag.split(":", 1)[0])

    def backend(gm, example_inputs, **kwargs):
        return inner(gm, example_inputs, **kwargs)

    backend.__name__ = backend.__qualname__ = _TAG_PREFIX + tag
    return backend


def _backend_tag(cache_entry) -> str | None:
    """The variant tag of a cache entry made by ``_tagged_backend``, else None."""
    fn = getattr(getattr(cache_entry, "backend", None), "compiler_fn", None)
    name = getattr(fn, "__name__", "")
    return name[len(_TAG_PREFIX):] if name.startswith(_TAG_PREFIX) else None


# --------------------------------------------------------------------------- guard trees


def _tree_api_available() -> bool:
    """Whether torch exposes what ``count_tree_guards`` needs (checked, not assumed)."""
    try:
        from torch._C._dynamo import guards as g
        from torch._dynamo import eval_frame
    except ImportError:
        return False
    return (
        hasattr(eval_frame, "_debug_get_cache_entry_list")
        and all(hasattr(g.GuardManager, m) for m in ("get_leaf_guards", "get_child_managers"))
        and hasattr(g, "RootGuardManager")
    )


def count_tree_guards(guard_manager) -> int:
    """Guards in one guard-manager tree (a count).

    ``guard_manager`` is a cache entry's ``GuardManagerWrapper`` (or a ``RootGuardManager``
    such as its ``diff_guard_root``). Walks ``get_child_managers()`` and dict key/value
    managers from the root and counts every leaf guard once (relational guards hang under
    several managers and are deduplicated by identity), plus the root's epilogue lambda
    guards (shape-env and aliasing lambdas).
    """
    root = getattr(guard_manager, "root", guard_manager)
    alive: list[Any] = []  # keep the wrappers alive so id() stays unique during the walk
    seen_managers: set[int] = set()
    seen_leaves: set[int] = set()
    pending = [root]
    while pending:
        manager = pending.pop()
        alive.append(manager)
        if id(manager) in seen_managers:
            continue
        seen_managers.add(id(manager))
        for leaf in manager.get_leaf_guards():
            alive.append(leaf)
            seen_leaves.add(id(leaf))
        pending.extend(manager.get_child_managers())
        if hasattr(manager, "get_key_value_managers"):
            for key_mgr, value_mgr in manager.get_key_value_managers().values():
                pending.extend(m for m in (key_mgr, value_mgr) if m is not None)
    epilogue = root.get_epilogue_lambda_guards() if hasattr(root, "get_epilogue_lambda_guards") else []
    return len(seen_leaves) + len(epilogue)


def _code_owner(model) -> Callable:
    """What holds the compiled code object: ``type(model).forward`` for an ``nn.Module``,
    else the function itself."""
    import torch

    return type(model).forward if isinstance(model, torch.nn.Module) else model


def _cache_entries(model) -> list:
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    try:
        return list(_debug_get_cache_entry_list(_code_owner(model)))
    except Exception:  # a callable Dynamo cannot map to a code object
        return []


# --------------------------------------------------------------------------- guard evaluation


def _profile_fn() -> Callable | None:
    """``torch._C._dynamo.guards.profile_guard_manager`` where torch has it, else None."""
    try:
        from torch._C._dynamo import guards as g
    except ImportError:
        return None
    return getattr(g, "profile_guard_manager", None)


def frame_locals(model, inputs: tuple) -> dict[str, Any] | None:
    """The compiled frame's locals on entry: the forward's (or function's) parameters bound
    to ``inputs`` by name, defaults applied, plus its closure's free variables; None when
    the signature cannot be bound."""
    fn = _code_owner(model)
    try:
        sig = inspect.signature(fn, follow_wrapped=False)  # the compiled code's own names
        bound = sig.bind(model, *inputs) if fn is not model else sig.bind(*inputs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    f_locals = dict(bound.arguments)
    # a decorated forward (transformers wraps many) is a closure: its frame sees the free
    # variables too, and Dynamo guards them as locals (L['func'])
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is not None and closure:
        try:
            f_locals.update((n, c.cell_contents) for n, c in zip(code.co_freevars, closure))
        except ValueError:  # an empty cell
            return None
    return f_locals


WARM_SAMPLES = 15  # samples of back-to-back root.check calls per variant
WARM_SAMPLE_S = 0.001  # about this long each


def _checks_per_sample(root, f_locals: dict) -> int:
    """How many back-to-back ``root.check`` calls last about ``WARM_SAMPLE_S``."""
    t0 = time.perf_counter_ns()
    for _ in range(3):
        root.check(f_locals)
    one = max((time.perf_counter_ns() - t0) / 3, 50)
    return max(1, min(20_000, int(WARM_SAMPLE_S * 1e9 / one)))


def _warm_sample_ns(root, f_locals: dict, number: int) -> float:
    """ns per ``root.check(f_locals)``, averaged over ``number`` back-to-back checks."""
    check = root.check
    t0 = time.perf_counter_ns()
    for _ in range(number):
        check(f_locals)
    return (time.perf_counter_ns() - t0) / number


# --------------------------------------------------------------------------- variants


@dataclass
class Variant:
    """One row. Counts are guards (summed over compiled frames); latencies are per call in
    µs; ratios are medians divided by the baseline's / eager's median."""

    name: str
    via: str  # VIA_EAGER, VIA_TORCH or VIA_GP
    kind: str  # eager, baseline, ift, ift_torch, stance, stance_torch, std, torch_fn, policy, policy_torch
    source: str | None = None  # std policy name, torch function, or policy file
    config: dict[str, Any] = field(default_factory=dict)
    stance_after: int | None = None
    stance_torch: bool = False  # timed calls run under set_stance(skip_guard_eval_unsafe=True)
    pair: str | None = None  # name of the variant whose counts must equal this one's
    frames: int | None = None
    offered: int | None = None
    kept: int | None = None
    dropped: int | None = None
    tree_guards: int | None = None
    run_tree_guards: int | None = None  # the tree that runs per call (diff tree under the stance)
    guard_eval_us: float | None = None  # profile_guard_manager (cold caches)
    guard_check_us: float | None = None  # root.check in a loop (warm)
    compile_s: float | None = None
    median_us: float | None = None
    p90_us: float | None = None
    vs_baseline: float | None = None
    vs_eager: float | None = None
    matches_eager: bool | None = None
    problems: list[str] = field(default_factory=list)
    # how to build it, and runtime state; not reported
    make: Callable[[Any, str], tuple[Any, Any]] | None = field(default=None, repr=False)
    setup_ctx: Callable[[], Any] | None = field(default=None, repr=False)
    timed_ctx: Callable[[], Any] | None = field(default=None, repr=False)
    tag: str = field(default="", repr=False)
    fn: Any = field(default=None, repr=False)
    recorder: Any = field(default=None, repr=False)
    samples_ns: list[int] = field(default_factory=list, repr=False)

    @property
    def compiled(self) -> bool:
        return self.via != VIA_EAGER

    @property
    def uses_diff_tree(self) -> bool:
        """Whether calls run under ``skip_guard_eval_unsafe`` (the diff tree) when timed."""
        return self.stance_after is not None or self.stance_torch


def _torch_compile(model, tag: str, guard_filter_fn=None):
    import torch

    options = {"guard_filter_fn": guard_filter_fn} if guard_filter_fn is not None else {}
    return torch.compile(model, backend=_tagged_backend(tag), options=options)


def _gp_compile(model, tag: str, policy: _RecordingPolicy):
    from ..runtime import compile as gp_compile

    return gp_compile(model, policy, backend=_tagged_backend(tag))


def _config_patch(config: dict[str, Any]) -> Callable[[], Any]:
    def ctx():
        import torch

        return torch._dynamo.config.patch(**config)

    return ctx


def _skip_guard_eval_stance():
    import torch

    return torch.compiler.set_stance(skip_guard_eval_unsafe=True)


def _gp_variant(name: str, kind: str, source: str | None, policy: Policy, extra_config=None,
                pair: str | None = None) -> Variant:
    """A ``guardpolicy.compile`` variant of ``policy`` (its config plus ``extra_config``)."""
    probe = _RecordingPolicy(policy, extra_config)
    stance = probe.stance
    return Variant(
        name=name, via=VIA_GP, kind=kind, source=source, config=probe.config,
        stance_after=stance[1] if stance and stance[0] == "skip_guard_eval_unsafe" else None,
        pair=pair,
        make=lambda model, tag: _make_gp(model, tag, policy, extra_config),
    )


def _make_gp(model, tag: str, policy: Policy, extra_config):
    recording = _RecordingPolicy(policy, extra_config)
    return _gp_compile(model, tag, recording), recording.recorder


def _torch_way_variant(path: str, policy: Policy) -> Variant:
    """``POLICY (torch)``: the policy as plain ``guard_filter_fn`` of ``torch.compile``, its
    ``config`` patched once around compilation and around each block of timed calls, its
    stance (if any) entered around each block of timed calls: what the policy costs
    without ``guardpolicy.compile``'s per-call wrapper."""
    config = policy.config
    stance = policy.stance is not None and policy.stance[0] == "skip_guard_eval_unsafe"

    def setup_ctx():
        return _config_patch(config)() if config else contextlib.nullcontext()

    def timed_ctx():
        stack = contextlib.ExitStack()
        if config:
            stack.enter_context(_config_patch(config)())
        if stance:
            stack.enter_context(_skip_guard_eval_stance())
        return stack

    def make(m, tag):
        rec = RecordingFilter(policy)
        return _torch_compile(m, tag, rec), rec

    return Variant(policy.name + " (torch)", VIA_TORCH, "policy_torch", source=path, config=dict(config),
                   stance_torch=stance, make=make, setup_ctx=setup_ctx, timed_ctx=timed_ctx)


def _std_ift_source(name: str) -> str:
    """A policy using the std policy ``name`` with ``install_free_tensors`` on (the used
    policy's ``default`` is not inherited by ``use``, so it is restated)."""
    default = load_std(name).default_decision
    return (
        "guardpolicy 1\n\n"
        f"unsafe policy {name}_ift {{\n"
        f"  use {name}\n"
        f"  default {default}\n"
        "  config install_free_tensors = true\n"
        "}\n"
    )


KEEP_ALL_IFT = """guardpolicy 1

policy no_filter_ift {
  default keep
  config install_free_tensors = true
}
"""


def stance_policy_source(after: int) -> str:
    """Keep every guard; ``skip_guard_eval_unsafe`` after ``after`` quiet calls."""
    return (
        "guardpolicy 1\n\n"
        "unsafe policy stance_after_warmup {\n"
        "  default keep\n"
        f"  stance skip_guard_eval_unsafe after {after} calls\n"
        "}\n"
    )


def make_variants(policies: list[tuple[str, Policy]], stance_after: int) -> list[Variant]:
    """Every row, in table order: eager, the baseline, the install_free_tensors and stance
    variants, four per standard policy, then up to three per ``(file, policy)`` in
    ``policies`` (see the module docstring)."""
    import torch

    out = [
        Variant(EAGER, VIA_EAGER, "eager"),
        Variant(BASELINE, VIA_TORCH, "baseline", make=lambda m, tag: (_torch_compile(m, tag), None)),
        _gp_variant(BASELINE + IFT, "ift", None, load(KEEP_ALL_IFT)),
        Variant(BASELINE + IFT + " (torch)", VIA_TORCH, "ift_torch", config=dict(IFT_CONFIG),
                make=lambda m, tag: (_torch_compile(m, tag), None),
                setup_ctx=_config_patch(IFT_CONFIG), timed_ctx=_config_patch(IFT_CONFIG)),
        _gp_variant(f"stance after {stance_after}", "stance", None, load(stance_policy_source(stance_after))),
        Variant("set_stance (torch)", VIA_TORCH, "stance_torch", stance_torch=True,
                make=lambda m, tag: (_torch_compile(m, tag), None), timed_ctx=_skip_guard_eval_stance),
    ]
    for name in STD_POLICIES:
        torch_name = f"{name}_unsafe"
        torch_fn = getattr(torch.compiler, torch_name, None)
        label = f"torch.{torch_name}"

        def make_std(m, tag, name=name):
            rec = RecordingFilter(load_std(name))
            return _torch_compile(m, tag, rec), rec

        out.append(Variant(name, VIA_TORCH, "std", source=name, pair=label if torch_fn else None, make=make_std))
        if torch_fn is not None:
            def make_torch(m, tag, fn=torch_fn):
                rec = RecordingFilter(fn)
                return _torch_compile(m, tag, rec), rec

            out.append(Variant(label, VIA_TORCH, "torch_fn", source=f"torch.compiler.{torch_name}", make=make_torch))
        out.append(_gp_variant(name + IFT, "std", name, load(_std_ift_source(name)),
                               pair=label + IFT if torch_fn else None))
        if torch_fn is not None:
            out.append(Variant(label + IFT, VIA_TORCH, "torch_fn", source=f"torch.compiler.{torch_name}",
                               config=dict(IFT_CONFIG), make=make_torch,
                               setup_ctx=_config_patch(IFT_CONFIG), timed_ctx=_config_patch(IFT_CONFIG)))
    for path, policy in policies:
        out.append(_gp_variant(policy.name, "policy", path, policy))
        if policy.config or policy.stance:
            out.append(_torch_way_variant(path, policy))
        if policy.config.get("install_free_tensors") is not True:  # else the same variant twice
            out.append(_gp_variant(policy.name + IFT, "policy", path, policy, IFT_CONFIG))
    names = [v.name for v in out]
    for i, v in enumerate(out):
        v.tag = str(i)
        if names.count(v.name) > 1:  # two --policy files naming the same policy
            v.name = f"{v.name} #{i}"
    return out


# --------------------------------------------------------------------------- the run


class Progress:
    """Progress lines on stderr: rewritten in place on a terminal, else one line per
    quarter of each phase."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self._bucket: tuple[str, int] | None = None

    def step(self, label: str, i: int, n: int, detail: str = "") -> None:
        if not self.enabled:
            return
        msg = f"bench: {label} {i}/{n}" + (f" {detail}" if detail else "")
        if self.tty:
            sys.stderr.write("\r\033[K" + msg)
        else:
            bucket = (label, (4 * i) // max(n, 1))
            if bucket == self._bucket and i != 1:
                return
            self._bucket = bucket
            sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _same(out, ref) -> bool:
    import torch

    out, ref = output_tensor(out), output_tensor(ref)
    return isinstance(out, torch.Tensor) and out.shape == ref.shape and bool(torch.allclose(out, ref))


def _ctx(factory) -> Any:
    return factory() if factory is not None else contextlib.nullcontext()


def _percentile(sorted_values: list[int], q: float) -> float:
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return float(sorted_values[idx])


@dataclass
class RunOptions:
    calls: int = 300
    warmup: int = 20
    block: int = 10
    guard_iters: int = 10
    stance_after: int = 10
    backend: str = "eager"  # every compiled variant's: "eager" or "inductor"


def _compile_all(model, inputs, ref, variants: list[Variant], warmup: int, progress: Progress, label: str,
                 backend: str = "eager") -> None:
    """Compiles and warms up every variant; fills compile_s, frames/offered/kept/dropped."""
    from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics

    compiled = [v for v in variants if v.compiled]
    for v in variants:
        if not v.compiled:
            v.fn = model
            for _ in range(warmup):
                model(*inputs)
            continue
        progress.step(f"{label}: compiling", compiled.index(v) + 1, len(compiled), v.name)
        clear_compilation_metrics()
        v.tag = f"{backend}:{v.tag.rsplit(':', 1)[-1]}"
        v.fn, v.recorder = v.make(model, v.tag)
        with _ctx(v.setup_ctx):
            t0 = time.perf_counter()
            out = v.fn(*inputs)
            v.compile_s = time.perf_counter() - t0
            for _ in range(warmup):
                out = v.fn(*inputs)
        v.matches_eager = _same(out, ref)
        metrics = [m for m in get_compilation_metrics() if getattr(m, "guard_count", None) is not None]
        pre_filter = sum(m.guard_count for m in metrics)
        if v.recorder is not None:
            v.frames, v.offered, v.kept = v.recorder.counts()
            v.dropped = v.recorder.dropped
            if metrics and pre_filter != v.offered:
                v.problems.append(f"filter was offered {v.offered} guards, Dynamo recorded {pre_filter}")
        else:
            v.frames, v.offered, v.kept, v.dropped = len(metrics), pre_filter, pre_filter, 0
        if v.stance_after is not None and v.via == VIA_GP and not stats(v.fn).stance_active:
            v.problems.append(f"stance not active after {warmup} warm-up calls")


def _measure_guards(model, inputs, variants: list[Variant], guard_iters: int, tree_api: bool) -> None:
    """Tree guard counts and guard-evaluation time per compiled variant (all compiled).

    Guard evaluation is sampled round-robin over the variants, as the calls are: per round
    and variant one ``profile_guard_manager(root, f_locals, 1)`` (the first ``guard_iters``
    rounds; torch evicts the caches before the check) and one sample of back-to-back
    ``root.check(f_locals)`` calls. The cold figure is the median of its samples (the
    eviction makes each one vary), the warm figure the best sample, as ``timeit`` advises
    for deterministic work on a shared machine."""
    profile = _profile_fn() if guard_iters > 0 else None
    f_locals = frame_locals(model, inputs)
    entries = _cache_entries(model) if tree_api else []
    timed: list[tuple[Variant, Any, int]] = []
    for v in variants:
        if not v.compiled:
            continue
        own = [e for e in entries if _backend_tag(e) == v.tag]
        # resume functions after a graph break live on other code objects: only complete trees
        if not own or v.frames is None or len(own) != v.frames:
            continue
        try:
            v.tree_guards = sum(count_tree_guards(e.guard_manager) for e in own)
            roots = [e.guard_manager.diff_guard_root if v.uses_diff_tree else e.guard_manager.root for e in own]
            if any(r is None for r in roots):
                v.problems.append("no diff guard tree for skip_guard_eval_unsafe")
                continue
            v.run_tree_guards = sum(count_tree_guards(r) for r in roots)
        except Exception as exc:  # an API shape we did not expect: omit, never guess
            v.problems.append(f"guard tree not countable: {exc!r}")
            continue
        if len(own) != 1 or f_locals is None or not roots[0].check(f_locals):
            continue  # several entries, or arguments Dynamo would not see as we bound them
        timed.append((v, roots[0], _checks_per_sample(roots[0], f_locals)))
    cold: dict[str, list[float]] = {v.name: [] for v, _, _ in timed}
    warm: dict[str, list[float]] = {v.name: [] for v, _, _ in timed}
    for r_i in range(max(WARM_SAMPLES, guard_iters)):
        for v, root, number in timed[r_i % max(len(timed), 1):] + timed[:r_i % max(len(timed), 1)]:
            if profile is not None and r_i < guard_iters:
                cold[v.name].append(float(profile(root, f_locals, 1)))
            if r_i < WARM_SAMPLES:
                warm[v.name].append(_warm_sample_ns(root, f_locals, number))
    for v, _, _ in timed:
        if cold[v.name]:
            v.guard_eval_us = statistics.median(cold[v.name])
        v.guard_check_us = min(warm[v.name]) / 1000.0  # deterministic work: noise only adds


def _time_all(inputs, variants: list[Variant], calls: int, block: int, progress: Progress, label: str) -> None:
    """``calls`` individually timed calls per variant, round-robin in blocks of ``block``."""
    rounds = math.ceil(calls / block)
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r_i in range(rounds):
            progress.step(f"{label}: timing round", r_i + 1, rounds)
            n = min(block, calls - r_i * block)
            shift = r_i % len(variants)  # rotate who goes first
            for v in variants[shift:] + variants[:shift]:
                fn, samples = v.fn, v.samples_ns
                with _ctx(v.timed_ctx):
                    fn(*inputs)  # untimed: brings this variant's cache entry to the front
                    for _ in range(n):
                        t0 = time.perf_counter_ns()
                        fn(*inputs)
                        samples.append(time.perf_counter_ns() - t0)
    finally:
        if gc_was_enabled:
            gc.enable()


def warmup_calls(opts: RunOptions, variants: list[Variant]) -> int:
    """Untimed calls per variant after compiling: ``opts.warmup``, or more when a stance
    needs more quiet calls to switch."""
    return max(opts.warmup, max((v.stance_after or 0) for v in variants))


def run_model(label: str, model, inputs: tuple, variants: list[Variant], opts: RunOptions,
              progress: Progress | None = None, tree_api: bool | None = None) -> list[Variant]:
    """Measures ``model(*inputs)`` under every variant (see the module docstring) and
    returns them with their numbers filled in."""
    import torch

    progress = progress or Progress(False)
    tree_api = _tree_api_available() if tree_api is None else tree_api
    warmup = warmup_calls(opts, variants)
    with torch.no_grad():
        ref = model(*inputs)

    torch._dynamo.reset()
    compiled = [v for v in variants if v.compiled]
    limit = max(torch._dynamo.config.recompile_limit, len(compiled) + 8)
    acc_limit = max(torch._dynamo.config.accumulated_recompile_limit, 4 * len(compiled) + 64)
    try:
        with torch._dynamo.config.patch(recompile_limit=limit, accumulated_recompile_limit=acc_limit), \
                torch.no_grad():
            _compile_all(model, inputs, ref, variants, warmup, progress, label, opts.backend)
            counts = {v.name: v.recorder.counts() for v in compiled if v.recorder is not None}
            progress.step(f"{label}: guard trees and evaluation", 1, 1)
            _measure_guards(model, inputs, variants, opts.guard_iters, tree_api)
            entries_before = len(_cache_entries(model))
            _time_all(inputs, variants, opts.calls, opts.block, progress, label)
            entries_after = len(_cache_entries(model))
            for v in compiled:
                if v.recorder is not None and v.recorder.counts() != counts[v.name]:
                    v.problems.append("recompiled while being timed")
                if entries_after != entries_before:
                    v.problems.append("cache entries changed while timing")
                with _ctx(v.timed_ctx):
                    out = v.fn(*inputs)
                if not _same(out, ref):
                    v.matches_eager = False
                    v.problems.append("output differs from eager after timing")
    finally:
        progress.done()
        torch._dynamo.reset()

    by_name = {v.name: v for v in variants}
    for v in variants:
        other = by_name.get(v.pair) if v.pair else None
        if other is not None and (v.frames, v.offered, v.kept) != (other.frames, other.offered, other.kept):
            v.problems.append(
                f"frames/offered/kept {v.frames}/{v.offered}/{v.kept}, but {other.name} "
                f"{other.frames}/{other.offered}/{other.kept}")
    for v in variants:
        s = sorted(v.samples_ns)
        v.median_us = statistics.median(s) / 1000.0
        v.p90_us = _percentile(s, 0.9) / 1000.0
    eager_us = by_name[EAGER].median_us
    base_us = by_name[BASELINE].median_us
    for v in variants:
        v.vs_eager = v.median_us / eager_us
        v.vs_baseline = v.median_us / base_us
    return variants


# --------------------------------------------------------------------------- output


def machine_description() -> str:
    """CPU model (platform.processor(), else /proc/cpuinfo), architecture and CPU count."""
    cpu = platform.processor()
    if not cpu:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
    return f"{cpu or 'unknown CPU'} ({platform.machine()}), {os.cpu_count()} CPUs"


def _fmt(value, spec: str = "d") -> str:
    return "-" if value is None else format(value, spec)


def _tree_cell(v: Variant) -> str:
    if v.tree_guards is None:
        return "-"
    if v.uses_diff_tree and v.run_tree_guards is not None:
        return f"{v.tree_guards}>{v.run_tree_guards}"
    return str(v.tree_guards)


def format_table(rows: list[Variant], header: str) -> str:
    """The aligned text table for one model: ``header``, then one line per row (counts in
    guards, times in µs, ratios of medians)."""
    cols = ["variant", "via", "offered", "kept", "tree", "guard µs", "warm µs",
            "median µs", "p90 µs", "vs base", "vs eager", "ok"]
    body = []
    for v in rows:
        body.append([
            v.name, v.via, _fmt(v.offered), _fmt(v.kept), _tree_cell(v),
            _fmt(v.guard_eval_us, ".1f"), _fmt(v.guard_check_us, ".2f"),
            _fmt(v.median_us, ".1f"), _fmt(v.p90_us, ".1f"),
            _fmt(v.vs_baseline, ".2f") + "x", _fmt(v.vs_eager, ".2f") + "x",
            "ref" if not v.compiled else ("✓" if v.matches_eager and not v.problems else "✗"),
        ])
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(cols)]

    def line(cells):
        out = [cells[0].ljust(widths[0]), cells[1].ljust(widths[1])]
        out += [c.rjust(w) for c, w in zip(cells[2:], widths[2:])]
        return "  ".join(out).rstrip()

    lines = [header, line(cols), line(["-" * w for w in widths])]
    lines += [line(r) for r in body]
    return "\n".join(lines)


LEGEND = (
    "offered/kept: guards the filter saw and kept, summed over compiled frames (no filter: Dynamo's "
    "pre-filter count); tree: guards in the final guard-manager tree(s), full>diff for the stance "
    "rows (diff: what skip_guard_eval_unsafe runs); guard µs: torch's profile_guard_manager, one "
    "check after evicting the caches (median); warm µs: root.check back to back (best of 15 ~1 ms samples); median/p90 µs: per call; vs: median "
    "ratios; +ift: install_free_tensors=True; gp.compile rows include its per-call config.patch / "
    "set_stance wrapper, (torch) rows set them once around the timed calls."
)

_REPORTED = (
    "name", "via", "kind", "source", "config", "stance_after", "frames", "offered", "kept", "dropped",
    "tree_guards", "run_tree_guards", "guard_eval_us", "guard_check_us", "compile_s", "median_us",
    "p90_us", "vs_baseline", "vs_eager", "matches_eager", "problems",
)


def row_json(v: Variant) -> dict[str, Any]:
    """One row for ``--json``: every number of the table plus frames, config and compile s."""
    row = {k: getattr(v, k) for k in _REPORTED}
    row["config"] = dict(v.config)
    row["problems"] = list(v.problems)
    row["compiled"] = v.compiled
    return row


def write_plot(path: str, report: dict[str, Any]) -> None:
    """A PNG bar chart: per model, the median per-call µs of every variant (bar) and its
    p90 (tick), with the baseline's median as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = report["models"]
    heights = [max(3.0, 0.28 * len(rows) + 1.2) for rows in models.values()]
    fig, axes = plt.subplots(len(models), 1, figsize=(11, sum(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    colors = {VIA_EAGER: "#999999", VIA_TORCH: "#4c72b0", VIA_GP: "#dd8452"}
    for ax, (model, rows) in zip(axes[:, 0], models.items()):
        names = [r["name"] for r in rows]
        y = list(range(len(rows)))
        ax.barh(y, [r["median_us"] for r in rows], color=[colors.get(r["via"], "#55a868") for r in rows])
        ax.scatter([r["p90_us"] for r in rows], y, marker="|", color="black", s=80, zorder=3, label="p90")
        base = next(r["median_us"] for r in rows if r["name"] == BASELINE)
        ax.axvline(base, linestyle="--", color="black", linewidth=0.8, label="no filter median")
        ax.set_yticks(y, names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("µs per call (median; tick: p90)")
        ax.set_title(f"{model}: {report['calls']} calls per variant, torch {report['torch']}", fontsize=9)
        handles = [matplotlib.patches.Patch(color=c, label=k) for k, c in colors.items()]
        ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=100, format="png")
    plt.close(fig)
    write_file(path, png.getvalue())


# --------------------------------------------------------------------------- command line


def _positive(flag: str, minimum: int = 1) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} must be at least {minimum}")
        return value

    return parse


def build_parser(prog: str = "python -m guardpolicy bench") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Per-call guard overhead of a model compiled with no filter, with each --policy, with "
            "torch's six built-in filters (as std policies and as torch's own functions), each also "
            "with install_free_tensors, and with skip_guard_eval_unsafe after warm-up; measured in "
            "one interleaved run. The table goes to stdout, progress to stderr."),
    )
    parser.add_argument("--model", nargs="+", action="extend", metavar="MODEL",
                        help=f"{MODEL_HELP}; several allowed (default: {' '.join(DEMO_MODELS)})")
    parser.add_argument("--policy", nargs="+", action="extend", default=[], metavar="FILE[:NAME]",
                        help="policy files to measure too (FILE:NAME picks one policy of a file)")
    parser.add_argument("--calls", type=_positive("--calls"), default=300,
                        help="timed calls per variant (default 300)")
    parser.add_argument("--warmup", type=_positive("--warmup", 0), default=20,
                        help="untimed calls per variant after compiling (default 20, at least --stance-after)")
    parser.add_argument("--block", type=_positive("--block"), default=10,
                        help="consecutive timed calls per variant per round (default 10)")
    parser.add_argument("--stance-after", type=_positive("--stance-after"), default=10,
                        help="quiet calls before the stance variant switches to skip_guard_eval_unsafe (default 10)")
    parser.add_argument("--guard-iters", type=_positive("--guard-iters", 0), default=10,
                        help="profile_guard_manager samples per variant (each evicts the CPU caches "
                             "first, about 15 ms; 0 skips them; default 10)")
    parser.add_argument("--threads", type=_positive("--threads"), default=1,
                        help="torch intra-op threads while measuring (default 1: steadier on a busy machine)")
    parser.add_argument("--backend", choices=("eager", "inductor"), default="eager",
                        help="the backend of every compiled variant (default eager; inductor compiles "
                             "each variant, minutes per model)")
    parser.add_argument("--json", metavar="OUT", help="also write every number as JSON to OUT")
    parser.add_argument("--plot", metavar="OUT.png", help="also write a PNG bar chart to OUT.png (matplotlib)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return parser


def _load_policies(parser: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, Policy]]:
    out = []
    for spec in specs:
        path, name = spec, None
        if not os.path.exists(spec) and ":" in spec:
            path, name = spec.rsplit(":", 1)
        if not os.path.isfile(path):
            parser.error(f"--policy: no such file: {path}")
        try:
            out.append((spec, load(path, policy=name)))
        except PolicyError as exc:
            parser.error(f"--policy {spec}:\n{exc}")
    return out


def _resolve_models(parser: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, Callable]]:
    """``(label, builder)`` per ``--model`` spec (``_model_spec``); ``builder()`` returns
    ``(model, positional inputs)``: keyword inputs are bound to positions where the model's
    signature allows it."""
    from . import _model_spec

    out = []
    for spec in specs:
        try:
            resolved = _model_spec.resolve(spec)
        except _model_spec.ModelSpecError as exc:
            parser.error(f"--model {spec}: {exc}")
        out.append((resolved.label, lambda r=resolved: _positional(r.build())))
    labels = [label for label, _ in out]
    return [(label if labels.count(label) == 1 else f"{label} #{i + 1}", builder)
            for i, (label, builder) in enumerate(out)]


def _positional(built) -> tuple[Any, tuple]:
    """``(model, inputs)`` with ``built``'s keyword inputs bound to their positions."""
    if not built.kwargs:
        return built.fn, built.args
    fn = _code_owner(built.fn)
    bound = inspect.signature(fn).bind(*((built.fn,) if fn is not built.fn else ()), *built.args, **built.kwargs)
    args, kwargs = bound.args, bound.kwargs
    if kwargs:
        raise ValueError(f"the bench passes inputs by position; {', '.join(kwargs)} can only be given by keyword")
    return built.fn, tuple(args[1:] if fn is not built.fn else args)


def main(argv: list[str] | None = None, prog: str = "python -m guardpolicy bench") -> int:
    """Runs the bench; returns 0 when every compiled variant matches eager and every
    cross-check holds, 1 otherwise, 2 on bad arguments, models or policy files."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    refuse_bad_outputs(parser, [args.json, args.plot], [*args.policy, *(args.model or [])])
    models = _resolve_models(parser, args.model or list(DEMO_MODELS))
    policies = _load_policies(parser, args.policy)

    t_start = time.perf_counter()
    import torch

    torch.set_num_threads(args.threads)
    opts = RunOptions(calls=args.calls, warmup=args.warmup, block=args.block,
                      guard_iters=args.guard_iters, stance_after=args.stance_after, backend=args.backend)
    progress = Progress(not args.quiet)
    tree_api = _tree_api_available()
    machine = machine_description()
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "machine": machine,
        "torch_threads": torch.get_num_threads(),
        "command": " ".join([prog, *(shlex.quote(a) for a in argv)]),
        "date": time.strftime("%Y-%m-%d"),
        "calls": opts.calls,
        "backend": opts.backend,
        "warmup": {},
        "block": opts.block,
        "guard_iters": opts.guard_iters,
        "profile_guard_manager": _profile_fn() is not None,
        "units": {"latency": "µs per call", "guard_eval": "µs per guard-tree check",
                  "counts": "guards, summed over compiled frames"},
        "models": {},
    }
    failed = False
    for i, (label, builder) in enumerate(models):
        try:
            model, inputs = builder()
        except ValueError as exc:  # ModelSpecError: says where
            print(f"{prog}: error: --model {label}: {exc}", file=sys.stderr)
            return 2
        variants = make_variants(policies, opts.stance_after)
        rows = run_model(label, model, inputs, variants, opts, progress, tree_api)
        report["warmup"][label] = warmup_calls(opts, rows)
        header = (
            f"== {label} | {opts.backend} backend | torch {torch.__version__} | {opts.calls} timed calls per variant "
            f"(interleaved, blocks of {opts.block}, {report['warmup'][label]} warm-up) | {machine}, "
            f"{torch.get_num_threads()} torch threads"
        )
        if i:
            print()
        print(format_table(rows, header))
        for v in rows:
            for p in v.problems:
                print(f"  ✗ {v.name}: {p}")
            if v.compiled and (not v.matches_eager or v.problems):
                failed = True
        report["models"][label] = [row_json(v) for v in rows]
        sys.stdout.flush()

    print()
    print(LEGEND)
    elapsed = time.perf_counter() - t_start
    report["wall_s"] = elapsed
    print(f"total {elapsed:.1f} s")
    if args.json:
        write_file(args.json, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        write_plot(args.plot, report)
        print(f"wrote {args.plot}")
    if failed:
        print("FAILED: a compiled variant differs from eager or a cross-check did not hold", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
