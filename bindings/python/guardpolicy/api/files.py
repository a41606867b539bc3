"""Writing the files a user names, for every Python writer (``Policy.save``, ``capture -o``,
``bench``/``audit``/``demo`` ``--json`` and ``--plot``): through the C++ helper the command
line uses (core/include/guardpolicy/file_io.h), so a write is atomic and never goes over a
FIFO, a device, a directory, a read-only file or one of the job's inputs."""

from __future__ import annotations

import os
from collections.abc import Iterable

from .. import _core


def _paths(inputs: Iterable[str | os.PathLike]) -> list[bytes]:
    return [os.fsencode(p) for p in inputs]


def write_file(path: str | os.PathLike, data: bytes | str, *, inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Replaces ``path`` by ``data`` (str is written as UTF-8). Raises ``OSError`` (e.g.
    ``PermissionError`` for a read-only file, ``FileExistsError`` for one of ``inputs``) and
    leaves ``path`` as it was when it may not or cannot be written."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    _core.write_file(os.fsencode(path), bytes(data), _paths(inputs))


def check_output_path(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Raises what ``write_file(path, ...)`` would raise for the target itself; writes nothing."""
    _core.check_output_path(os.fsencode(path), _paths(inputs))


def refuse_bad_outputs(parser, outputs: Iterable[str | None], inputs: Iterable[str] = ()) -> None:
    """For a command line tool before its job starts: ``parser.error`` (exit 2) naming the
    first of ``outputs`` (None: not asked for) that ``write_file`` would refuse. An input
    given as ``FILE:NAME`` counts as ``FILE`` too."""
    names = [p for spec in inputs for p in (spec, spec.rsplit(":", 1)[0])]
    for out in outputs:
        if out:
            try:
                check_output_path(out, inputs=names)
            except OSError as e:
                parser.error(f"cannot write {out}: {e.strerror}")
