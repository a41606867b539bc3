"""The bench command's rows, in table order (``make_rows``): eager, the baseline, the
install_free_tensors and stance variants, four per standard policy, then up to three per
``--policy`` file; see ``guardpolicy.tools.bench`` (the module docstring) for each. Each
variant compiles with its own tagged backend (``tagged_backend``), which gives it its own
cache entries (``backend_tag`` finds them)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ...api.loading import STD_POLICIES, load, load_std
from ...api.policy import Policy
from ...api.policy_text import PolicyText
from ...runtime import torch_internals
from ..common.recording import Recording
from ..common.timing import Variant

EAGER = "eager"
BASELINE = "no filter"
IFT = " +ift"
IFT_CONFIG = {"install_free_tensors": True}

VIA_EAGER = "eager"
VIA_TORCH = "torch.compile"
VIA_GP = "gp.compile"

TAG_PREFIX = "gpbench_"


def tagged_backend(tag: str) -> Callable:
    """A backend function distinct per variant (see the module docstring) that calls the
    registered backend named in ``tag`` (``"eager:3"``, ``"inductor:3"``), so the compiled
    code is exactly that backend's."""
    inner = torch_internals.lookup_backend(tag.split(":", 1)[0])

    def backend(gm, example_inputs, **kwargs):
        return inner(gm, example_inputs, **kwargs)

    backend.__name__ = backend.__qualname__ = TAG_PREFIX + tag
    return backend


def backend_tag(cache_entry) -> str | None:
    """The variant tag of a cache entry made by ``tagged_backend``, else None."""
    fn = getattr(getattr(cache_entry, "backend", None), "compiler_fn", None)
    name = getattr(fn, "__name__", "")
    return name[len(TAG_PREFIX):] if name.startswith(TAG_PREFIX) else None


@dataclass
class Row:
    """One row of the table: the timed ``variant`` (``guardpolicy.tools.common.timing.Variant``: its
    label is the row's name; ``fn`` the compiled model, ``setup_ctx`` entered around its
    compile and warm-up, ``block_ctx`` around each block of timed calls) and what the bench
    reports of it. Counts are guards (summed over compiled frames); latencies are per call in
    µs; ratios are medians divided by the baseline's / eager's median."""

    variant: Variant
    via: str  # VIA_EAGER, VIA_TORCH or VIA_GP
    kind: str  # eager, baseline, ift, ift_torch, stance, stance_torch, std, torch_fn, policy, policy_torch
    source: str | None = None  # std policy name, torch function, or policy file
    config: dict[str, Any] = field(default_factory=dict)
    stance_after: int | None = None
    stance_torch: bool = False  # timed calls run under set_stance(skip_guard_eval_unsafe=True)
    pair: str | None = None  # name of the row whose counts must equal this one's
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
    tag: str = field(default="", repr=False)
    recorder: Any = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.variant.label

    @name.setter
    def name(self, value: str) -> None:
        self.variant.label = value

    @property
    def compiled(self) -> bool:
        return self.via != VIA_EAGER

    @property
    def uses_diff_tree(self) -> bool:
        """Whether calls run under ``skip_guard_eval_unsafe`` (the diff tree) when timed."""
        return self.stance_after is not None or self.stance_torch


def _recording_policy(inner: Policy, extra_config: dict[str, Any] | None = None) -> tuple[Policy, Recording]:
    """A ``Policy`` for ``guardpolicy.compile`` that decides as ``inner``, counts its
    decisions in the ``Recording`` returned with it, and has ``inner``'s ``config`` plus
    ``extra_config``."""
    recorder = Recording(inner)
    return recorder.policy(inner, extra_config), recorder


def _torch_compile(model, tag: str, guard_filter_fn=None):
    import torch

    options = {"guard_filter_fn": guard_filter_fn} if guard_filter_fn is not None else {}
    return torch.compile(model, backend=tagged_backend(tag), options=options)


def _gp_compile(model, tag: str, policy: Policy):
    from ...runtime.compiled import compile as gp_compile
    from ...runtime.logs import tool_objects

    with tool_objects():  # the bench's own object: its stance recoveries are not the user's news
        return gp_compile(model, policy, backend=tagged_backend(tag))


def _config_patch(config: dict[str, Any]) -> Callable[[], Any]:
    def ctx():
        return torch_internals.config_patch(**config)

    return ctx


def _skip_guard_eval_stance():
    import torch

    return torch.compiler.set_stance(skip_guard_eval_unsafe=True)


