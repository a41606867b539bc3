"""What a ``guard_filter_fn`` was offered and decided, recorded: the tools' one recording filter.

``Recording(inner)`` is a ``guard_filter_fn`` that decides as ``inner`` (every guard kept when
``inner`` is None) and records; ``recording.policy(p)`` is the ``guardpolicy.Policy`` ``p``
(for ``guardpolicy.compile``: its ``config`` and ``stance`` lines apply) recording the same way
(``Policy.observed``). ``Recording(rows=True)`` records instead, per filter call, the rows of
the entries offered (a snapshot's frames, ``tools.common.snapshot``; what ``tools.capture`` writes);
``recording.filter(inner)`` is one more ``guard_filter_fn`` recording into the same object.
torch calls the filter once per compiled frame, at compile time only: recording costs nothing
per call.
"""

from __future__ import annotations

from typing import Any, Callable

from ...api.policy import Policy
from ...runtime.frames import compiled_frame
from .snapshot import Snapshot, entry_rows, schema_version


class Recording:
    """``frames``: filter calls (one per compiled frame). While ``recording``: ``offered`` and
    ``kept``, guards summed over frames; ``dropped_guards``, ``(name, guard_type)`` of each
    guard dropped. ``stop_recording()`` ends that and keeps ``first_frames``, the frames
    compiled until then. With ``rows=True``: ``frame_rows``, one snapshot frame per filter
    call (``{"frame", "code", "compile_id", "entries": rows}``, rows made before ``inner``
    decides), counted on ``progress`` (a ``tools.common.progress.Progress``) when given; the
    decisions are ``inner``'s, returned as it gave them, and not counted. Keeps no reference
    to any entry."""

    def __init__(self, inner: Callable[[Any], Any] | None = None, *, rows: bool = False,
                 progress: Any = None):
        self.inner = inner
        self.frames = 0
        self.offered = 0
        self.kept = 0
        self.dropped_guards: list[tuple[str, str]] = []
        self.recording = True
        self.first_frames = 0
        self.frame_rows: list[dict[str, Any]] | None = [] if rows else None
        self.progress = progress

    @property
    def dropped(self) -> int:
        """Guards dropped while recording, summed over frames."""
        return self.offered - self.kept

    def counts(self) -> tuple[int, int, int]:
        """``(frames, offered, kept)``."""
        return self.frames, self.offered, self.kept

    def stop_recording(self) -> None:
        """What was recorded so far is the first compile; later frames are only counted."""
        self.recording = False
        self.first_frames = self.frames

    def __call__(self, entries: Any) -> list[bool]:
        return self._filter_call(self.inner, entries)

    def filter(self, inner: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
        """A ``guard_filter_fn`` deciding as ``inner`` (every guard kept when None) and
        recording into this object; its ``_guardpolicy_recorder`` is this object."""
        def guard_filter_fn(entries):
            return self._filter_call(inner, entries)

        guard_filter_fn._guardpolicy_recorder = self  # type: ignore[attr-defined]
        return guard_filter_fn

    def _filter_call(self, inner: Callable[[Any], Any] | None, entries: Any) -> Any:
        entries = list(entries)
        if self.frame_rows is not None:
            self._record_rows(entries)
            return [True] * len(entries) if inner is None else inner(entries)
        decisions = [True] * len(entries) if inner is None else inner(entries)
        self.observe(entries, decisions)
        return decisions

    def _record_rows(self, entries: list[Any]) -> None:
        """One snapshot frame of ``entries``, labelled with the frame being compiled."""
        frame = compiled_frame()
        self.frames += 1
        self.frame_rows.append({"frame": len(self.frame_rows), "code": frame.function,
                                "compile_id": frame.compile_id, "entries": entry_rows(entries)})
        if self.progress:
            label = f"{frame.function} {frame.compile_id}".strip()
            self.progress.step("frames compiled", len(self.frame_rows), None, label)

    def snapshot(self) -> Snapshot:
        """The frames recorded with ``rows=True`` as a ``Snapshot`` (imports torch for its
        version)."""
        import torch

        if self.frame_rows is None:
            raise ValueError("a Recording made without rows=True has no snapshot")
        return Snapshot(frames=list(self.frame_rows), torch=str(torch.__version__), schema_version=schema_version())

    def observe(self, entries: list[Any], decisions: list[bool]) -> None:
        """Records one filter call's ``decisions`` for ``entries`` (``GuardFilterEntry``)."""
        if len(decisions) != len(entries):
            raise AssertionError(f"policy returned {len(decisions)} decisions for {len(entries)} guards")
        self.frames += 1
        if not self.recording:
            return
        self.offered += len(entries)
        self.kept += sum(1 for d in decisions if d is True)
        self.dropped_guards.extend((e.name, e.guard_type) for e, keep in zip(entries, decisions) if keep is not True)

    def policy(self, policy: Policy, extra_config: dict[str, Any] | None = None) -> Policy:
        """``policy`` recording into this object, with ``extra_config`` added to its
        ``config`` lines (``Policy.observed``)."""
        return policy.observed(self.observe, extra_config)
