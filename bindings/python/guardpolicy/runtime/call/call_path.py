"""The one per-call path of a ``guardpolicy.compile`` result, present only when a call needs
guardpolicy (``verify``; the direct dispatch of issue 19 plugs in here too). Without it,
guardpolicy adds nothing to a call.

``CallPath.__call__``: counts the call; on a sampled call (every N-th: the call count only,
never a clock or a random draw, so processes running the same loop check the same calls)
verifies it before it runs, passes the verdict through ``agree`` (identity here; a
multi-process run replaces it with a collective so that all ranks act alike), acts on it,
then runs the call (torch's compiled callable). The counting, the sampling and the call
are the extension's ``CallLayer`` (bindings/runtime/call_layer.h): an unsampled call runs no Python
code of guardpolicy, only a count, a remainder and a vectorcall in C. A sampled call on which
only dropped value guards fail is settled while it runs instead: ``CallLayer`` calls
``inner`` after ``_sampled``, which sets ``inner`` to a one-call ``_Compared`` that puts it
back, runs the call against eager and agrees and acts (``compared``).

The frame verified is the top-level frame: the module's ``forward`` (or the compiled
function), whose frame locals are built as the frame itself will hold them (parameters
bound with their defaults, ``*args``/``**kwargs`` packed, free variables from the closure).
"""

from __future__ import annotations

import os
import sys
import threading
import types
import warnings
from typing import Any, Callable

from . import compared as _compared, recovery as _recovery
from .. import verify as _verify
from ..._core import CallLayer
from ...api.errors import StaleGuardError, StaleGuardWarning
from .frame_locals import frame_locals_binder
from ..logs import log  # violations are logged here, at WARNING (TORCH_LOGS=guardpolicy)


def agree_locally(verdict: _verify.Verdict) -> _verify.Verdict:
    """The default ``CallPath.agree``: this process's verdict is the verdict."""
    return verdict


