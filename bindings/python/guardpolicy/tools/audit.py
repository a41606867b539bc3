"""``python -m guardpolicy audit``: what each policy lets go stale.

For every policy and every *state change* in ``CHANGES`` the audit

1. builds a fresh audit model (``build_audit_model``), calls ``torch._dynamo.reset()`` and
   compiles it with ``backend="eager"`` and the policy as ``guard_filter_fn``, wrapped in a
   recorder that counts the filter's calls (torch makes one per compiled frame) and keeps
   the name and guard type of every guard the policy dropped;
2. calls the compiled model once on the example input under ``torch.no_grad()`` (and
   checks it matches eager);
3. applies ONE change (a module attribute, a global, a closure cell, the input, grad mode,
   ...), computes eager's output on the changed state, calls the compiled model again, and
   undoes the change.

The second call is classified as

* ``recompiled``: the filter was called again, i.e. a kept guard failed and Dynamo
  compiled a new frame (a guard caught the change);
* ``unaffected``: no recompile, and the output still equals eager's (same shape, dtype,
  ``requires_grad`` and values): the change does not need a guard, the compiled code reads
  the new state at run time (parameters, buffers and inputs are graph inputs);
* ``stale``: no recompile, and the output differs from eager's: the silent wrong result.
  The cell names the dropped guards that let it through: the dropped guards whose name (or,
  for ambient guards, guard type) relates to the changed state, else every dropped guard
  type with its count;
* ``error``: no recompile, and the stale compiled code raised on the changed input;
* ``n/a``: eager itself cannot run the change on this model.

Every ``stale`` or ``error`` cell is checked against a control: the same change with no
``guard_filter_fn`` at all (run once per model and change). When the control is just as
stale (marked ``†``), torch itself does not guard the change and no policy could have kept
a guard for it (in torch 2.13: hooks added after compiling, ``skip_nnmodule_hook_guards``).
A stale cell under a policy that dropped nothing (``keep_all``) whose control is right is a
bug in guardpolicy: it is printed, and the command exits 1.

The audit models wrap a core (``guardpolicy.tools._models``' MLP, or a tiny transformers GPT-2
with its dropout probabilities at 0 so that ``train()`` stays deterministic) in
``AuditModel``, whose forward reads every piece of state a change touches, so that each
change shows in the output when nothing guards it.

With ``--verify N`` every stale or error cell is run once more under
``guardpolicy.compile(..., verify=N, on_violation="recompile")``: the cell says whether
verify caught the change, after how many calls (at most N: sampling is by call count), and
whether that call returned eager's output (docs/verify.md).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import re
import sys
from collections import Counter
from typing import Any, Callable

from ..loading import STD_POLICIES, load, load_std
from ..runtime import stats
from .._files import refuse_bad_outputs, write_file
from ._model_spec import MODEL_HELP, ModelSpecError

#: The audit models ``--model`` accepts.
MODEL_NAMES = ("mlp", "gpt2")

#: Outcomes, in the order the summary counts them.
OUTCOMES = ("recompiled", "unaffected", "stale", "error", "n/a")

#: The policy that keeps every guard: the control (``policies/examples/keep_all.gpol``).
KEEP_ALL_SOURCE = """guardpolicy 1

