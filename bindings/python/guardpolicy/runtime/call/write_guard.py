"""The dispatch mode verify's eager reference run runs under (``call.compared``): it stops the
run before an op writes a tensor the run did not create, so that the run can be undone by
putting Python state back, and the call then runs once more from the same state.

An op's writes are the arguments its schema marks written (``Tensor(a!)``: in-place ops,
``out=``, ``copy_``, ``index_put_``, ``set_``), plus the running statistics of the batch-norm
kernels that write them without saying so (``native_batch_norm`` and its cuDNN and MIOpen
variants, with ``training`` true: they move no version counter either). A tensor was created
by the run when its storage came out of an op of the run that does not return a view of its
inputs. Anything else written (a parameter, a buffer, an input, a global, a cache) stops the
run: the exception says which op. So does a write to a tensor made by ``torch.tensor``,
``torch.as_tensor`` or ``torch.from_numpy`` (``aten.lift_fresh`` returns what it is given:
it may be a NumPy array's memory), which only costs the comparison.
"""

from __future__ import annotations

from typing import Any

#: Ops that write their ``running_mean`` and ``running_var`` when ``training`` is true, though
#: their schema does not mark them written.
_UNMARKED_WRITES = frozenset({"native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm"})


def make_write_guard(error: type[Exception]) -> type:
    """The ``WriteGuard`` mode class, raising ``error(op name)`` before a forbidden write."""
    from .. import torch_internals
    import torch

    class WriteGuard(torch_internals.dispatch_mode()):
        """A ``TorchDispatchMode`` for one eager run (see the module docstring)."""

        def __init__(self) -> None:
            super().__init__()
            self.fresh: set[int] = set()  # the storages the run created

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            for t in _written(func, args, kwargs):
                if _storage(t) not in self.fresh:
                    raise error(f"`{func}` on a tensor it did not create")
            out = func(*args, **kwargs)
            inputs = {_storage(a) for a in _tensors(args) if a is not None}
            inputs.update(_storage(a) for a in _tensors(kwargs.values()))
            for t in _tensors(out if isinstance(out, (tuple, list)) else (out,)):
                key = _storage(t)
                if key != -1 and key not in inputs:
                    self.fresh.add(key)
            return out

    def _tensors(values: Any) -> list:
        found = []
        for v in values:
            if isinstance(v, torch.Tensor):
                found.append(v)
            elif isinstance(v, (tuple, list)):
                found.extend(x for x in v if isinstance(x, torch.Tensor))
        return found

    def _written(func: Any, args: tuple, kwargs: dict) -> list:
        positions = _WRITES.get(func)
        if positions is None:
            positions = _WRITES[func] = _write_positions(func)
        found = []
        for index, name in positions:
            value = args[index] if index < len(args) else kwargs.get(name)
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                found.extend(x for x in value if isinstance(x, torch.Tensor))
        if positions and _unmarked(func) and not _training(func, args, kwargs):
            return []
        return found

    return WriteGuard


def _storage(t: Any) -> int:
    """The identity of ``t``'s storage (its ``StorageImpl``); -1 for a tensor without one (a
    subclass, a sparse tensor), which therefore never counts as created by the run."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, TypeError):
        return -1


_WRITES: dict[Any, tuple[tuple[int, str], ...]] = {}


def _write_positions(func: Any) -> tuple[tuple[int, str], ...]:
    """``(position, name)`` of the arguments op ``func`` writes."""
    arguments = func._schema.arguments
    if _unmarked(func):
        return tuple((i, a.name) for i, a in enumerate(arguments) if a.name in ("running_mean", "running_var"))
    return tuple((i, a.name) for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write)


def _unmarked(func: Any) -> bool:
    return func._schema.name.split("::")[-1] in _UNMARKED_WRITES


def _training(func: Any, args: tuple, kwargs: dict) -> bool:
    for i, a in enumerate(func._schema.arguments):
        if a.name == "training":
            return bool(args[i] if i < len(args) else kwargs.get("training", False))
    return True
