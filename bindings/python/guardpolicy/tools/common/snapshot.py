"""A snapshot: the guard entries ``torch.compile`` offered to ``guard_filter_fn``, as plain data.

Per compiled frame, one row per ``GuardFilterEntry`` holding every schema field
(``policies/schema/guard_entry.yaml``) as a JSON value, read by the VM's own entry reader
(``_core.entry_rows``, ``bindings/policy/snapshot_rows.h``): for any policy over schema fields
``policy.evaluate(rows) == policy(entries)``. Recorded by ``tools.common.recording.Recording`` (with
``rows=True``), made by ``tools.capture``. Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
from typing import Any

from ... import _core
from ...api.data import DATA_DIR


def schema_version() -> int:
    """The ``version:`` of the installed guard-entry schema. Raises ``ValueError`` when the
    schema has no ``version:`` line."""
    text = (DATA_DIR / "schema" / "guard_entry.yaml").read_text(encoding="utf-8")
    m = re.search(r"^version:\s*(\d+)\s*$", text, re.MULTILINE)
    if m is None:
        raise ValueError("guard_entry.yaml has no `version:` line")
    return int(m.group(1))


def entry_rows(entries: Any) -> list[dict[str, Any]]:
    """One row per ``GuardFilterEntry`` of ``entries``: ``{schema field: bool | int | str |
    list of str}`` in schema order, exactly what a policy reads (``_core.entry_rows``). The
    rows reference no live object. Raises the Python error of a field that cannot be read."""
    return _core.entry_rows(entries, str(DATA_DIR))


@dataclasses.dataclass
class Snapshot:
    """What torch offered to ``guard_filter_fn``, as plain data.

    ``frames``: one dict per filter call (torch makes one per compiled frame), in call
    order: ``{"frame": index, "code": co_name of the compiled code or "", "compile_id":
    "0/0" or "", "entries": [row, ...]}``; rows as ``entry_rows``. ``torch``: the torch
    version; ``schema_version``: the guard-entry schema's version.
    """

    frames: list[dict[str, Any]]
    torch: str
    schema_version: int

    def rows(self) -> list[dict[str, Any]]:
        """Every row of every frame, in order."""
        return [row for frame in self.frames for row in frame["entries"]]

    @property
    def entry_count(self) -> int:
        return sum(len(f["entries"]) for f in self.frames)

    def to_dict(self) -> dict[str, Any]:
        return {"torch": self.torch, "schema_version": self.schema_version, "frames": self.frames}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Snapshot":
        if not isinstance(data, dict) or not isinstance(data.get("frames"), list):
            raise ValueError("not a guardpolicy snapshot: expected an object with a `frames` list")
        return cls(frames=data["frames"], torch=str(data.get("torch", "")),
                   schema_version=int(data.get("schema_version", 0)))

    def to_json(self, path: str | os.PathLike | None = None, *, inputs: tuple = ()) -> str | None:
        """The snapshot as JSON text when ``path`` is None; else writes it to ``path``
        (gzip-compressed when it ends in ``.gz``), atomically, refusing (``OSError``) a FIFO,
        a device, a read-only file or one of ``inputs`` and leaving it as it was."""
        from ...api.files import write_file

        text = json.dumps(self.to_dict(), separators=(",", ":")) + "\n"
        if path is None:
            return text
        path = os.fspath(path)
        data = text.encode("utf-8")
        if path.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        write_file(path, data, inputs=inputs)
        return None

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "Snapshot":
        """Reads a snapshot written by ``to_json`` (gzip data is recognized by its magic).
        Raises ``OSError`` for a missing or non-regular file and for more than 128 MiB of
        JSON, stored or inflated (the limit ``guardpolicy check`` applies)."""
        return cls.from_dict(json.loads(_core.read_snapshot_file(os.fsencode(path))))

    def summary(self) -> str:
        return f"{len(self.frames)} frames, {self.entry_count} entries"

    def table(self) -> str:
        """One line per guard: frame, guard type, ``source.kind`` and name."""
        rows = [(str(f["frame"]), r["guard_type"], r["source.kind"], r["name"] or "<ambient>")
                for f in self.frames for r in f["entries"]]
        head = ("frame", "guard_type", "source.kind", "name")
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head[:3])]
        lines = [f"{self.summary()} (torch {self.torch}, schema {self.schema_version})"]
        for r in (head, *rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
