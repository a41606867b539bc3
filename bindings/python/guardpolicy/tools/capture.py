"""Snapshots of the guard entries ``torch.compile`` offers to ``guard_filter_fn``.

A snapshot is plain data: per compiled frame, one row per ``GuardFilterEntry`` holding
every schema field (``policies/schema/guard_entry.yaml``) as a JSON value, read exactly as
the C++ binding reads it for a policy (``_core.entry_rows``, ``bindings/policy/snapshot_rows.h``;
the snapshot itself is ``tools.common.snapshot.Snapshot``). So for any policy
``policy.evaluate(rows) == policy(entries)``, and a snapshot can be saved, diffed, fed to
benchmarks and replayed without torch, the model or the live entries.

    from guardpolicy.tools.capture import capture
    snap = capture(model, x)                 # compiles with backend="eager", calls once
    snap.to_json("entries.json")
    policy.evaluate(snap.rows())             # decisions, as policy(entries) would give

From the command line, ``python -m guardpolicy capture SCRIPT.py|module:function -o
OUT.json`` records every ``torch.compile`` the script (or function) runs and writes the
snapshot atomically, only when the script succeeds: a script that raises or exits non-zero,
a Ctrl-C, or a write that fails (a full disk) leaves an existing OUT.json byte-identical
(one line on stderr, a non-zero status; 130 for Ctrl-C).

Nothing here keeps a reference to an entry, its value, its guard or its source: rows are
built inside the filter call. Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable, Iterator

from .. import _core
from .common.recording import Recording
from .common.snapshot import Snapshot, entry_rows, schema_version

__all__ = ["FIELDS", "Snapshot", "capture", "entry_row", "entry_rows", "main", "recording", "schema_version"]

#: Schema fields, in schema order: the keys of every row. The binding's field table,
#: generated from policies/schema/guard_entry.yaml when the package is built.
FIELDS = tuple(_core.schema_fields())


def entry_row(entry: Any) -> dict[str, Any]:
    """Every schema field of one ``GuardFilterEntry`` as a JSON value, keyed by field name
    in schema order: ``entry_rows([entry])[0]`` (``tools.common.snapshot.entry_rows``)."""
    return entry_rows((entry,))[0]


def capture(fn: Callable, *args: Any, **kwargs: Any) -> Snapshot:
    """Compiles ``fn`` with ``torch.compile(backend="eager")`` and a recording
    ``guard_filter_fn`` that keeps every guard, calls it once with ``args``/``kwargs``
    (in the caller's grad mode) and returns the snapshot. Dynamo is reset before compiling
    and after the call, so nothing compiled here stays cached."""
    import torch

    recorder = Recording(rows=True)
    torch.compiler.reset()
    try:
        compiled = _original_compile(torch)(fn, backend="eager", options={"guard_filter_fn": recorder.filter()})
        compiled(*args, **kwargs)
        del compiled
    finally:
        torch.compiler.reset()
    return recorder.snapshot()


# --------------------------------------------------------------------------- global recording

_ACTIVE_COMPILE: list = []  # the torch.compile each active `recording()` replaced, innermost first


def _original_compile(torch_module) -> Callable:
    """torch.compile as it was before any active ``recording()`` patched it."""
    return _ACTIVE_COMPILE[-1] if _ACTIVE_COMPILE else torch_module.compile


@contextlib.contextmanager
def recording(progress: Any = None) -> Iterator[Recording]:
    """A ``Recording(rows=True)``, yielded; within the block, every ``torch.compile`` call (function form, decorator form and
    ``nn.Module.compile``) gets a recording ``guard_filter_fn``: the options dict is copied
    and the filter merged in; a ``guard_filter_fn`` the caller passes is still called and
    its decisions returned. With ``mode=`` and no ``options`` (torch refuses both), the
    filter is passed to Dynamo's ``optimize`` entry point instead
    (``torch_internals.dynamo_optimize_replaced``). Direct ``optimize`` calls are not
    recorded."""
    import torch

    from ..runtime import torch_internals

    recorder = Recording(rows=True, progress=progress)
    original = torch.compile

    def compile(model=None, **kwargs):  # noqa: A001 - replaces torch.compile
        if model is None:  # decorator form: torch.compile(**kw)(fn)
            return lambda m: compile(m, **kwargs)
        options = kwargs.get("options")
        if kwargs.get("mode") is not None and options is None:
            def optimize(original_optimize, *a, **kw):
                kw["guard_filter_fn"] = _wrap(kw.get("guard_filter_fn"))
                return original_optimize(*a, **kw)

            with torch_internals.dynamo_optimize_replaced(optimize):
                return original(model, **kwargs)
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
    from .common.model_spec import MODEL_HELP

    return MODEL_HELP


def _capture_model(parser, spec: str, output: str) -> int:
    """``capture --model SPEC -o OUT``: the model's guards, as ``capture(fn, *args, **kwargs)``."""
    from .common import model_spec as _model_spec
    from ..api.files import refuse_bad_outputs

    refuse_bad_outputs(parser, [output], [spec])
    try:
        built = _model_spec.resolve(spec).build()
    except _model_spec.ModelSpecError as e:
        parser.error(f"--model: {e}")
    try:
        snapshot = capture(built.fn, *built.args, **built.kwargs)
    except KeyboardInterrupt:
        print(f"capture: interrupted while {spec} compiled; {output} left as it was (nothing written)",
              file=sys.stderr)
        return 130
    return _write(snapshot, output, (_model_spec.split_spec(spec)[0],), spec)


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

    from ..api.files import refuse_bad_outputs

    inputs = (ns.target,) if is_script else ()
    refuse_bad_outputs(parser, [ns.output], inputs)  # before the script: its guards would be lost

    import torch

    torch.compiler.reset()
    kept = f"{ns.output} left as it was (nothing written)"
    from .common.progress import for_terminal

    progress = for_terminal("capture")
    with recording(progress) as recorder:
        try:
            status = _run_target(ns.target, script_args)
        except KeyboardInterrupt:
            print(f"capture: interrupted while {ns.target} ran; {kept}", file=sys.stderr)
            return 130
        except BaseException as e:  # the script's failure: its guards are not a snapshot of it
            print(f"capture: {ns.target} raised {type(e).__name__}: {_one_line(e)}; {kept}", file=sys.stderr)
            return 1
        finally:
            if progress:
                progress.done()
    if status:
        print(f"capture: {ns.target} exited with status {status}; {kept}", file=sys.stderr)
        return status
    return _write(recorder.snapshot(), ns.output, inputs, ns.target)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _write(snapshot: Snapshot, output: str, inputs: tuple, source: str) -> int:
    """Writes ``snapshot`` atomically (the file is replaced whole or left as it was, also on a
    full disk or Ctrl-C); one line and a non-zero status when it cannot."""
    try:
        snapshot.to_json(output, inputs=inputs)
    except OSError as e:
        print(f"capture: cannot write {output}: {e.strerror or e}; {output} left as it was", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"capture: interrupted while writing {output}; it is the old file or the new one, whole",
              file=sys.stderr)
        return 130
    print(f"captured {snapshot.summary()} from {source} -> {output}")
    return 0
