"""Snapshots of the guard entries ``torch.compile`` offers to ``guard_filter_fn``.

A snapshot is plain data: per compiled frame, one row per ``GuardFilterEntry`` holding
every schema field (``policies/schema/guard_entry.yaml``) as a JSON value, read exactly as
the C++ binding reads it (``bindings/entry_extractor.cpp``). So for any policy
``policy.evaluate(rows) == policy(entries)``, and a snapshot can be saved, diffed, fed to
benchmarks and replayed without torch, the model or the live entries.

    from guardpolicy.tools.capture import capture
    snap = capture(model, x)                 # compiles with backend="eager", calls once
    snap.to_json("entries.json")
    policy.evaluate(snap.rows())             # decisions, as policy(entries) would give

From the command line, ``python -m guardpolicy capture SCRIPT.py|module:function -o
OUT.json`` records every ``torch.compile`` the script (or function) runs.

Nothing here keeps a reference to an entry, its value, its guard or its source: rows are
built inside the filter call. Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import re
import sys
from typing import Any, Callable, Iterator

from ..frames import compiled_frame
from ..loading import DATA_DIR

from .. import _core

#: Schema fields, in schema order: the keys of every row. The binding's field table,
#: generated from policies/schema/guard_entry.yaml when the package is built.
FIELDS = tuple(_core.schema_fields())

# GuardSource predicate methods: the field `guard_source.<method>` is `<method>()`.
_GUARD_SOURCE_PREDICATES = tuple(f.split(".", 1)[1] for f in FIELDS if f.startswith("guard_source."))

_MAX_SOURCE_DEPTH = 1000  # as kMaxSourceDepth: a longer `.base` chain is malformed


def schema_version() -> int:
    """The ``version:`` of the installed guard-entry schema."""
    text = (DATA_DIR / "schema" / "guard_entry.yaml").read_text(encoding="utf-8")
    m = re.search(r"^version:\s*(\d+)\s*$", text, re.MULTILINE)
    if m is None:
        raise ValueError("guard_entry.yaml has no `version:` line")
    return int(m.group(1))


# --------------------------------------------------------------------------- one entry


_TORCH_TYPES: tuple | None = None


def _torch_types() -> tuple:
    """(torch.Tensor, torch.nn.Parameter, torch.nn.Module), imported on first use."""
    global _TORCH_TYPES
    if _TORCH_TYPES is None:
        import torch

        _TORCH_TYPES = (torch.Tensor, torch.nn.Parameter, torch.nn.Module)
    return _TORCH_TYPES


def _walk(src: Any) -> tuple[str, int, bool]:
    """(root type name, number of `.base` links, whether a link is attribute `_buffers`),
    as EntryExtractor::WalkSource."""
    cur, depth, via_buffers = src, 0, False
    while depth < _MAX_SOURCE_DEPTH and hasattr(cur, "base"):
        if hasattr(cur, "member"):
            member = cur.member
            if isinstance(member, str) and member == "_buffers":
                via_buffers = True
        cur = cur.base
        depth += 1
    return type(cur).__name__, depth, via_buffers


def entry_row(entry: Any) -> dict[str, Any]:
    """Every schema field of one ``GuardFilterEntry`` as a plain JSON value (bool, int,
    str, list of str for ``derived_guard_types``), keyed by field name in schema order.

    Computed as the C++ extractor computes it: when ``has_value`` is false, ``value.type``
    is ``""`` and every ``value.is_*`` is false (``entry.value`` is not read);
    ``guard_source`` is the GuardSource member name; ``source.kind``/``source.root`` are
    type names (``type(x).__name__``); ``path``/``module_path`` are the binding's own walk
    (``_core.source_paths``); ``user_frame.*`` come from
    ``orig_guard.user_stack[-1]`` (``""``/``0`` when there is no stack or the attribute
    is not a str/int). The row references no live object.
    """
    tensor_t, parameter_t, module_t = _torch_types()
    guard = entry.orig_guard
    gs = guard.source
    src = guard.originating_source
    root, depth, via_buffers = _walk(src)
    path, module_path = _core.source_paths(src)
    has_value = bool(entry.has_value)

    value_type = ""
    is_tensor = is_parameter = is_buffer = is_module = False
    if has_value:
        value = entry.value
        t = type(value)
        value_type = str(t.__module__) + "." + str(t.__qualname__)
        is_tensor = isinstance(value, tensor_t)
        is_parameter = isinstance(value, parameter_t)
        is_module = isinstance(value, module_t)
        is_buffer = is_tensor and not is_parameter and via_buffers
        del value

    frame_file, frame_line, frame_function = "", 0, ""
    stack = guard.user_stack
    if stack is not None and len(stack) != 0:
        frame = stack[-1]
        if frame is not None:
            f = frame.filename
            frame_file = f if isinstance(f, str) else ""
            f = frame.name
            frame_function = f if isinstance(f, str) else ""
            f = frame.lineno
            frame_line = int(f) if isinstance(f, int) else 0

    values = {
        "name": str(entry.name),
        "guard_type": str(entry.guard_type),
        "derived_guard_types": [str(t) for t in entry.derived_guard_types],
        "is_global": bool(entry.is_global),
        "has_value": has_value,
        "guard_source": str(gs.name),
        "source.kind": type(src).__name__,
        "source.root": root,
        "source.depth": depth,
        "value.type": value_type,
        "value.is_tensor": is_tensor,
        "value.is_parameter": is_parameter,
        "value.is_buffer": is_buffer,
        "value.is_module": is_module,
        "user_frame.file": frame_file,
        "user_frame.line": frame_line,
        "user_frame.function": frame_function,
        "path": path,
        "module_path": module_path,
    }
    for p in _GUARD_SOURCE_PREDICATES:
        values["guard_source." + p] = bool(getattr(gs, p)())
    return {f: values[f] for f in FIELDS}  # a KeyError names a schema field read nowhere here


def entry_rows(entries: Any) -> list[dict[str, Any]]:
    """``[entry_row(e) for e in entries]``."""
    return [entry_row(e) for e in entries]


# --------------------------------------------------------------------------- snapshot


@dataclasses.dataclass
class Snapshot:
    """What torch offered to ``guard_filter_fn``, as plain data.

    ``frames``: one dict per filter call (torch makes one per compiled frame), in call
    order: ``{"frame": index, "code": co_name of the compiled code or "", "compile_id":
    "0/0" or "", "entries": [row, ...]}``; rows as ``entry_row``. ``torch``: the torch
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
        from .._files import write_file

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
        from .. import _core

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


