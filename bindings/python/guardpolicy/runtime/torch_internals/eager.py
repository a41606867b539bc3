"""What an eager call runs through, for the mutation audit (``guardpolicy.tools.mutation``):
the process-wide ``nn.Module`` hook dicts (``torch.nn.modules.module``; state a trial must
leave as it found it), pytrees (``torch.utils._pytree``), and the aten ops a call runs under
a dispatch mode (``torch.utils._python_dispatch``, an op's ``_schema``).
"""

from __future__ import annotations

from typing import Any


def global_module_hooks() -> list[tuple[str, dict]]:
    """``(name, dict)`` of the process-wide ``nn.Module`` hook dicts
    (``torch.nn.modules.module._global_forward_hooks`` and kin)."""
    import torch.nn.modules.module as module_mod

    return [(name, value) for name, value in vars(module_mod).items()
            if name.startswith("_global_") and name.endswith("hooks") and isinstance(value, dict)]


def tree_map(fn: Any, tree: Any) -> Any:
    """``fn`` applied to every leaf of a pytree of lists, tuples, dicts and torch's registered
    containers (``ModelOutput`` among them), the structure kept: ``torch.utils._pytree.
    tree_map``."""
    from torch.utils import _pytree

    return _pytree.tree_map(fn, tree)


def dispatch_mode() -> type:
    """``torch.utils._python_dispatch.TorchDispatchMode``: the base class of a mode that sees
    every aten op an eager call runs (the mutation audit sizes a trial's call with one)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def returns_alias(op: Any) -> bool:
    """Whether the aten ``op`` returns a view of an input or the input itself (its schema's
    return has alias info: ``expand``, ``add_``), so its output allocates no new storage."""
    return any(r.alias_info is not None for r in op._schema.returns)
