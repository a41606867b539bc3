"""A sampled call whose only failing dropped guards are value guards, run against eager
before verify counts a violation (docs/verify.md, "Value guards: compared with eager").

A storm fix drops a guard on a value that changes on every call and that the compiled code
does not use (a run id in a new options dict per call, read by a dead branch). Every sampled
call then fails that dropped guard; counting each as a violation recompiles on every sampled
call, which is the storm again. When the dropped guards that fail are all value guards
(``verify.VALUE_GUARD_TYPES``; the verdict is ``comparable``), ``Comparison.run`` decides:

1. the state the call may write is recorded (``WrittenState``: attributes, dict, list and set
   items reachable from the frame's locals and the globals its code reads or assigns;
   tensors by version counter) with torch's random number generators' states;
2. the original function runs eagerly (``torch.compiler.set_stance("force_eager")``) under
   ``WriteGuard``, a dispatch mode that stops the run before it writes a tensor that the run
   did not create (a parameter, a buffer, an input, a KV cache; batch norm's running
   statistics too, which ``native_batch_norm`` writes without saying so in its schema);
3. the recorded state and the generators are put back, and the call runs as it would have:
   the cache entry torch serves (the stale one) runs it, once;
4. its outputs and what it wrote are compared with the eager run's (tensors with
   ``torch.testing.assert_close``'s per-dtype tolerances, NaN equal to NaN).

Equal: no violation (``gp.stats(c).checked_by_eager`` counts the call; DEBUG log). Different:
the violation, handled per ``on_violation`` as any other: ``recompile`` puts the state back and
the call runs again on a new compile (``RERUN``), ``raise`` puts it back and raises, ``warn``
warns and returns what the cached code returned. Where the eager run cannot be made or
repeated (it would write a tensor in place, it raised, the state is too large to record, the
object agrees over a ``torch.distributed`` group, whose collectives one rank alone must not
run) the verdict is a violation as without the comparison, and the state is left as it was
before the call. Where the cached code itself wrote a tensor in place and differs, the
result it returned is served (logged at WARNING): the call cannot run twice.
"""

from __future__ import annotations

from typing import Any, Callable

from .. import verify as _verify
from ..logs import log
from .written_state import MAX_OBJECTS, Written, WrittenState, code_globals

#: What ``Comparison.run`` returns when the call must run again (state put back, entry
#: invalidated): the caller runs it through torch, which compiles.
RERUN = object()


class _ForeignWrite(Exception):
    """Raised inside the eager run before an op writes a tensor the run did not create."""


class Comparison:
    """One comparable sampled call (``verdict.comparable``) of the per-call path ``path``:
    the cache entry torch would serve (``entry``), the frame's locals (``f_locals``) and its
    function (``function``: where its code and globals are read), and the call's arguments.
    ``run`` settles the verdict (agreed and acted on by ``path``) and returns the call's
    result or ``RERUN``. Holds the call's inputs until it has run."""

    __slots__ = ("path", "verdict", "entry", "roots", "bindings", "eager", "args", "kwargs")

    def __init__(self, path: Any, verdict: _verify.Verdict, entry: Any, f_locals: dict[str, Any],
                 function: Any, eager: Callable | None, args: tuple, kwargs: dict):
        self.path = path
        self.verdict = verdict
        self.entry = entry
        code = getattr(function, "__code__", None)
        scope = getattr(function, "__globals__", None)
        read, self.bindings = code_globals(code, scope) if code is not None and scope is not None else ([], [])
        self.roots = [*f_locals.values(), *read]
        self.eager = eager
        self.args = args
        self.kwargs = kwargs

    def run(self, stale: Callable[[], Any]) -> Any:
        """The call's result, or ``RERUN`` (see the module docstring); ``stale()`` runs the
        call on the cache entry torch serves. Raises ``StaleGuardError`` under
        ``on_violation raise`` when the runs differ, and what the call raises."""
        ref = self._eager_run()
        if ref.state is None:  # not compared, nothing written: the call goes on as without the comparison
            settled = self._settle(self.verdict, ref.why, restorable=True)
            return stale() if settled is None else settled
        if ref.wrote:  # the eager run wrote a tensor that dispatch did not show: it was the call
            self._settle(self.verdict, ref.why, restorable=False)
            if ref.error is not None:
                raise ref.error
            return ref.result
        state, rng = ref.state, ref.rng
        eager_written = state.written()
        state.restore()
        _set_rng(rng)
        try:
            result = stale()
        except Exception as e:  # noqa: BLE001 - the cached code raised where eager did not
            moved = state.tensors_moved()
            settled = self._settle(self.verdict, f"the cached code raised {type(e).__name__}", not moved, state, rng)
            if settled is RERUN:
                return RERUN
            raise
        moved = state.tensors_moved()
        differs = _differs(result, ref.result, state.written(), eager_written, moved)
        verdict = self.verdict if differs else _verify.Verdict(self.verdict.call)
        settled = self._settle(verdict, differs, not moved, state, rng)
        return result if settled is None else settled

    def _eager_run(self) -> "_EagerRun":
        """The original function run eagerly from the call's state (see the module
        docstring), or why it was not."""
        if self.eager is None:
            return _EagerRun("no Python function to run eagerly")
        if self.path.compile_stats.ranks.group is not None:
            return _EagerRun("the ranks of a torch.distributed group agree on it: one rank alone runs no call")
        try:
            state = WrittenState(self.roots, self.bindings)
        except Exception as e:  # noqa: BLE001 - an object that does not let itself be walked
            return _EagerRun(f"its state could not be recorded ({type(e).__name__}: {e})")
        finally:
            self.roots = []
        if not state.complete:
            return _EagerRun(f"its state is larger than {MAX_OBJECTS} objects")
        rng = _rng_state()
        try:
            with _eager_mode(), _write_guard()():
                result = self.eager(*self.args, **self.kwargs)
        except Exception as e:  # noqa: BLE001 - _ForeignWrite, or the function's own error
            if state.tensors_moved():
                return _EagerRun(_OUTSIDE_DISPATCH, state, rng, error=e)
            state.restore()
            _set_rng(rng)
            return _EagerRun(f"the eager run would write {e}" if isinstance(e, _ForeignWrite)
                             else f"the eager run raised {type(e).__name__}: {e}")
        if state.tensors_moved():
            return _EagerRun(_OUTSIDE_DISPATCH, state, rng, result)
        return _EagerRun("", state, rng, result)

    def _settle(self, verdict: _verify.Verdict, why: str, restorable: bool, state: WrittenState | None = None,
                rng: Any = None) -> Any:
        """Agrees on ``verdict`` (``path.agree``) and acts on it; ``why``: why it is a
        violation after all ("" when the runs were equal). Returns None when the result of the
        cached code stands, else ``RERUN``. Raises under ``on_violation raise``."""
        path = self.path
        verdict = path.agree(verdict)
        call, frame = verdict.call, self.verdict.violations[0].frame
        if not verdict.stale:
            path.counts.checked_by_eager += 1
            log.debug("guardpolicy: call %d of %s: only dropped value guards failed (%s); the cached code's "
                      "outputs and writes equal eager's: no violation", call, frame, _guards(self.verdict))
            return None
        log.debug("guardpolicy: call %d of %s compared with eager: %s", call, frame, why or "another rank differs")
        action = path.compile_stats.on_violation
        if not restorable:
            log.warning("guardpolicy: call %d of %s: %s; it cannot run again, so this result stands", call, frame, why)
        elif action != "warn" and state is not None:
            state.restore()
            _set_rng(rng)
        path.act(verdict, self.entry)
        return RERUN if action == "recompile" and restorable else None