policy keep_all {
  doc "Keep every guard: torch.compile's own soundness, through the policy engine."
  default keep

  # torch 2.13 skips the nn-module hook guards by default (EMPTY_NN_MODULE_HOOKS_DICT then
  # checks nothing): turn them on, so that adding a hook after compiling is noticed too.
  config skip_nnmodule_hook_guards = false
}
"""

#: Default policies: the six standard ones, then ``keep_all``.
DEFAULT_POLICIES = (*STD_POLICIES, "keep_all")

# --------------------------------------------------------------------------- audit state

#: A module-level constant the audit model's forward reads (``G['AUDIT_SCALE']``).
AUDIT_SCALE = 1.0
#: A module-level config dict the audit model's forward reads (``G['AUDIT_CONFIG']['bias']``).
AUDIT_CONFIG = {"bias": 0.0}


def _make_closure(factor: float):
    """``(post_fn, set_factor)``: ``post_fn(h) = h * factor`` reads the closure cell
    ``factor``; ``set_factor(v)`` rebinds it (what a change to a closure variable is)."""

    def post_fn(h):
        return h * factor

    def set_factor(value):
        nonlocal factor
        factor = value

    return post_fn, set_factor


_CLASSES: dict[str, type] = {}


def _classes() -> dict[str, type]:
    """The audit ``nn.Module`` classes, defined on first use (importing this module does not
    import torch)."""
    if _CLASSES:
        return _CLASSES
    import torch
    from torch import nn

    class AuditModel(nn.Module):
        """``core`` followed by a head that reads every piece of state the audit changes.

        ``post`` (built-in Linear; forward-hook target, swapped for a new Linear), ``act``
        (Tanh, swapped for Sigmoid), ``drop`` (Dropout(p=1): ``+1`` in eval, ``+0`` in train),
        ``gain`` (a Parameter, replaced), ``offset`` (a buffer, changed in place), ``scale``
        (float attribute), ``shift`` (int attribute), ``post_fn`` (a closure), the globals
        ``AUDIT_SCALE`` and ``AUDIT_CONFIG['bias']``, grad mode (``torch.is_grad_enabled()``),
        the input's dtype, batch size and ``requires_grad``, and a tensor created in forward
        with ``torch.get_default_dtype()``.

        With ``backend="eager"`` the compiled FX graph runs real torch ops in the caller's
        state, so grad mode, ``requires_grad`` and the default dtype only go stale where the
        forward reads them in Python (the branches and the ``dtype=`` below): Dynamo then
        bakes the value read at trace time into the graph, as real models do.
        """

        def __init__(self, core: nn.Module, width: int):
            super().__init__()
            self.core = core
            self.post = nn.Linear(width, width)
            self.act = nn.Tanh()
            self.drop = nn.Dropout(p=1.0)
            self.gain = nn.Parameter(torch.ones(width))
            self.register_buffer("offset", torch.zeros(width))
            self.scale = 1.0
            self.shift = 0
            self.post_fn, self.set_factor = _make_closure(1.0)

        def forward(self, x):
            h = self.core(x.to(torch.float32))
            h = self.act(self.post(h)) * self.gain + self.offset
            h = h * self.scale + self.shift
            h = h + self.drop(torch.ones_like(h))  # eval: +1; train: Dropout(p=1) zeroes it
            h = h * AUDIT_SCALE + AUDIT_CONFIG["bias"]
            h = self.post_fn(h)
            if torch.is_grad_enabled():  # a term only while gradients are recorded
                h = h + 0.125
            if x.requires_grad:  # a path taken only when gradients flow to the input
                h = h * 0.5
            out = h.to(x.dtype).reshape(x.shape[0], -1)  # the input's dtype, one row per sample
            return out + torch.zeros(out.shape[-1], dtype=torch.get_default_dtype())  # default dtype

    class GPT2Core(nn.Module):
        """A tiny transformers GPT-2 LM fed ``inputs_embeds`` (a float input, so that dtype
        and ``requires_grad`` changes apply); returns the logits."""

        def __init__(self):
            super().__init__()
            from transformers import GPT2Config, GPT2LMHeadModel
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            config = GPT2Config(
                n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, use_cache=False,
                bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            )
            self.lm = GPT2LMHeadModel(config)

        def forward(self, x):
            return self.lm(inputs_embeds=x).logits

    _CLASSES.update(AuditModel=AuditModel, GPT2Core=GPT2Core)
    return _CLASSES


def build_audit_model(name: str, seed: int = 0) -> tuple[Any, tuple]:
    """``(model, example_inputs)`` for ``name`` in ``MODEL_NAMES``: an ``AuditModel`` in eval
    mode around the demo MLP (input ``(4, 64)``) or a tiny GPT-2 (input embeddings
    ``(1, 16, 64)``). Same seed, same weights and input."""
    import torch

    cls = _classes()
    if name == "mlp":
        from ._models import build_mlp

        core, (x,) = build_mlp(seed=seed)
        width = 16
    elif name == "gpt2":
        torch.manual_seed(seed)
        core = cls["GPT2Core"]()
        x = torch.randn(1, 16, 64)
        width = 256
    else:
        raise KeyError(f"unknown audit model {name!r}; known: {', '.join(MODEL_NAMES)}")
    torch.manual_seed(seed + 1)
    model = cls["AuditModel"](core, width).eval()
    return model, (x,)


# --------------------------------------------------------------------------- changes


@dataclasses.dataclass
class Trial:
    """One change in progress: the model, the inputs of the next call, the grad mode to
    call it under, and how to undo what the change did outside the model."""

    model: Any
    inputs: tuple
    grad_mode: Callable[[], Any]
    undo: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Change:
    """One state change. ``apply(trial)`` makes it. A guard relates to it when a regex of
    ``names`` matches the guard's name, or when the guard is ambient (name ``""``) and its
    type is in ``guard_types``: these are the dropped guards a stale cell names."""

    key: str
    what: str
    apply: Callable[[Trial], None]
    names: tuple = ()
    guard_types: tuple = ()


def _set_global(trial: Trial, name: str, value: Any) -> None:
    g = globals()
    old = g[name]
    g[name] = value
    trial.undo.append(lambda: g.__setitem__(name, old))


def _set_config_entry(trial: Trial, key: str, value: Any) -> None:
    old = AUDIT_CONFIG[key]
    AUDIT_CONFIG[key] = value
    trial.undo.append(lambda: AUDIT_CONFIG.__setitem__(key, old))


def _swap_post(trial: Trial) -> None:
    import torch

    old = trial.model.post
    torch.manual_seed(123)
    trial.model.post = torch.nn.Linear(old.in_features, old.out_features)


def _swap_act(trial: Trial) -> None:
    import torch

    trial.model.act = torch.nn.Sigmoid()


def _replace_param(trial: Trial) -> None:
    import torch

    trial.model.gain = torch.nn.Parameter(torch.full_like(trial.model.gain, 2.0))


def _buffer_in_place(trial: Trial) -> None:
    import torch

    with torch.no_grad():
        trial.model.offset.add_(1.0)


def _closure(trial: Trial) -> None:
    trial.model.set_factor(2.0)


def _input_dtype(trial: Trial) -> None:
    import torch

    trial.inputs = tuple(x.to(torch.float64) for x in trial.inputs)


def _input_shape(trial: Trial) -> None:
    import torch

    trial.inputs = tuple(torch.cat([x, x.flip(0)]) for x in trial.inputs)


def _requires_grad(trial: Trial) -> None:
    trial.inputs = tuple(x.detach().clone().requires_grad_(True) for x in trial.inputs)


def _grad_mode(trial: Trial) -> None:
    import torch

    trial.grad_mode = torch.enable_grad


def _default_dtype(trial: Trial) -> None:
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    trial.undo.append(lambda: torch.set_default_dtype(old))


def _forward_hook(trial: Trial) -> None:
    handle = trial.model.post.register_forward_hook(lambda module, args, out: out * 2.0)
    trial.undo.append(handle.remove)


_INPUT = (r"^x$",)


def _attr(name: str) -> tuple[str, ...]:
    """Guard-name patterns of the audit model's own attribute, parameter, buffer or
    submodule ``name`` (``self.name``, ``self._parameters['name']``, ...)."""
    return (rf"^self\.{name}\b", rf"^self\._(parameters|buffers|modules)\['{name}'\]")


#: The changes, one per trial, in table order.
CHANGES = (
    Change("float_attr", "self.scale = 2.0 (float module attribute, was 1.0)",
           lambda t: setattr(t.model, "scale", 2.0), _attr("scale")),
    Change("int_attr", "self.shift = 1 (int module attribute, was 0)",
           lambda t: setattr(t.model, "shift", 1), _attr("shift")),
    Change("submodule_swap", "self.post = nn.Linear(...) (a new Linear, other weights)",
           _swap_post, _attr("post")),
    Change("submodule_class", "self.act = nn.Sigmoid() (was nn.Tanh)",
           _swap_act, _attr("act")),
    Change("param_replaced", "self.gain = nn.Parameter(2 * ones) (a new Parameter)",
           _replace_param, _attr("gain")),
    Change("buffer_in_place", "self.offset.add_(1.0) (buffer changed in place)",
           _buffer_in_place, _attr("offset")),
    Change("train", "model.train() (Dropout(p=1) zeroes its branch)",
           lambda t: t.model.train(), (r"(^|\.)training$",)),
    Change("global_const", "AUDIT_SCALE = 3.0 (module-level constant, was 1.0)",
           lambda t: _set_global(t, "AUDIT_SCALE", 3.0), (r"^G\['AUDIT_SCALE'\]",)),
    Change("global_dict", "AUDIT_CONFIG['bias'] = 0.5 (global config dict entry, was 0.0)",
           lambda t: _set_config_entry(t, "bias", 0.5), (r"^G\['AUDIT_CONFIG'\]",)),
    Change("closure", "closure variable factor = 2.0 (forward calls self.post_fn, a closure)",
           _closure, _attr("post_fn")),
    Change("input_dtype", "x.to(float64) (input dtype, was float32)",
           _input_dtype, _INPUT),
    Change("input_shape", "x batch doubled (input shape)",
           _input_shape, _INPUT, ("SHAPE_ENV",)),
    Change("requires_grad", "x.requires_grad_() (input requires_grad)",
           _requires_grad, _INPUT),
    Change("grad_mode", "call under torch.enable_grad() (was no_grad)",
           _grad_mode, (), ("GLOBAL_STATE", "GRAD_MODE")),
    Change("default_dtype", "torch.set_default_dtype(float64) (forward creates a tensor)",
           _default_dtype, (), ("GLOBAL_STATE",)),
    Change("forward_hook", "self.post.register_forward_hook(out * 2)",
           _forward_hook, (r"^self\._modules\['post'\]\._forward_hooks", r"\._global_forward_hooks$")),
)

CHANGE_KEYS = tuple(c.key for c in CHANGES)


# --------------------------------------------------------------------------- one trial


class RecordingFilter:
    """A ``guard_filter_fn`` that forwards to ``policy``, counts its calls (``frames``: one
    per compiled frame) and, while ``recording``, keeps ``(name, guard_type)`` of every
    guard offered and of every guard dropped. Keeps no reference to any entry."""

    def __init__(self, policy: Callable[[Any], Any]):
        self.policy = policy
        self.frames = 0
        self.offered = 0
        self.dropped: list[tuple[str, str]] = []
        self.recording = True
        self.first_frames = 0  # frames compiled by the first call

    def stop_recording(self) -> None:
        """Called after the first call: what was recorded so far is the first compile."""
        self.recording = False
        self.first_frames = self.frames

    def __call__(self, entries):
        decisions = self.policy(entries)
        if len(decisions) != len(entries):
            raise AssertionError(f"policy returned {len(decisions)} decisions for {len(entries)} guards")
        self.frames += 1
        if self.recording:
            self.offered += len(entries)
            self.dropped.extend((e.name, e.guard_type) for e, keep in zip(entries, decisions) if keep is not True)
        return decisions


class CompiledRecorder:
    """``RecordingFilter``'s interface over a ``guardpolicy.compile`` result, which records
    per compiled frame every guard's name, type and decision itself (``explanations``)."""

    def __init__(self, compiled):
        self.compiled = compiled
        self.offered = 0
        self.dropped: list[tuple[str, str]] = []
        self.first_frames = 0

    @property
    def frames(self) -> int:
        return stats(self.compiled).compiles

    def stop_recording(self) -> None:
        frames = stats(self.compiled).explanations
        self.first_frames = len(frames)
        self.offered = sum(len(frame) for frame in frames)
        self.dropped = [(e.name, e.guard_type) for frame in frames for e in frame if not e.keep]


