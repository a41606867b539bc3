"""What a compiled object counts and what it keeps, apart from its stance machine
(``call.stance.Stance``): ``Counts``, a plain record of counters, and ``Registries``, the
objects it files what happened in (compiled frames, violations, dry-run events, watches,
eager fallbacks) and its direct dispatch. Both are parts of ``CompileStats``, which shows
their fields under the same names (``guardpolicy.stats(compiled).compiles``, ``.watches``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .frames import EagerFallback, FrameExplanations
from .recompiles import Recompile
from .verify import REGISTRY, Guards, Violation
from .watch import Watches


@dataclasses.dataclass(slots=True)
class Counts:
    """``compiles``: frames compiled, one per ``guard_filter_fn`` call (graph-break resume
    frames count); ``verified_calls``: calls verify checked, ``unverified_calls`` of them on a
    cache entry compiled without verify; ``recoveries``: calls after warm-up that no cache
    entry accepted and that compiled with every guard (``call.recovery``);
    ``serve_time_compiles``: calls inside ``guardpolicy.serving(...)`` that would compile
    (raised, or compiled under ``on_compile="warn"``); ``checked_by_eager``: verified calls on
    which only dropped value guards failed and the cached code's outputs and writes equalled an
    eager call's, so no violation (``call.compared``). Plain ints updated without a lock."""

    compiles: int = 0
    verified_calls: int = 0
    unverified_calls: int = 0
    recoveries: int = 0
    serve_time_compiles: int = 0
    checked_by_eager: int = 0

    def __setstate__(self, state: Any) -> None:
        """A pickle's counters; a counter added since it was made starts at 0."""
        values = state[1] if isinstance(state, tuple) else state
        for field in dataclasses.fields(self):
            setattr(self, field.name, (values or {}).get(field.name, field.default))


class Registries:
    """``explanations``: per compiled frame, a ``FrameExplanations``; ``violations``: verify's
    ``Violation`` objects; ``dry_run_events``: ``dry_run.DryRunEvent`` objects;
    ``eager_fallbacks``: each frame torch stopped compiling at a recompile limit (an
    ``EagerFallback``); ``recompiles``: each compile of a frame that had cache entries, with
    torch's reason per entry (a ``recompiles.Recompile``); ``dispatch``: the ``call.dispatch.DirectDispatch`` (None without
    direct dispatch); ``guards``: verify's registry of compiled frames (the process's
    ``verify.REGISTRY``); ``watches``: the guards watched rather than checked (a
    ``watch.Watches``). ``guards`` and ``watches`` are not pickled: a copy files and watches
    what it compiles itself."""

    __slots__ = ("explanations", "violations", "dry_run_events", "eager_fallbacks", "recompiles", "dispatch", "guards",
                 "watches")

    #: Not pickled (live torch objects).
    _LIVE = ("guards", "watches")

    def __init__(self) -> None:
        self.explanations: list[FrameExplanations] = []
        self.violations: list[Violation] = []
        self.dry_run_events: list[Any] = []
        self.eager_fallbacks: list[EagerFallback] = []
        self.recompiles: list[Recompile] = []
        self.dispatch: Any = None
        self._live()

    def _live(self) -> None:
        self.guards: Guards = REGISTRY
        self.watches = Watches()

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name not in self._LIVE}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()
        for name, value in state.items():
            setattr(self, name, value)