def _compiled_frame_info() -> tuple[str, str]:
    """(co_name of the code being compiled, compile id) for the filter call in progress;
    "" where unknown (see ``frames.compiled_frame``)."""
    frame = compiled_frame()
    return frame.function, frame.compile_id


class Recorder:
    """Collects rows per filter call. ``recorder.filter(inner)`` is a ``guard_filter_fn``
    that records and then returns ``inner(entries)`` (all True when ``inner`` is None)."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def record(self, entries: Any) -> None:
        code, compile_id = _compiled_frame_info()
        self.frames.append(
            {"frame": len(self.frames), "code": code, "compile_id": compile_id, "entries": entry_rows(entries)}
        )

    def filter(self, inner: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
        recorder = self

        def guard_filter_fn(entries):
            entries = list(entries)
            recorder.record(entries)
            if inner is None:
                return [True] * len(entries)
            return inner(entries)

        guard_filter_fn._guardpolicy_recorder = self  # type: ignore[attr-defined]
        return guard_filter_fn

    def __call__(self, entries: Any) -> list[bool]:
        """The recorder itself as a keep-everything ``guard_filter_fn``."""
        return self.filter()(entries)

    def snapshot(self) -> Snapshot:
        import torch

        return Snapshot(frames=list(self.frames), torch=str(torch.__version__), schema_version=schema_version())


def capture(fn: Callable, *args: Any, **kwargs: Any) -> Snapshot:
    """Compiles ``fn`` with ``torch.compile(backend="eager")`` and a recording
    ``guard_filter_fn`` that keeps every guard, calls it once with ``args``/``kwargs``
    (in the caller's grad mode) and returns the snapshot. Dynamo is reset before compiling
    and after the call, so nothing compiled here stays cached."""
    import torch
    import torch._dynamo

    recorder = Recorder()
    torch._dynamo.reset()
    try:
        compiled = _original_compile(torch)(fn, backend="eager", options={"guard_filter_fn": recorder.filter()})
        compiled(*args, **kwargs)
        del compiled
    finally:
        torch._dynamo.reset()
    return recorder.snapshot()


# --------------------------------------------------------------------------- global recording

_ACTIVE_COMPILE: list = []  # the torch.compile each active `recording()` replaced, innermost first


def _original_compile(torch_module) -> Callable:
    """torch.compile as it was before any active ``recording()`` patched it."""
    return _ACTIVE_COMPILE[-1] if _ACTIVE_COMPILE else torch_module.compile


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Within the block, every ``torch.compile`` call (function form, decorator form and
    ``nn.Module.compile``) gets a recording ``guard_filter_fn``: the options dict is copied
    and the filter merged in; a ``guard_filter_fn`` the caller passes is still called and
    its decisions returned. With ``mode=`` and no ``options`` (torch refuses both), the
    filter is passed to ``torch._dynamo.optimize`` instead. Direct
    ``torch._dynamo.optimize`` calls are not recorded."""
    import torch
    import torch._dynamo

    recorder = Recorder()
    original = torch.compile
    original_optimize = torch._dynamo.optimize

    def compile(model=None, **kwargs):  # noqa: A001 - replaces torch.compile
        if model is None:  # decorator form: torch.compile(**kw)(fn)
            return lambda m: compile(m, **kwargs)
        options = kwargs.get("options")
        if kwargs.get("mode") is not None and options is None:
            def optimize(*a, **kw):
                kw["guard_filter_fn"] = _wrap(kw.get("guard_filter_fn"))
                return original_optimize(*a, **kw)

            torch._dynamo.optimize = optimize
            try:
                return original(model, **kwargs)
            finally:
                torch._dynamo.optimize = original_optimize
        options = dict(options) if isinstance(options, dict) else ({} if options is None else options)
        if isinstance(options, dict):
            options["guard_filter_fn"] = _wrap(options.get("guard_filter_fn"))
        kwargs["options"] = options
        return original(model, **kwargs)

    def _wrap(inner):
        if getattr(inner, "_guardpolicy_recorder", None) is recorder:
            return inner
        return recorder.filter(inner)

    compile.__doc__ = original.__doc__
    compile.__wrapped__ = original  # type: ignore[attr-defined]
    torch.compile = compile
    _ACTIVE_COMPILE.insert(0, original)
    try:
        yield recorder
    finally:
        _ACTIVE_COMPILE.remove(original)
        torch.compile = original


def _run_target(target: str, argv: list[str]) -> int:
    """Runs ``SCRIPT.py`` (as ``__main__``, with ``sys.argv = [SCRIPT, *argv]``) or calls
    ``module:function()``; returns the script's exit status."""
    import runpy

    if not (target.endswith(".py") or os.path.exists(target) or ":" not in target):
        import importlib

        module_name, func_name = target.split(":", 1)
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        obj: Any = importlib.import_module(module_name)
        for part in func_name.split("."):
            obj = getattr(obj, part)
        obj()
        return 0
    script = os.path.abspath(target)
    old_argv, old_path0 = sys.argv, list(sys.path)
    sys.argv = [target, *argv]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv = old_argv
        sys.path[:] = old_path0
    return 0


def _model_help() -> str:
    from ._model_spec import MODEL_HELP

    return MODEL_HELP


def _capture_model(parser, spec: str, output: str) -> int:
    """``capture --model SPEC -o OUT``: the model's guards, as ``capture(fn, *args, **kwargs)``."""
    from . import _model_spec
    from .._files import refuse_bad_outputs

    refuse_bad_outputs(parser, [output], [spec])
    try:
        built = _model_spec.resolve(spec).build()
    except _model_spec.ModelSpecError as e:
        parser.error(f"--model: {e}")
    snapshot = capture(built.fn, *built.args, **built.kwargs)
    snapshot.to_json(output, inputs=(_model_spec.split_spec(spec)[0],))
    print(f"captured {snapshot.summary()} from {spec} -> {output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m guardpolicy capture SCRIPT.py|module:function -o OUT.json [-- ARGS]`` or
    ``capture --model MODEL -o OUT.json``."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m guardpolicy capture",
        description=(
            "Record the guard entries torch.compile offers to guard_filter_fn while running a "
            "script (SCRIPT.py, run as __main__) or calling module:function() with no arguments; "
            "write them as a JSON snapshot (one row of schema fields per entry, per compiled frame)."
        ),
    )
    parser.add_argument("target", nargs="?", help="SCRIPT.py or module:function")
    parser.add_argument("--model", metavar="MODEL",
                        help="instead of a target: " + _model_help() + "; compiled and called once")
    parser.add_argument("-o", "--output", required=True, help="snapshot path (.json, or .json.gz)")
    parser.epilog = "Arguments after `--` are passed to the script as sys.argv[1:]."
    argv = sys.argv[1:] if argv is None else list(argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    ns = parser.parse_args(argv)
    if (ns.target is None) == (ns.model is None):
        parser.error("give either SCRIPT.py|module:function or --model MODEL")
    if ns.model is not None:
        return _capture_model(parser, ns.model, ns.output)

    is_script = ns.target.endswith(".py") or os.path.exists(ns.target) or ":" not in ns.target
    if is_script and not os.path.isfile(ns.target):
        parser.error(f"no such script: {ns.target} (give SCRIPT.py or module:function)")

    from .._files import refuse_bad_outputs

    inputs = (ns.target,) if is_script else ()
    refuse_bad_outputs(parser, [ns.output], inputs)  # before the script: its guards would be lost

    import torch._dynamo

    torch._dynamo.reset()
    status = 0
    with recording() as recorder:
        try:
            status = _run_target(ns.target, script_args)
        except BaseException:
            # keep what was recorded before the failure, then let it propagate
            snapshot = recorder.snapshot()
            snapshot.to_json(ns.output, inputs=inputs)
            print(f"captured {snapshot.summary()} from {ns.target} (which raised) -> {ns.output}",
                  file=sys.stderr)
            raise
    snapshot = recorder.snapshot()
    snapshot.to_json(ns.output, inputs=inputs)
    print(f"captured {snapshot.summary()} from {ns.target} -> {ns.output}")
    if status:
        print(f"{ns.target} exited with status {status}", file=sys.stderr)
    return status