def compare(out: Any, ref: Any) -> str | None:
    """None when ``out`` equals ``ref`` (tensors: same shape, dtype, ``requires_grad`` and
    values within float32 round-off), else what differs."""
    import torch

    if not isinstance(ref, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None if out == ref else f"{out!r} != {ref!r}"
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)}, eager {tuple(ref.shape)}"
    if out.dtype != ref.dtype:
        return f"dtype {out.dtype}, eager {ref.dtype}".replace("torch.", "")
    if out.requires_grad != ref.requires_grad:
        return f"requires_grad {out.requires_grad}, eager {ref.requires_grad}"
    a, b = out.detach(), ref.detach()
    if torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True):
        return None
    return f"values differ (max |diff| {float((a.double() - b.double()).abs().max()):.3g})"


@dataclasses.dataclass
class Cell:
    """The outcome of one change under one policy."""

    change: str
    outcome: str  # one of OUTCOMES
    detail: str = ""  # what differs, the error, or why n/a
    guards: list = dataclasses.field(default_factory=list)  # related dropped guards: {name, guard_type}
    dropped_types: dict = dataclasses.field(default_factory=dict)  # stale without related guards: type -> count
    control: str | None = None  # stale/error cells: the outcome with no guard_filter_fn at all
    verify: dict | None = None  # with --verify N: {"every", "caught", "after_calls", "output_ok"}

    def to_json(self) -> dict:
        out = {"outcome": self.outcome, "detail": self.detail}
        if self.verify is not None:
            out["verify"] = self.verify
        if self.outcome in ("stale", "error"):
            out["dropped_guards"] = self.guards
            if not self.guards:
                out["dropped_guard_types"] = self.dropped_types
        if self.control is not None:
            out["control_no_filter"] = self.control
        return out


