"""The fixed state changes of the audit (``CHANGES``): one per trial, each applied to a
``Trial`` (the audit model, the inputs of the next call, the grad mode) and undone after it."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from . import model as audit_model


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
    """Rebinds the audit model module's global ``name`` (what the forward reads) to ``value``
    until the trial's undo."""
    g = vars(audit_model)
    old = g[name]
    g[name] = value
    trial.undo.append(lambda: g.__setitem__(name, old))


def _set_config_entry(trial: Trial, key: str, value: Any) -> None:
    config = audit_model.AUDIT_CONFIG
    old = config[key]
    config[key] = value
    trial.undo.append(lambda: config.__setitem__(key, old))


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