def _gp_variant(name: str, kind: str, source: str | None, policy: Policy, extra_config=None,
                pair: str | None = None) -> Row:
    """A ``guardpolicy.compile`` variant of ``policy`` (its config plus ``extra_config``)."""
    probe, _ = _recording_policy(policy, extra_config)
    return Row(
        Variant(name), via=VIA_GP, kind=kind, source=source, config=probe.config,
        stance_after=probe.stance_warmup,
        pair=pair,
        make=lambda model, tag: _make_gp(model, tag, policy, extra_config),
    )


def _make_gp(model, tag: str, policy: Policy, extra_config):
    recording, recorder = _recording_policy(policy, extra_config)
    return _gp_compile(model, tag, recording), recorder


def _torch_way_variant(path: str, policy: Policy) -> Row:
    """``POLICY (torch)``: the policy as plain ``guard_filter_fn`` of ``torch.compile``, its
    ``config`` patched once around compilation and around each block of timed calls, its
    stance (if any) entered around each block of timed calls: what the policy costs
    without ``guardpolicy.compile``'s per-call wrapper."""
    config = policy.config
    stance = policy.stance_warmup is not None

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
        rec = Recording(policy)
        return _torch_compile(m, tag, rec), rec

    return Row(Variant(policy.name + " (torch)", block_ctx=timed_ctx, setup_ctx=setup_ctx), VIA_TORCH,
               "policy_torch", source=path, config=dict(config), stance_torch=stance, make=make)


def _std_ift_source(name: str) -> str:
    """A policy using the std policy ``name`` with ``install_free_tensors`` on (the used
    policy's ``default`` is not inherited by ``use``, so it is restated)."""
    return PolicyText(f"{name}_ift", body=(f"use {name}",), default=load_std(name).default_decision, unsafe=True,
                      settings=(_FREE_TENSORS,)).render()


_FREE_TENSORS = "config install_free_tensors = true"
KEEP_ALL_IFT = PolicyText("no_filter_ift", unsafe=True, settings=(_FREE_TENSORS,)).render()  # free tensors unwatched


def stance_policy_source(after: int) -> str:
    """Keep every guard; ``skip_guard_eval_unsafe`` after ``after`` quiet calls."""
    return PolicyText("stance_after_warmup", unsafe=True,
                      settings=(f"stance skip_guard_eval_unsafe after {after} calls",)).render()


def make_rows(policies: list[tuple[str, Policy]], stance_after: int) -> list[Row]:
    """Every row, in table order: eager, the baseline, the install_free_tensors and stance
    variants, four per standard policy, then up to three per ``(file, policy)`` in
    ``policies`` (see the module docstring)."""
    import torch

    out = [
        Row(Variant(EAGER), VIA_EAGER, "eager"),
        Row(Variant(BASELINE), VIA_TORCH, "baseline", make=lambda m, tag: (_torch_compile(m, tag), None)),
        _gp_variant(BASELINE + IFT, "ift", None, load(KEEP_ALL_IFT)),
        Row(Variant(BASELINE + IFT + " (torch)", block_ctx=_config_patch(IFT_CONFIG),
                    setup_ctx=_config_patch(IFT_CONFIG)),
            VIA_TORCH, "ift_torch", config=dict(IFT_CONFIG), make=lambda m, tag: (_torch_compile(m, tag), None)),
        _gp_variant(f"stance after {stance_after}", "stance", None, load(stance_policy_source(stance_after))),
        Row(Variant("set_stance (torch)", block_ctx=_skip_guard_eval_stance), VIA_TORCH, "stance_torch",
            stance_torch=True, make=lambda m, tag: (_torch_compile(m, tag), None)),
    ]
    for name in STD_POLICIES:
        torch_name = f"{name}_unsafe"
        torch_fn = getattr(torch.compiler, torch_name, None)
        label = f"torch.{torch_name}"

        def make_std(m, tag, name=name):
            rec = Recording(load_std(name))
            return _torch_compile(m, tag, rec), rec

        out.append(Row(Variant(name), VIA_TORCH, "std", source=name, pair=label if torch_fn else None, make=make_std))
        if torch_fn is not None:
            def make_torch(m, tag, fn=torch_fn):
                rec = Recording(fn)
                return _torch_compile(m, tag, rec), rec

            out.append(Row(Variant(label), VIA_TORCH, "torch_fn", source=f"torch.compiler.{torch_name}",
                           make=make_torch))
        out.append(_gp_variant(name + IFT, "std", name, load(_std_ift_source(name)),
                               pair=label + IFT if torch_fn else None))
        if torch_fn is not None:
            out.append(Row(Variant(label + IFT, block_ctx=_config_patch(IFT_CONFIG), setup_ctx=_config_patch(IFT_CONFIG)),
                           VIA_TORCH, "torch_fn", source=f"torch.compiler.{torch_name}", config=dict(IFT_CONFIG),
                           make=make_torch))
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