def _frames_ok() -> int:
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


#: Guard types that check presence or emptiness rather than the value a change alters:
#: listed after the others when a cell names its dropped guards.
_SECONDARY_TYPES = ("NOT_PRESENT_IN_GENERIC_DICT", "EMPTY_NN_MODULE_HOOKS_DICT", "HASATTR", "DICT_CONTAINS")


def related_guards(change: Change, dropped: list[tuple[str, str]]) -> list[dict]:
    """The dropped guards that relate to ``change`` (see ``Change``), each once: value,
    type and identity guards first, presence and empty-hook-dict guards last, otherwise in
    offer order."""
    pats = [re.compile(p) for p in change.names]
    seen, out = set(), []
    for name, gtype in dropped:
        hit = any(p.search(name) for p in pats) or (name == "" and gtype in change.guard_types)
        if hit and (name, gtype) not in seen:
            seen.add((name, gtype))
            out.append({"name": name, "guard_type": gtype})
    return sorted(out, key=lambda g: g["guard_type"] in _SECONDARY_TYPES)


def _warmup_calls(policy) -> int:
    """Quiet calls after which the policy's ``stance skip_guard_eval_unsafe after N calls``
    line switches guard evaluation off (0 without such a line)."""
    stance = getattr(policy, "stance", None)
    return stance[1] if stance and stance[0] == "skip_guard_eval_unsafe" else 0


def run_trial(model_name: str, policy: Callable | None, change: Change,
              config: dict | None = None) -> tuple[Cell, Any]:
    """Builds, compiles, calls once, applies ``change``, calls again and classifies the
    second call (see the module docstring). Returns the cell and the recorder (None without
    a policy).

    A ``guardpolicy.Policy`` is compiled with ``guardpolicy.compile``, so that its ``config``
    lines apply and its ``stance ... after N calls`` line too (the model is then called N
    more times before the change, to reach the steady state); any other callable is passed
    to ``torch.compile`` as ``guard_filter_fn`` inside a ``RecordingFilter``; None compiles
    with no filter at all (the control). ``config``: ``torch._dynamo.config`` settings for
    the whole trial (the control of a policy with ``config`` lines runs under them)."""
    import torch
    import torch._dynamo

    if config:
        with torch._dynamo.config.patch(**config):
            return run_trial(model_name, policy, change)

    from ..policy import Policy
    from ..runtime import compile as policy_compile

    torch._dynamo.reset()
    model, inputs = build_audit_model(model_name)
    if policy is None:
        recorder = None
        compiled = torch.compile(model, backend="eager")
    elif isinstance(policy, Policy):
        compiled = policy_compile(model, policy, backend="eager")
        recorder = CompiledRecorder(compiled)
    else:
        recorder = RecordingFilter(policy)
        compiled = torch.compile(model, backend="eager", options={"guard_filter_fn": recorder})
    trial = Trial(model, inputs, torch.no_grad)
    try:
        with torch.no_grad():
            ref = model(*inputs)
            try:
                first = compiled(*inputs)
                for _ in range(_warmup_calls(policy)):
                    compiled(*inputs)
            except Exception as e:  # noqa: BLE001 - reported as the cell, the audit goes on
                return Cell(change.key, "error", f"first call raised {type(e).__name__}: {_short(e)}"), recorder
        problem = compare(first, ref)
        if problem:
            return Cell(change.key, "error", f"differs from eager before any change: {problem}"), recorder
        if recorder is not None:
            recorder.stop_recording()
        frames_before = recorder.frames if recorder is not None else _frames_ok()

        change.apply(trial)
        try:
            with trial.grad_mode():
                ref = model(*trial.inputs)
        except Exception as e:  # noqa: BLE001 - eager cannot run this change: nothing to audit
            return Cell(change.key, "n/a", f"eager raised {type(e).__name__}: {_short(e)}"), recorder
        error = None
        try:
            with trial.grad_mode():
                out = compiled(*trial.inputs)
        except Exception as e:  # noqa: BLE001 - a stale graph may crash on the new state
            error = e
        frames_after = recorder.frames if recorder is not None else _frames_ok()
        recompiled = frames_after > frames_before
        if error is not None and _REFUSED_RECOMPILE.search(str(error)):
            # A guard failed, and the skip_guard_eval_unsafe stance raised instead of compiling.
            return Cell(change.key, "recompiled", f"a guard failed; the stance refused to recompile "
                                                  f"({type(error).__name__})"), recorder
        if recompiled:  # a detail here means the recompiled code is wrong: soundness_findings reports it
            if error is not None:
                detail = f"{_RECOMPILED_WRONG} raised {type(error).__name__}: {_short(error)}"
            else:
                problem = compare(out, ref)
                detail = f"{_RECOMPILED_WRONG} differs from eager: {problem}" if problem else ""
            return Cell(change.key, "recompiled", detail), recorder
        if error is not None:
            return Cell(change.key, "error", f"{type(error).__name__}: {_short(error)}"), recorder
        problem = compare(out, ref)
        if problem is None:
            return Cell(change.key, "unaffected"), recorder
        return Cell(change.key, "stale", problem), recorder
    finally:
        for undo in reversed(trial.undo):
            undo()
        torch._dynamo.reset()


