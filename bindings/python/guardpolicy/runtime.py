"""``guardpolicy.compile``: a policy as ``guard_filter_fn``, plus its config knobs and stance.

The "Reducing Guard Overhead" recipe applied from the policy file:

* the policy is passed as ``guard_filter_fn`` (on a copy of ``options``: torch pops the key
  from the dict it is given);
* its ``config`` lines (``install_free_tensors``, ``use_recursive_dict_tags_for_guards``, ...,
  declared in the schema's ``config:``) are applied with ``torch._dynamo.config.patch`` around
  every call of the compiled object (so around compilation too) and only there;
* its ``stance skip_guard_eval_unsafe after N calls`` line runs calls under
  ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` once N consecutive calls have
  compiled nothing; a compile during warm-up restarts the count; ``reset_stance()`` goes back.

Requires torch 2.8 or newer (``guard_filter_fn``; feature-detected).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Callable

from .errors import PolicyRuntimeWarning
from .frames import FrameExplanations, compiled_frame
from .policy import Policy

_INDUCTOR = "inductor"


def _torch():
    import torch

    if not hasattr(torch.compiler, "skip_guard_on_globals_unsafe"):
        raise RuntimeError(
            f"guardpolicy needs torch.compile's guard_filter_fn (torch 2.8 or newer); "
            f"this is torch {torch.__version__}")
    return torch


def _options_with_filter(options: dict | None, mode: str | None, backend: Any, guard_filter_fn) -> dict:
    """A new options dict holding ``guard_filter_fn``; ``mode`` (an Inductor setting that
    torch refuses beside ``options``) is spelled out as the Inductor options it stands for."""
    if mode is not None and options:
        raise ValueError("Either mode or options can be specified, but both can't be specified at the same time.")
    opts = dict(options or {})
    if mode is not None:
        if backend != _INDUCTOR:
            raise ValueError(f"mode={mode!r} only applies to the inductor backend, not {backend!r}")
        from torch._inductor import list_mode_options

        opts.update(list_mode_options(mode))
    opts["guard_filter_fn"] = guard_filter_fn
    return opts


class PolicyCompiled:
    """What ``guardpolicy.compile`` returns: calls the ``torch.compile`` result under the
    policy's config knobs and stance; every other attribute is the compiled object's.

    ``calls``: calls made; ``compiles``: frames compiled (one per ``guard_filter_fn`` call);
    ``explanations``: per compiled frame, a ``FrameExplanations``: the decision and deciding
    rule of every guard, and ``frame``, which frame (``guardpolicy.explain(compiled)``;
    strings only, no reference to live objects);
    ``quiet_calls``: consecutive calls that compiled nothing; ``stance_active``: calls now run
    under ``skip_guard_eval_unsafe``.
    """

    def __init__(self, compiled: Callable, policy: Policy, torch_options: dict):
        object.__setattr__(self, "_compiled", compiled)
        object.__setattr__(self, "_policy", policy)
        object.__setattr__(self, "_torch_options", torch_options)
        object.__setattr__(self, "calls", 0)
        object.__setattr__(self, "compiles", 0)
        object.__setattr__(self, "quiet_calls", 0)
        object.__setattr__(self, "stance_active", False)
        object.__setattr__(self, "explanations", [])
        stance = policy.stance
        object.__setattr__(self, "_warmup", stance[1] if stance and stance[0] == "skip_guard_eval_unsafe" else None)

    @property
    def policy(self) -> Policy:
        return self._policy

    def _record_compile(self, explanations: list) -> None:
        object.__setattr__(self, "compiles", self.compiles + 1)
        self.explanations.append(explanations)

    def _config(self):
        config = self._policy.config
        if not config:
            return contextlib.nullcontext()
        return _torch()._dynamo.config.patch(**config)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        torch = _torch()
        before = self.compiles
        with self._config():
            if self.stance_active:
                with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                    out = self._compiled(*args, **kwargs)
            else:
                out = self._compiled(*args, **kwargs)
        object.__setattr__(self, "calls", self.calls + 1)
        quiet = self.compiles == before
        object.__setattr__(self, "quiet_calls", self.quiet_calls + 1 if quiet else 0)
        if self._warmup is not None and not self.stance_active and self.quiet_calls >= self._warmup:
            object.__setattr__(self, "stance_active", True)
        return out

    def reset_stance(self) -> None:
        """Back to full guard evaluation; the warm-up count starts again."""
        object.__setattr__(self, "stance_active", False)
        object.__setattr__(self, "quiet_calls", 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._compiled, name, value)

    def __repr__(self) -> str:
        return f"<guardpolicy.PolicyCompiled {self._policy.name!r} of {self._compiled!r}>"


def explain(compiled: PolicyCompiled) -> list[FrameExplanations]:
    """Per frame ``compiled`` has compiled so far, a ``FrameExplanations``: per guard an
    ``Explanation`` (keep or drop, the deciding rule with its file:line or None for the
    default, the guard's name and guard_type), and ``frame``, the ``CompiledFrame``
    (function, file:line, compile id)."""
    if not isinstance(compiled, PolicyCompiled):
        raise TypeError("explain() takes what guardpolicy.compile returned")
    return [FrameExplanations(frame, frame.frame) for frame in compiled.explanations]


def compile(model_or_fn: Callable, policy: Policy | str | os.PathLike, *, mode: str | None = None,  # noqa: A001
            options: dict | None = None, backend: Any = _INDUCTOR, **torch_compile_kwargs: Any) -> PolicyCompiled:
    """``torch.compile(model_or_fn, ...)`` with ``policy`` as its ``guard_filter_fn`` and the
    policy's ``config`` and ``stance`` lines applied (see the module docstring).

    ``policy``: a ``Policy`` or anything ``guardpolicy.load`` accepts. ``options`` is copied,
    never changed. ``mode`` becomes the Inductor options it stands for (torch refuses both).
    Raises ``PolicyError`` for a bad policy, ``ValueError`` for ``mode`` with ``options`` or
    with a non-inductor backend, ``RuntimeError`` on a torch without ``guard_filter_fn``.
    """
    torch = _torch()
    if not isinstance(policy, Policy):
        from . import load

        policy = load(policy)
    holder: list[PolicyCompiled] = []

    def guard_filter_fn(entries):
        decisions = policy(entries)
        if holder:  # compile time only: explaining costs a second pass over the entries
            with warnings.catch_warnings():  # the first pass warned already, if at all
                warnings.simplefilter("ignore", PolicyRuntimeWarning)
                holder[0]._record_compile(FrameExplanations(policy.explain(entries), compiled_frame()))
        return decisions

    opts = _options_with_filter(options, mode, backend, guard_filter_fn)
    compiled = torch.compile(model_or_fn, backend=backend, options=dict(opts), **torch_compile_kwargs)
    wrapper = PolicyCompiled(compiled, policy, opts)
    holder.append(wrapper)
    return wrapper