_OUTSIDE_DISPATCH = "the eager run wrote a tensor in place outside torch's dispatch"


class _EagerRun:
    """What ``Comparison._eager_run`` did: ``why`` it cannot be compared ("" when it can);
    ``state`` (None: nothing is written, the call runs as it would have), ``rng``,
    ``result`` or ``error``; ``wrote``: it wrote a tensor, so it was the call."""

    __slots__ = ("why", "state", "rng", "result", "error")

    def __init__(self, why: str, state: WrittenState | None = None, rng: Any = None, result: Any = None,
                 error: BaseException | None = None):
        self.why, self.state, self.rng, self.result, self.error = why, state, rng, result, error

    @property
    def wrote(self) -> bool:
        return self.why == _OUTSIDE_DISPATCH


def _differs(result: Any, expected: Any, written: Written, eager_written: Written, moved: bool) -> str:
    """Why the cached code's run differs from eager's ("" when it does not)."""
    if moved:
        return "the cached code wrote a tensor in place that eager did not"
    if not same_value(result, expected):
        return "the outputs differ"
    ours, theirs = written.changes, eager_written.changes
    for key in (*ours, *(k for k in theirs if k not in ours)):
        mine, eager = ours.get(key), theirs.get(key)
        if mine is None or eager is None or mine[0] != eager[0] or not same_value(mine[1], eager[1]):
            return f"the state they wrote differs: {(mine or eager)[2]}"
    return ""


def same_value(a: Any, b: Any, depth: int = 0) -> bool:
    """Whether ``a`` (the cached code's) equals ``b`` (eager's): the same object, tensors
    close (``torch.testing.assert_close``'s tolerances, NaN equal, same ``requires_grad``),
    sequences, dicts and objects' ``__dict__`` item by item, else ``==``."""
    import torch

    if a is b:
        return True
    if depth > 32 or type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device or a.requires_grad != b.requires_grad:
            return False
        try:
            torch.testing.assert_close(a, b, equal_nan=True, check_stride=False)
        except AssertionError:
            return False
        return True
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_value(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if not isinstance(a, type) and isinstance(getattr(a, "__dict__", None), dict):
        return same_value(vars(a), vars(b), depth + 1)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare are not equal
        return False


def _guards(verdict: _verify.Verdict) -> str:
    return ", ".join(f"`{g.name}`" for v in verdict.violations for g in v.guards)


def _eager_mode() -> Any:
    """Every compiled region runs eagerly while the reference call runs."""
    import torch

    return torch.compiler.set_stance("force_eager")


def _rng_state() -> tuple[Any, Any]:
    import torch

    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None


def _set_rng(state: tuple[Any, Any] | None) -> None:
    import torch

    if state is None:
        return
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


_WRITE_GUARD: type | None = None


def _write_guard() -> type:
    """``WriteGuard`` (made on first use: the dispatch mode class is torch's)."""
    global _WRITE_GUARD
    if _WRITE_GUARD is None:
        from .write_guard import make_write_guard

        _WRITE_GUARD = make_write_guard(_ForeignWrite)
    return _WRITE_GUARD