_RECOMPILED_WRONG = "but the recompiled code"
#: What torch raises when a guard fails under ``set_stance(skip_guard_eval_unsafe=True)``
#: (or ``fail_on_recompile``): caught, not silent.
_REFUSED_RECOMPILE = re.compile(r"Recompilation triggered with skip_guard_eval_unsafe stance|"
                                r"Detected recompile when torch\.compile stance is 'fail_on_recompile'")


def _short(e: BaseException, limit: int = 160) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def verify_trial(model_name: str, policy, change: Change, every: int) -> dict:
    """The same change under ``guardpolicy.compile(..., verify=every,
    on_violation="recompile")``: ``{"every", "caught", "after_calls", "output_ok"}``, where
    ``after_calls`` counts the calls after the change up to the one verify caught (at most
    ``every``: sampling is by call count) and ``output_ok`` says whether that call returned
    eager's output. On an ``error`` cell the calls before the sampled one run the stale code,
    which raises: those calls count, and the audit goes on to the sampled one."""
    import torch
    import torch._dynamo

    from ..runtime import compile as policy_compile

    torch._dynamo.reset()
    model, inputs = build_audit_model(model_name)
    compiled = policy_compile(model, policy, backend="eager", verify=every, on_violation="recompile")
    trial = Trial(model, inputs, torch.no_grad)
    out = {"every": every, "caught": False, "after_calls": None, "output_ok": None}
    try:
        with torch.no_grad():
            compiled(*inputs)
            for _ in range(_warmup_calls(policy)):
                compiled(*inputs)
        change.apply(trial)
        st = stats(compiled)
        for n in range(1, every + 1):
            with trial.grad_mode():
                ref = model(*trial.inputs)
                try:
                    got, raised = compiled(*trial.inputs), False
                except Exception:  # noqa: BLE001 - the stale code of an error cell raises
                    got, raised = None, True
            if st.violations:
                out.update(caught=True, after_calls=n, output_ok=not raised and compare(got, ref) is None)
                break
    finally:
        for undo in reversed(trial.undo):
            undo()
        torch._dynamo.reset()
    return out


# --------------------------------------------------------------------------- one policy


@dataclasses.dataclass
class PolicyAudit:
    """Every change under one policy, on one model."""

    model: str
    policy: str
    source: str  # std name, "keep_all" or the file
    unsafe: bool
    offered: int = 0  # guards offered at the first compile (summed over frames)
    dropped: int = 0  # of which the policy dropped
    frames: int = 0  # frames compiled by the first call
    cells: list = dataclasses.field(default_factory=list)
    settings: list = dataclasses.field(default_factory=list)  # the policy's config and stance lines

    def counts(self) -> dict[str, int]:
        c = Counter(cell.outcome for cell in self.cells)
        return {o: c[o] for o in OUTCOMES if c[o]}

    def to_json(self) -> dict:
        return {
            "policy": self.policy,
            "source": self.source,
            "unsafe": self.unsafe,
            "guards_offered": self.offered,
            "guards_dropped": self.dropped,
            "frames": self.frames,
            "settings": self.settings,
            "outcomes": self.counts(),
            "changes": {cell.change: cell.to_json() for cell in self.cells},
        }