class CallPath(CallLayer):
    """Calls of one compiled object, when they need guardpolicy (see the module docstring).

    ``inner``: torch's compiled callable (the ``compile_wrapper``); ``compile_stats``: the
    object's ``CompileStats``, and of its parts ``stats`` (the ``Stance``, which holds the call
    count: what ``CallLayer`` counts on), ``counts`` and ``guards`` (verify's registry);
    ``module``: the ``nn.Module`` whose ``forward`` is the top-level frame, or None for a
    function (``function``). ``agree`` is the seam: replace it on the instance. A call
    (``CallLayer``, in C) counts ``stats.call_count``, calls ``_sampled`` on every
    ``stats.verify_every``-th call, then ``inner``, then ``_settle`` when frames compiled
    during the call are pending."""

    def __init__(self, inner: Callable, stats: Any, *, module: Any = None, function: Any = None):
        super().__init__(inner, stats.stance, stats.guards.pending)  # the pending frames (Guards.settle)
        self.compile_stats = stats
        self.counts = stats.counts
        self.guards = stats.guards
        wrapped = getattr(inner, "__wrapped__", None)
        if module is not None and wrapped is not None and getattr(wrapped, "__self__", None) is not module:
            # torch compiles a wrapper frame of its own for this module (a torch.nn module
            # whose forward Dynamo would not trace as a frame: ``external_utils.wrap_inline``)
            module, function = None, wrapped
        self.module = module
        self.function = function
        self.agree: Callable[[_verify.Verdict], _verify.Verdict] = agree_locally
        self._binders: dict[Any, Callable[..., dict]] = {}

    def _sampled(self, call: int, *args: Any, **kwargs: Any) -> None:
        """What ``CallLayer`` calls before sampled call ``call`` runs. A verdict whose only
        failing dropped guards are value guards is settled by running the call against eager
        (``compared.Comparison``), in the call's own place: ``inner`` is ``_Compared`` for
        this one call."""
        verdict, entry, f_locals = self.check(call, args, kwargs)
        if not verdict.comparable:
            self.settle(verdict, entry)
            return
        self.inner = _Compared(self, self.inner, self.comparison(verdict, (entry, f_locals), args, kwargs))

    def _failed(self, exc: BaseException, *args: Any, **kwargs: Any) -> Any:
        """What ``CallLayer`` calls when ``inner`` raised a RuntimeError: the stance's recovery
        (``guardpolicy.runtime.call.recovery``), which re-raises what it does not recover from."""
        return _recovery.recover(self.compile_stats, self.inner, exc, args, kwargs)

    def _settle(self) -> None:
        """What ``CallLayer`` calls after a call while compiled frames are pending."""
        self.guards.settle()

    # -- verify ---------------------------------------------------------------------------

    def verify(self, call: int, args: tuple, kwargs: dict, served: tuple[Any, dict] | None = None) -> _verify.Verdict:
        """Checks call ``call`` (``check``), agrees, acts (``settle``). Raises
        ``StaleGuardError`` under ``on_violation raise``. ``served``: ``(cache entry, frame
        locals)`` when the caller has bound the frame locals and found the entry whose kept
        guards pass (direct dispatch), so that neither is done again. A ``comparable``
        verdict comes back unsettled: the caller runs ``comparison(verdict, served, ...)``."""
        verdict, entry, _ = self.check(call, args, kwargs, served)
        return verdict if verdict.comparable else self.settle(verdict, entry)

    def check(self, call: int, args: tuple, kwargs: dict,
              served: tuple[Any, dict] | None = None) -> tuple[_verify.Verdict, Any, dict | None]:
        """``(verdict, the cache entry torch would serve, the frame locals)`` of call ``call``
        (see ``verify.check``), counted in ``verified_calls``; nothing agreed or acted on."""
        stats, guards = self.compile_stats, self.guards
        f_locals = None
        if served is not None:
            verdict, entry = _verify.check_entry(guards, *served, call, stats.on_violation, _tp())
            f_locals = served[1]
        elif (located := self.frame_locals(args, kwargs)) is None:  # it does not bind: it raises itself
            verdict, entry = _verify.Verdict(call), None
        else:
            code, f_locals = located
            verdict, entry = _verify.check(guards, code, f_locals, call, stats.on_violation, _tp())
        counts = self.counts
        counts.verified_calls += 1
        if verdict.unverified:
            counts.unverified_calls += 1
        return verdict, entry, f_locals

    def settle(self, verdict: _verify.Verdict, entry: Any) -> _verify.Verdict:
        """Agrees on ``verdict`` (``agree``) and acts on a violation (``act``); returns the
        agreed verdict."""
        verdict = self.agree(verdict)
        if verdict.stale:
            self.act(verdict, entry)
        return verdict

    def comparison(self, verdict: _verify.Verdict, served: tuple[Any, dict], args: tuple,
                   kwargs: dict) -> _compared.Comparison:
        """The comparison with eager that settles the ``comparable`` verdict of a call
        (``served``: the cache entry torch would serve and the frame locals)."""
        eager = getattr(self.inner, "__wrapped__", None)  # the function torch compiles
        return _compared.Comparison(self, verdict, served[0], served[1], self.frame_function(), eager, args, kwargs)

    def act(self, verdict: _verify.Verdict, entry: Any) -> None:
        """Records and logs the violations, then: ``recompile``, the entry torch would serve
        is invalidated (and the stance, if any, goes back to full guards) so that this call
        compiles anew, and leaves the count torch compares with ``recompile_limit``
        (``torch_internals.uncount``: verify's recompiles never send the frame to eager);
        ``raise``, ``StaleGuardError``; ``warn``, one warning per guard."""
        stats = self.compile_stats
        stats.registries.violations.extend(verdict.violations)
        for violation in verdict.violations:
            log.warning("%s", violation)
        action = stats.on_violation
        if action == "recompile":
            if entry is not None:
                frame = self.guards.forget(entry)
                owner = frame.owner() if frame is not None and frame.owner is not None else None
                tp = _tp()
                if tp.invalidate(entry, owner, f"guardpolicy verify: {verdict.violations[0].reason}"):
                    tp.uncount(entry.guard_manager)  # verify's recompile: not one toward recompile_limit
            stats.reset_stance()
        elif action == "raise":
            raise StaleGuardError(verdict.violations[0], verdict.violations)
        else:
            for violation in verdict.violations:
                for guard in violation.guards or (None,):
                    what = f"dropped guard {guard}" if guard else "a dropped guard"
                    rank = f" on rank {violation.rank}" if violation.rank is not None else ""
                    warnings.warn(f"guardpolicy: {what} failed on call {violation.call}{rank} of {violation.frame} "
                                  f"(torch: {violation.reason}); the cached code runs", StaleGuardWarning,
                                  stacklevel=_caller_stacklevel())

    def frame_function(self) -> Any:
        """The function whose frame is verified (a module's ``forward``, unbound)."""
        fn = self.module.forward if self.module is not None else self.function
        return getattr(fn, "__func__", fn)

    def frame_locals(self, args: tuple, kwargs: dict) -> tuple[Any, dict[str, Any]] | None:
        """``(code, frame locals)`` of the top-level frame this call will run, or None when
        the arguments do not bind (or the callable has no Python code). The locals are bound
        by CPython (``frame_locals.frame_locals_binder``, made once per function)."""
        fn = self.module.forward if self.module is not None else self.function
        func = getattr(fn, "__func__", fn)
        bound = getattr(fn, "__self__", None) if func is not fn else None
        if not isinstance(func, types.FunctionType):
            return None
        binder = self._binders.get(func)
        if binder is None:
            binder = self._binders[func] = frame_locals_binder(func)
        try:
            f_locals = binder(bound, *args, **kwargs) if bound is not None else binder(*args, **kwargs)
        except TypeError:
            return None
        return func.__code__, f_locals


class _Compared:
    """What ``CallLayer`` calls in place of ``inner`` on one sampled call that is compared
    with eager (``CallPath._sampled``): it puts ``inner`` back, then runs the comparison,
    which runs the call (and, when it must run again on a new compile, ``inner`` once more).
    A call of another thread that meets it runs ``inner`` as usual."""

    __slots__ = ("path", "inner", "comparison", "thread")

    def __init__(self, path: CallPath, inner: Callable, comparison: _compared.Comparison):
        self.path = path
        self.inner = inner
        self.comparison = comparison
        self.thread = threading.get_ident()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        inner = self.inner
        if threading.get_ident() != self.thread:
            return inner(*args, **kwargs)
        if self.path.inner is self:
            self.path.inner = inner
        comparison, self.comparison = self.comparison, None
        out = comparison.run(lambda: inner(*args, **kwargs))
        return inner(*args, **kwargs) if out is _compared.RERUN else out


def _caller_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by this function's caller that names
    the first frame outside guardpolicy and torch: the line that called the compiled object,
    whichever path (a module, a function, direct dispatch) the call took."""
    import torch

    internal = tuple(os.path.dirname(m.__file__) + os.sep for m in (sys.modules[__package__.partition(".")[0]], torch))
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(internal):
        frame, level = frame.f_back, level + 1
    return level


def _tp() -> Any:
    from .. import torch_internals

    return torch_internals
