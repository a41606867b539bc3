"""The module paths guardpolicy 0.x had before its layers (``api``, ``distributed``,
``runtime``, ``tools``): ``import guardpolicy.policy`` and a pickle that names
``guardpolicy.ranks.RankAgreement`` still work, as do the paths the tools' shared modules had
before ``guardpolicy.tools.common`` (``guardpolicy.tools.models``). Each old path is a small
module whose attributes are those of the new one (read on use: nothing here imports torch)."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys

#: Old module path -> the module that holds its names now (``guardpolicy.runtime``, a module
#: then and a package now, re-exports what pickles name: ``runtime/__init__.py``).
MOVED = {
    "guardpolicy.errors": "guardpolicy.api.errors",
    "guardpolicy._data": "guardpolicy.api.data",
    "guardpolicy._files": "guardpolicy.api.files",
    "guardpolicy.entry_code": "guardpolicy.api.entry_code",
    "guardpolicy.policy": "guardpolicy.api.policy",
    "guardpolicy.loading": "guardpolicy.api.loading",
    "guardpolicy.registry": "guardpolicy.api.registry",
    "guardpolicy.fingerprint": "guardpolicy.distributed.fingerprint",
    "guardpolicy.collectives": "guardpolicy.distributed.collectives",
    "guardpolicy.ranks": "guardpolicy.distributed.agreement",
    "guardpolicy.frame_digest": "guardpolicy.distributed.frame_digest",
    "guardpolicy.rank_verdicts": "guardpolicy.distributed.verdicts",
    "guardpolicy.torch_internals": "guardpolicy.runtime.torch_internals",
    "guardpolicy.frames": "guardpolicy.runtime.frames",
    "guardpolicy.frame_binding": "guardpolicy.runtime.call.frame_locals",
    "guardpolicy.logs": "guardpolicy.runtime.logs",
    "guardpolicy.recovery": "guardpolicy.runtime.call.recovery",
    "guardpolicy.verify": "guardpolicy.runtime.verify",
    "guardpolicy.dispatch": "guardpolicy.runtime.call.dispatch",
    "guardpolicy.calls": "guardpolicy.runtime.call.call_path",
    "guardpolicy.dryrun": "guardpolicy.runtime.dry_run",
    # the per-call modules before their room (``runtime/call/``)
    "guardpolicy.runtime.call_path": "guardpolicy.runtime.call.call_path",
    "guardpolicy.runtime.frame_locals": "guardpolicy.runtime.call.frame_locals",
    "guardpolicy.runtime.recovery": "guardpolicy.runtime.call.recovery",
    "guardpolicy.runtime.dispatch": "guardpolicy.runtime.call.dispatch",
    "guardpolicy._tool_api": "guardpolicy.reports",
    "guardpolicy.pygments_lexer": "guardpolicy.tools.pygments_lexer",
    "guardpolicy.tools._models": "guardpolicy.tools.common.models",
    "guardpolicy.tools._model_spec": "guardpolicy.tools.common.model_spec",
    "guardpolicy.tools._interrupt": "guardpolicy.tools.common.interrupt",
    "guardpolicy.tools.mutation_calls": "guardpolicy.tools.mutation.calls",
    "guardpolicy.tools.mutation_plan": "guardpolicy.tools.mutation.plan",
    "guardpolicy.tools.mutation_record": "guardpolicy.tools.mutation.record",
    "guardpolicy.tools.mutation_results": "guardpolicy.tools.mutation.results",
    "guardpolicy.tools.mutation_state": "guardpolicy.tools.mutation.state",
    "guardpolicy.tools.mutation_values": "guardpolicy.tools.mutation.values",
    "guardpolicy.tools.suggest_from_run": "guardpolicy.tools.suggest.from_run",
    "guardpolicy.tools.suggest_render": "guardpolicy.tools.suggest.render",
    "guardpolicy.tools.compare": "guardpolicy.tools.common.compare",
    "guardpolicy.tools.extras": "guardpolicy.tools.common.extras",
    "guardpolicy.tools.interrupt": "guardpolicy.tools.common.interrupt",
    "guardpolicy.tools.model_spec": "guardpolicy.tools.common.model_spec",
    "guardpolicy.tools.models": "guardpolicy.tools.common.models",
    "guardpolicy.tools.progress": "guardpolicy.tools.common.progress",
    "guardpolicy.tools.recording": "guardpolicy.tools.common.recording",
    "guardpolicy.tools.snapshot": "guardpolicy.tools.common.snapshot",
    "guardpolicy.tools.timing": "guardpolicy.tools.common.timing",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A ``sys.meta_path`` finder for the paths of ``MOVED``: the old path imports as a module
    whose ``__getattr__`` reads the new module."""

    def find_spec(self, name: str, path: object = None, target: object = None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def exec_module(self, module) -> None:
        new = importlib.import_module(MOVED[module.__name__])
        module.__doc__ = f"Moved: {new.__name__}."
        module.__getattr__ = functools.partial(getattr, new)


def install() -> None:
    """Adds the finder once (``import guardpolicy`` calls it)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