def audit_policy(model_name: str, label: str, source: str, policy, changes=CHANGES,
                 progress: Callable[[str], None] | None = None,
                 controls: dict | None = None, verify_every: int = 0) -> PolicyAudit:
    """Runs every change of ``changes`` under ``policy`` on ``model_name``.

    Every stale or error cell also gets ``control``: the same change with no
    ``guard_filter_fn`` at all (run once per model and change, cached in ``controls``), which
    tells a guard the policy dropped from a change torch itself does not guard."""
    import warnings

    controls = {} if controls is None else controls
    result = PolicyAudit(model_name, label, source, bool(getattr(policy, "is_unsafe", True)))
    result.settings = [f"config {k} = {v!r}" for k, v in (getattr(policy, "config", None) or {}).items()]
    if _warmup_calls(policy):
        result.settings.append(f"stance skip_guard_eval_unsafe after {_warmup_calls(policy)} calls")
    for change in changes:
        if progress:
            progress(f"{model_name} · {label} · {change.key}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cell, rec = run_trial(model_name, policy, change)
        if rec is not None and not result.frames:
            result.frames, result.offered, result.dropped = rec.first_frames, rec.offered, len(rec.dropped)
        if cell.outcome in ("stale", "error"):
            if rec is not None:
                cell.guards = related_guards(change, rec.dropped)
                if not cell.guards:
                    cell.dropped_types = dict(Counter(t for _, t in rec.dropped).most_common())
            config = dict(getattr(policy, "config", None) or {})
            key = (model_name, change.key, tuple(sorted(config.items())))
            if key not in controls:
                if progress:
                    progress(f"{model_name} · (no guard_filter_fn) · {change.key}")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    controls[key], _ = run_trial(model_name, None, change, config)
            control = controls[key]
            cell.control = control.outcome + (f" ({control.detail})" if control.detail else "")
            if verify_every:
                if progress:
                    progress(f"{model_name} · {label} · {change.key} · verify={verify_every}")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cell.verify = verify_trial(model_name, policy, change, verify_every)
        result.cells.append(cell)
    return result


def torch_own(cell: Cell) -> bool:
    """A stale/error cell that is just as stale/failing with no guard_filter_fn: torch does
    not guard this change at all (no policy could have kept a guard for it)."""
    return cell.control is not None and cell.control.split(" ", 1)[0] == cell.outcome


def resolve_policy(spec: str):
    """``(label, source, policy)`` for a standard policy name, ``keep_all``, or a policy
    file (``.gpol``/``.gpolc``)."""
    if spec in STD_POLICIES:
        return spec, spec, load_std(spec)
    if spec == "keep_all" and not os.path.exists(spec):
        return "keep_all", "keep_all", load(KEEP_ALL_SOURCE)
    policy = load(spec)
    return policy.name, spec, policy


# --------------------------------------------------------------------------- output


def _cell_text(cell: Cell, limit: int = 3) -> str:
    """The note of a cell: for stale/error, the dropped guards that let it through (or the
    guard types dropped), what differed, and whether torch alone is stale too."""
    if cell.outcome not in ("stale", "error"):
        return cell.detail
    if cell.guards:
        named = [f"{g['name'] or '<ambient>'} ({g['guard_type']})" for g in cell.guards]
        more = f" +{len(named) - limit} more" if len(named) > limit else ""
        text = "dropped " + ", ".join(named[:limit]) + more
    elif cell.dropped_types:
        types = [f"{t}×{n}" for t, n in cell.dropped_types.items()]
        more = f" +{len(types) - 4} more types" if len(types) > 4 else ""
        text = "no related guard; dropped " + ", ".join(types[:4]) + more
    else:
        text = "nothing dropped"
    text += f"; {cell.detail}"
    if cell.verify is not None:
        v = cell.verify
        if v["caught"]:
            text += (f"; verify={v['every']}: caught after {v['after_calls']} call(s)"
                     + ("" if v["output_ok"] else ", but the recompiled output differs from eager's"))
        else:
            text += f"; verify={v['every']}: not caught"
    if torch_own(cell):
        text += "; † just as " + cell.outcome + " with no guard_filter_fn (torch does not guard it)"
    elif cell.control is not None and not cell.control.startswith("recompiled"):
        text += f"; with no guard_filter_fn: {cell.control}"
    return text


def format_policy_table(pa: PolicyAudit, markdown: bool = False) -> str:
    """One policy's table: change, outcome, and for stale/error cells the dropped guards
    that let it through and what differed."""
    what = {c.key: c.what for c in CHANGES}
    head = (f"{pa.model} · {pa.policy} ({'unsafe' if pa.unsafe else 'safe'}): {pa.offered} guards offered "
            f"in {pa.frames} frame(s), {pa.dropped} dropped")
    if pa.settings:
        head += " · " + "; ".join(pa.settings)
    if markdown:
        lines = [f"#### {head}", "", "| change | outcome | dropped guard(s) that let it through / note |",
                 "|---|---|---|"]
        for cell in pa.cells:
            note = _cell_text(cell).replace("|", "\\|")
            outcome = f"**{cell.outcome}**{'†' if torch_own(cell) else ''}" if cell.outcome in ("stale", "error") \
                else cell.outcome
            lines.append(f"| `{cell.change}`: {what.get(cell.change, '')} | {outcome} | {note} |")
        return "\n".join(lines)
    w = max((len(c.change) for c in pa.cells), default=6)
    lines = [f"== {head}", f"  {'change':<{w}}  {'outcome':<11}  dropped guard(s) that let it through / note"]
    for cell in pa.cells:
        outcome = cell.outcome + ("†" if torch_own(cell) else "")
        lines.append(f"  {cell.change:<{w}}  {outcome:<11}  {_cell_text(cell)}".rstrip())
    return "\n".join(lines)


_ABBREV = {"recompiled": "recompiled", "unaffected": "ok", "stale": "STALE", "error": "ERROR", "n/a": "n/a"}


def _matrix_cell(cell: Cell | None) -> str:
    if cell is None:
        return ""
    text = _ABBREV[cell.outcome] + ("†" if torch_own(cell) else "")
    if cell.verify is not None:
        text += f" ✓{cell.verify['after_calls']}" if cell.verify["caught"] else " ✗"
    return text


def format_matrix(audits: list[PolicyAudit], markdown: bool = False) -> str:
    """Changes × policies for one model: ``recompiled``, ``ok`` (unaffected), ``STALE``,
    ``ERROR`` or ``n/a``; ``†``: just as stale with no guard_filter_fn."""
    if not audits:
        return ""
    keys = [c.change for c in audits[0].cells]
    by = [{c.change: c for c in pa.cells} for pa in audits]
    names = [pa.policy for pa in audits]
    if markdown:
        lines = ["| change | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
        for k in keys:
            cells = [_matrix_cell(b.get(k)) for b in by]
            cells = [f"**{c}**" if c.startswith(("STALE", "ERROR")) else c for c in cells]
            lines.append(f"| `{k}` | " + " | ".join(cells) + " |")
        return "\n".join(lines)
    w = max(len(k) for k in keys)
    cols = [max(len(n), 10) for n in names]
    lines = [f"  {'change':<{w}}  " + "  ".join(f"{n:<{c}}" for n, c in zip(names, cols))]
    for k in keys:
        lines.append(f"  {k:<{w}}  " + "  ".join(f"{_matrix_cell(b.get(k)):<{c}}" for b, c in zip(by, cols)))
    return "\n".join(line.rstrip() for line in lines)


LEGEND = ("recompiled = a kept guard caught the change; ok = unaffected (no recompile, output equals "
          "eager's); STALE = no recompile and the output differs from eager's (silent wrong result); "
          "ERROR = no recompile and the stale code raised; † = just as stale with no guard_filter_fn "
          "at all (torch does not guard this change)")
VERIFY_LEGEND = ("with --verify N: ✓k = gp.compile(verify=N, on_violation=recompile) caught the change "
                 "k calls after it (and that call returned eager's output); ✗ = verify did not catch it")


# --------------------------------------------------------------------------- main


def _parse_config(items: list[str] | None) -> dict[str, Any]:
    import ast

    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--dynamo-config: expected KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()
    return out


def run_audit(models, policies, changes=CHANGES, progress=None,
              verify_every: int = 0) -> tuple[dict[str, list[PolicyAudit]], dict]:
    """``{model: [PolicyAudit per policy]}`` and the control cells (``(model, change)`` ->
    Cell with no guard_filter_fn) for ``policies`` given as ``resolve_policy`` triples;
    with ``verify_every``, each stale or error cell also says whether verify caught it."""
    controls: dict = {}
    results = {}
    for model_name in models:
        results[model_name] = [audit_policy(model_name, label, source, policy, changes, progress, controls,
                                            verify_every)
                               for label, source, policy in policies]
    return results, controls


def soundness_findings(results: dict[str, list[PolicyAudit]]) -> tuple[list[str], list[str]]:
    """``(bugs, torch_gaps)``: stale/error cells under a policy that dropped no guard; a
    *bug* when torch without a filter gets it right (guardpolicy's fault), a *torch gap*
    when torch without a filter is just as wrong."""
    bugs, gaps = [], []
    for model_name, audits in results.items():
        for pa in audits:
            if pa.dropped:
                continue
            for cell in pa.cells:
                if cell.outcome in ("stale", "error"):
                    line = f"{model_name} · {pa.policy} · {cell.change}: {cell.outcome}: {_cell_text(cell)}"
                    (gaps if torch_own(cell) else bugs).append(line)
                elif cell.detail.startswith(_RECOMPILED_WRONG):
                    bugs.append(f"{model_name} · {pa.policy} · {cell.change}: recompiled, {cell.detail}")
    return bugs, gaps


def main(argv: list[str] | None = None) -> int:
    """Runs the audit. Exit 0 when done; 1 when a policy that dropped no guard is stale or
    fails where torch without a filter is right (a guardpolicy bug, printed); 2 on bad
    arguments or an unloadable policy."""
    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy audit",
        description="Compile a model under each policy, change one piece of state at a time, and "
                    "classify each change: recompiled, unaffected, or stale (a silent wrong result).",
    )
    parser.add_argument("--model", action="append", metavar="MODEL",
                        help=f"repeatable: {MODEL_HELP}. The mutation audit takes any model (default: "
                             f"{' '.join(MODEL_NAMES)}); --changes only the audit models {', '.join(MODEL_NAMES)}")
    parser.add_argument("--policy", nargs="+", metavar="FILE",
                        help="policy files (.gpol/.gpolc), standard policy names or keep_all "
                             "(default: the six standard policies, and keep_all with --changes)")
    parser.add_argument("--changes", action="store_true",
                        help="the fixed state changes of the audit models (CHANGES) instead of the "
                             "guard-driven mutation audit")
    parser.add_argument("--change", action="append", metavar="KEY",
                        help=f"with --changes (implied): only these changes, repeatable or comma-separated: "
                             f"{', '.join(CHANGE_KEYS)}")
    parser.add_argument("--backend", default="eager",
                        help="the mutation audit's backend (default eager; inductor is what users run)")
    parser.add_argument("--dynamo-config", action="append", metavar="KEY=VALUE",
                        help="torch._dynamo.config setting for the whole audit, repeatable "
                             "(e.g. skip_nnmodule_hook_guards=False)")
    parser.add_argument("--verify", type=int, metavar="N", default=0,
                        help="also run each stale or error cell under gp.compile(verify=N, "
                             "on_violation=recompile) and say whether and after how many calls it was caught")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown (--changes)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    refuse_bad_outputs(parser, [args.json], [*(args.policy or []), *(args.model or [])])
    if args.verify < 0:
        parser.error(f"--verify: a number of calls >= 1, not {args.verify}")
    if not (args.changes or args.change or args.verify):  # --verify is about the fixed changes' stale cells
        return _main_mutation(parser, args, argv)
    bad = [m for m in args.model or () if m not in MODEL_NAMES]
    if bad:
        parser.error(f"--changes: the fixed changes need an audit model ({', '.join(MODEL_NAMES)}), not "
                     f"{', '.join(bad)}; without --changes the mutation audit takes any model")

    models = list(dict.fromkeys(args.model or MODEL_NAMES))
    changes = CHANGES
    if args.change:
        wanted = [k.strip() for item in args.change for k in item.split(",") if k.strip()]
        unknown = [k for k in wanted if k not in CHANGE_KEYS]
        if unknown or not wanted:
            parser.error(f"--change: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(CHANGE_KEYS)}")
        changes = tuple(c for c in CHANGES if c.key in wanted)
    setup = _setup(parser, args, argv, DEFAULT_POLICIES, "eager")
    if setup is None:
        return 2
    config, policies, progress, report = setup
    import torch

    report.update({"verify": args.verify or None, "legend": LEGEND, "changes": {c.key: c.what for c in changes},
                   "models": {}})
    with torch._dynamo.config.patch(**config) if config else contextlib.nullcontext():
        results, _ = run_audit(models, policies, changes, progress, args.verify)
    bugs, gaps = soundness_findings(results)

    md = args.markdown
    settings = "".join(f" · {k}={v!r}" for k, v in config.items())
    print(f"guardpolicy audit · torch {torch.__version__} · backend eager{settings} · {report['date']}")
    if md:
        print()
    print(LEGEND)
    if args.verify:
        print(VERIFY_LEGEND)
    for model_name, audits in results.items():
        print()
        print(f"{'### ' if md else '=== '}{model_name}: changes × policies")
        print()
        print(format_matrix(audits, markdown=md))
        for pa in audits:
            print()
            print(format_policy_table(pa, markdown=md))
        report["models"][model_name] = [pa.to_json() for pa in audits]
    bullet = "- " if md else "  "
    if gaps:
        print()
        print("† stale under a policy that dropped no guard, and just as stale with no guard_filter_fn "
              "(torch does not guard these changes; not a guardpolicy bug):")
        if md:
            print()
        for line in gaps:
            print(f"{bullet}{line}")
    if bugs:
        print()
        print("✗ stale or failing under a policy that dropped no guard, while torch without a filter is "
              "right (a guardpolicy soundness bug):")
        if md:
            print()
        for line in bugs:
            print(f"{bullet}{line}")
    report["keep_all_violations"] = {"guardpolicy_bugs": bugs, "torch_unguarded": gaps}
    if args.json:
        write_file(args.json, json.dumps(report, indent=2) + "\n")
    return 1 if bugs else 0


def _setup(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None,
           default_policies: tuple[str, ...] | list[str], backend: str) -> tuple[dict, list, Any, dict] | None:
    """What both audits start from: ``(dynamo config, policies, progress callback or None,
    the report's head: torch, date, command, backend, dynamo_config)``; None when a policy does
    not load (its error printed; exit 2). A bad --dynamo-config is a usage error."""
    from ..errors import PolicyError

    try:
        config = _parse_config(args.dynamo_config)
    except ValueError as e:
        parser.error(str(e))
    try:
        policies = [resolve_policy(spec) for spec in (args.policy or default_policies)]
    except PolicyError as e:
        print(str(e), file=sys.stderr)
        return None

    import torch
    import torch._dynamo

    unknown_config = [k for k in config if not hasattr(torch._dynamo.config, k)]
    if unknown_config:
        parser.error(f"--dynamo-config: torch._dynamo.config has no {', '.join(unknown_config)}")
    progress = None if args.quiet else (lambda msg: print(f"  … {msg}", file=sys.stderr, flush=True))
    started = datetime.datetime.now(datetime.timezone.utc)
    argv_text = " ".join(sys.argv[2:] if argv is None else argv)
    report = {"torch": torch.__version__, "date": started.strftime("%Y-%m-%d %H:%M UTC"),
              "command": f"python -m guardpolicy audit {argv_text}".rstrip(), "backend": backend,
              "dynamo_config": config}
    return config, policies, progress, report


def _main_mutation(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str] | None) -> int:
    """The guard-driven mutation audit of each --policy on each --model
    (``guardpolicy.tools.mutation``): text per policy, JSON with --json. Exit 0 when it ran,
    1 when a compiled model differs from eager before any change, 2 on bad arguments."""
    from . import _model_spec, mutation

    try:
        specs = [_model_spec.resolve(m) for m in dict.fromkeys(args.model or MODEL_NAMES)]
    except ModelSpecError as e:
        parser.error(f"--model: {e}")
    setup = _setup(parser, args, argv, STD_POLICIES, args.backend)
    if setup is None:
        return 2
    config, policies, progress, report = setup
    import torch

    report.update({"legend": mutation.LEGEND, "models": {}})
    print(f"guardpolicy audit (guard-driven mutations) · torch {torch.__version__} · backend {args.backend} · "
          f"{report['date']}")
    print(mutation.LEGEND)
    failed = False
    with torch._dynamo.config.patch(**config) if config else contextlib.nullcontext():
        for spec in specs:
            try:
                built = spec.build()
            except ModelSpecError as e:
                print(f"python -m guardpolicy audit: error: --model {spec.origin}: {e}", file=sys.stderr)
                return 2
            audits = []
            for label, source, policy in policies:
                result = mutation.audit(built.fn, built.args, built.kwargs, policy, label=spec.label,
                                        policy_label=label, backend=args.backend, progress=progress)
                result.source = source
                print()
                print(result.table())
                failed = failed or bool(result.problems)
                audits.append(result.to_dict())
            report["models"][spec.label] = audits
    if args.json:
        write_file(args.json, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
