"""State changes that ``torch.compile`` itself serves stale after warm-up, for the demo's
frontier to count beside the mutation audit's: a hook added to a submodule (torch's default
``skip_nnmodule_hook_guards=True`` installs no guard on hook dicts), a global module hook, and
a submodule class's ``forward`` patched. Each is made on a model after warm-up, one at a
time, and undone; a setting catches it when the next call equals eager's on the changed
model. Only the changes that ``torch.compile`` with no filter serves stale on the model are
counted (measured, not assumed): those the mutation audit cannot see, since it changes only
the state a guard reads.
"""

from __future__ import annotations

from typing import Any, Callable

#: Calls before a change: past the warm-up of a stance line and of direct dispatch.
WARM_CALLS = 12


def _target(model: Any) -> tuple[str, Any]:
    """The first submodule that holds parameters of its own and calls no submodule (an
    embedding, a linear layer): ``(name, module)``."""
    for name, sub in model.named_modules():
        if sub is not model and not list(sub.children()) and list(sub.parameters(recurse=False)):
            return name, sub
    raise ValueError(f"{type(model).__name__} has no leaf submodule with parameters")


def _doubled(out: Any) -> Any:
    import torch

    return out * 2 if isinstance(out, torch.Tensor) and out.is_floating_point() else out


def _forward_hook(target: Any) -> Callable[[], None]:
    handle = target.register_forward_hook(lambda _m, _a, out: _doubled(out))
    return handle.remove


def _global_hook(target: Any) -> Callable[[], None]:
    import torch

    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, _a, out: _doubled(out) if m is target else out)
    return handle.remove


def _class_forward(target: Any) -> Callable[[], None]:
    cls = type(target)
    had = "forward" in vars(cls)
    original = cls.forward

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return _doubled(original(self, *args, **kwargs))

    cls.forward = forward

    def undo() -> None:
        if had:
            cls.forward = original
        else:
            del cls.forward
    return undo


#: (label with ``{name}`` for the submodule, the change: target -> undo).
CHANGES: tuple[tuple[str, Callable[[Any], Callable[[], None]]], ...] = (
    ("a forward hook added to {name}", _forward_hook),
    ("a global forward hook on {name}", _global_hook),
    ("{cls}.forward patched", _class_forward),
)


def outcomes(model: Any, settings: dict[str, Callable[[Any], Any]], run: Callable[[Any, Any], Any],
             equal: Callable[[Any, Any], bool]) -> tuple[list[str], dict[str, list[str]]]:
    """``(counted, missed)``: the changes ``torch.compile`` with no filter serves stale
    (their labels), and per setting the counted changes it serves stale too.

    ``settings``: label -> a function compiling the model it is given (each setting gets its
    own copy, ``latency.own_copy``: its own cache entries); the first is ``torch.compile``
    with no filter. ``run(eager_model, fn)``: one call of ``fn`` (the eager model or a
    compiled one) as the model is called, its output to compare. ``equal(a, b)``: whether
    two outputs agree."""
    import torch

    from . import latency

    name, target = _target(model)
    labels = [label.format(name=name, cls=type(target).__name__) for label, _ in CHANGES]
    copies = {}
    with torch.no_grad():
        for label, make in settings.items():
            copy = latency.own_copy(model)
            fn = make(copy)
            run(copy, copy)  # the eager reference, first called before any change too
            for _ in range(WARM_CALLS):
                run(copy, fn)
            copies[label] = (copy, fn)
        stale: dict[str, list[str]] = {label: [] for label in settings}
        for text, (_, change) in zip(labels, CHANGES):
            for label, (copy, fn) in copies.items():
                undo = change(copy.get_submodule(name))
                try:
                    expected = run(copy, copy)
                    try:
                        ok = equal(run(copy, fn), expected)
                    except Exception:  # noqa: BLE001 - a stale graph may raise on the changed state
                        ok = False
                finally:
                    undo()
                if not ok:
                    stale[label].append(text)
    counted = stale[next(iter(settings))]
    return counted, {label: [c for c in counted if c in missed] for label, missed in stale.items()}
