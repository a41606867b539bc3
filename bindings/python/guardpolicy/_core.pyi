"""Type stubs for ``guardpolicy._core``, the pybind11 extension built from bindings/_core.cpp.

Internal: the public API is ``guardpolicy`` (``load``, ``lint``, ``Policy``, ...), which
wraps these. tests/python/test_stubs.py checks that every public name of the compiled module
has a stub here and the other way round, with the same parameters.
"""

from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

_Literal = bool | int | str

#: The project version (CMakeLists.txt's project(); also `guardpolicy --version`).
__version__: str

class _DiagnosticRow(TypedDict):
    """One diagnostic, as ``guardpolicy.errors.Diagnostic(**row)`` takes it."""

    severity: str  # "error", "warning" or "note"
    code: str  # "GP" + 4 digits
    message: str
    file: str | None
    line: int  # 1-based
    column: int  # 1-based, in bytes
    end_line: int
    end_column: int  # exclusive
    help: str
    rendered: str  # file:line:col: severity[CODE]: message, the source line and a caret

class _RuleRow(TypedDict):
    """One rule of the compiled program, as ``guardpolicy.RuleRef(**row)`` takes it."""

    policy: str
    file: str
    line: int
    column: int
    decision: str  # "keep", "drop" or "watch"

class _PluginFieldRow(TypedDict):
    name: str  # "plugin.field"
    type: str
    doc: str

class _PluginFunctionRow(TypedDict):
    name: str  # "plugin.function"
    args: list[str]  # argument types
    result: str
    doc: str

class _PluginFilterRow(TypedDict):
    name: str  # "plugin.filter"
    doc: str
    params: list[tuple[str, str, _Literal | None, bool]]  # (name, type, default, has_default)

class _PluginInfoRow(TypedDict):
    """One loaded plugin and its declarations."""

    name: str
    version: str
    description: str
    path: str
    api_version: str  # "MAJOR.MINOR"
    fields: list[_PluginFieldRow]
    functions: list[_PluginFunctionRow]
    filters: list[_PluginFilterRow]

class CompiledPolicy:
    """A compiled, verified policy bound to its schema. Made only by ``load`` (no
    constructor); immutable and safe to share between threads."""

    def __call__(self, entries: Iterable[Any]) -> list[bool]:
        """guard_filter_fn: one exact ``bool`` per entry (True = keep or watch), same length. An entry
        that cannot be read gets the policy's ``on_error`` decision (``raise`` re-raises) and
        one ``PolicyRuntimeWarning`` per call."""
    def explain(
        self, entries: Iterable[Any], from_mappings: bool = False, strict: bool = False
    ) -> list[tuple[str, int]]:
        """``(decision, rule index or -1 for the default)`` per entry, the decision
        ``"keep"``, ``"drop"`` or ``"watch"``. ``from_mappings``: the
        entries are ``{field: value}`` mappings; ``strict``: an unreadable entry raises
        (TypeError, ValueError) instead of taking the ``on_error`` decision."""
    @property
    def name(self) -> str: ...
    @property
    def doc(self) -> str: ...
    @property
    def is_unsafe(self) -> bool: ...
    @property
    def fields(self) -> list[str]:
        """Schema fields the program reads, in slot order."""
    @property
    def rules(self) -> list[_RuleRow]:
        """The program's rules after ``use`` expansion; ``explain`` indexes this list."""
    @property
    def default_decision(self) -> str:
        """``"keep"``, ``"drop"`` or ``"watch"``."""
    @property
    def on_error(self) -> str:
        """``"keep"``, ``"drop"`` or ``"raise"``."""
    @property
    def config(self) -> dict[str, _Literal]:
        """The policy's ``config KNOB = VALUE`` lines."""
    @property
    def params(self) -> dict[str, _Literal]:
        """The values the parameters are bound to."""
    @property
    def source_file(self) -> str:
        """The file the policy was loaded from (``<string>`` for text)."""
    @property
    def runtime_settings(self) -> dict[str, Any]:
        """Every runtime line by name (``config``, ``stance``, ``verify``, ``on_violation``,
        ``on_recompile``, ``dispatch``, ``on_error``) as written, None where absent."""
    @property
    def stance(self) -> tuple[str, int] | None:
        """``(stance, after_calls)`` from a ``stance`` line, or None."""
    @property
    def verify(self) -> tuple[int, str | None] | None:
        """``(every_calls, on_violation)`` from a ``verify`` line, or None."""
    @property
    def on_recompile(self) -> str | None:
        """The ``on_recompile`` action (default ``recompile``) with a ``stance`` line, else None."""
    @property
    def dispatch(self) -> str | None:
        """The mode of a ``dispatch`` line, or None."""
    def disassemble(self) -> str:
        """The bytecode listing (``guardpolicy disasm``)."""
    def serialize(self) -> bytes:
        """The ``.gpolc`` artifact bytes (``guardpolicy compile``)."""

def load_plugin(path: bytes, config: str, data_dir: str) -> _PluginInfoRow:
    """Loads a plugin shared library; every later load under ``data_dir`` sees its
    declarations. Raises ``guardpolicy.errors.PluginError``."""

def plugins(data_dir: str) -> list[_PluginInfoRow]:
    """The loaded plugins (the built-ins first)."""

class _FilterRow(TypedDict):
    """One registry entry, as ``guardpolicy.FilterInfo`` takes it."""

    name: str
    kind: str  # "builtin", "std", "plugin" or "policy"
    doc: str
    params: list[tuple[str, str, _Literal | None, bool]]  # name, type, default, has_default
    origin: str  # the plugin file ("builtin") or the policy file

def filters(data_dir: str) -> list[_FilterRow]:
    """The registry: every filter by name (core/include/guardpolicy/registry.h)."""

def get_filter(name: str, params: dict[str, _Literal], data_dir: str) -> CompiledPolicy:
    """The filter ``name`` with ``params`` bound. Raises ``guardpolicy.errors.PolicyError``."""

def load(
    text: str, path: bytes, from_file: bool, policy: str, params: dict[str, _Literal], data_dir: str
) -> CompiledPolicy:
    """Parses, checks, compiles and verifies a policy: the file ``path`` when ``from_file``
    (a ``.gpol`` or a ``.gpolc``), else ``text`` (``path`` names it in diagnostics).
    ``policy``: the policy to load, "" when the file has one; ``params``: parameter values.
    ``data_dir`` holds ``schema/guard_entry.yaml`` and ``std/``.

    Raises ``guardpolicy.errors.PolicyError`` with every diagnostic; ``TypeError`` or
    ``ValueError`` for a parameter value that is not bool, int or str, or out of range."""

def lint(text: str, path: bytes, from_file: bool, data_dir: str) -> list[_DiagnosticRow]:
    """Every diagnostic for a policy file (``from_file``) or text; never raises on author
    mistakes (a missing file is a GP0001 row)."""

def write_file(path: bytes, data: bytes, inputs: Sequence[bytes]) -> None:
    """Replaces the file ``path`` by ``data`` atomically (a temporary file beside it, then a
    rename), as ``guardpolicy compile`` and ``fmt`` write (core/include/guardpolicy/file_io.h).
    Raises ``OSError(errno, reason, path)`` and leaves ``path`` untouched when it is not a
    regular file, is read-only or is one of ``inputs``, or when writing fails."""

def check_output_path(path: bytes, inputs: Sequence[bytes]) -> None:
    """Raises the ``OSError`` that ``write_file(path, ..., inputs)`` would raise for the
    target itself, writing nothing (for jobs that should refuse before they start)."""

def read_snapshot_file(path: bytes) -> bytes:
    """The JSON bytes of a guard snapshot file, inflated when it is gzip data. Raises
    ``OSError`` for a missing or non-regular file, corrupt gzip data, or more than 128 MiB
    stored or inflated (``EFBIG``)."""

def looks_like_artifact(data: bytes, path: str) -> bool:
    """Whether ``data`` (a file's bytes) is a ``.gpolc`` artifact, cut or whole, rather than
    policy source: the test the loader makes (``artifact.h``)."""

def schema_lists(data_dir: str) -> dict[str, list[str]]:
    """The schema's runtime lists (``stances``, ``violation_actions``, ``dispatch_modes``),
    in schema order."""

def schema_fields() -> list[str]:
    """The schema's fields in schema order, as the binding reads them (its field table is
    generated from ``policies/schema/guard_entry.yaml`` at build time)."""

def source_paths(source: object) -> tuple[str, str]:
    """``(path, module_path)`` of a guard's ``orig_guard.originating_source``, as the binding
    reads the fields ``path`` and ``module_path`` (docs/schema.md, "Real names")."""

def entry_rows(entries: Iterable[object], data_dir: str) -> list[dict[str, bool | int | str | list[str]]]:
    """One row per ``GuardFilterEntry`` of ``entries``: ``{schema field: value}`` in schema
    order, each field read by the VM's entry extractor exactly as a policy reads it
    (``bool``, ``int``, ``str``; enum members by name; ``derived_guard_types`` as the list of
    names the entry gives). The schema is ``data_dir/schema/guard_entry.yaml``. Raises the
    Python error of a field that cannot be read (``TypeError`` for a wrong attribute type)."""

def keywords() -> list[str]:
    """The language's keywords, from the lexer ANTLR generates from ``grammar/GuardPolicy.g4``."""

class CallLayer:
    """verify's per-call counting and sampling in C (bindings/runtime/call_layer.h); subclassed
    by ``guardpolicy.calls.CallPath``, which provides ``_sampled(call, *args, **kwargs)`` and
    ``_settle()``. A call counts ``stats._calls``, calls ``_sampled`` on every
    ``stats.verify_every``-th call, then ``inner``, then ``_settle`` while ``pending`` holds
    frames. Raises TypeError when ``pending`` is not a list."""

    inner: Any
    @property
    def stats(self) -> Any: ...
    def __init__(self, inner: Any, stats: Any, pending: list[Any]) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


WATCH_ABSENT: object
"""The value of a ``WatchState`` keyed row whose key must stay missing (a builtin that a new
global of the same name would shadow)."""


class WatchState:
    """What one set of roots of a cache entry's watched guards reads (made by
    ``guardpolicy.runtime.watch`` from ``Reads.state_rows()``), keyword arguments only: the rows
    ``roots``, ``dicts``, ``objects``, ``functions``, ``keyed``, ``orders``, ``lists``, ``held``
    and ``tensors``, whose meaning bindings/runtime/watch/watch_state.h gives, ``tensor_check``
    (torch's check of the tensors' metadata, or None) and ``info``. Armed on the dicts' state at
    construction, with no verdict. Raises TypeError for a missing or extra keyword, a malformed
    row or a watched object that is neither a dict nor a class. ``stale()``: whether it must be
    built anew. It keeps no root alive: a root's own ``__dict__`` is held by identity, and a bound
    method in a ``held`` row by its function and a weak reference to its ``__self__``."""

    def __init__(self, *, roots: tuple[tuple[Any, ...], ...], dicts: tuple[Any, ...],
                 objects: tuple[tuple[Any, ...], ...], functions: tuple[tuple[Any, ...], ...],
                 keyed: tuple[tuple[Any, ...], ...], orders: tuple[tuple[Any, ...], ...],
                 lists: tuple[tuple[Any, ...], ...], held: tuple[tuple[Any, ...], ...], tensors: tuple[Any, ...],
                 tensor_check: Any, info: Any) -> None: ...
    def stale(self) -> bool: ...
    @property
    def verdict(self) -> bool | None: ...
    @property
    def watched(self) -> int: ...
    @property
    def info(self) -> Any: ...


def watch_version(obj: Any) -> int | None:
    """The version of a dict, or of a class's own dict (``ma_version_tag``, the watcher bits
    masked), which every change of it moves; 0 for a static or immutable class, which cannot
    change; None where this Python keeps none (3.14+). TypeError for anything else."""

def watch_versions(objs: tuple) -> tuple[int, ...] | None:
    """``watch_version`` of each of a tuple of dicts and classes, in one call (the watch's
    signature key, read on every recheck); None where this Python keeps none. TypeError for
    anything else in it."""

#: The states a WatchGate keeps by default (bindings/runtime/watch/watch_gate.h).
WATCH_STATES_PER_ENTRY: int

class WatchGate:
    """A cache entry's watched guards, checked in C only when what they read changed
    (bindings/runtime/watch/watch_gate.h; made by ``guardpolicy.runtime.watch``). Called by
    torch with the frame locals (an epilogue guard of the entry's kept manager): the verdict of
    the state of the call's roots while it is armed and nothing it holds changed (and its tensor
    check); else ``recheck(f_locals, state or None) -> (verdict, new state, None or False)``
    (False drops the given state), counted in ``rechecks``. Keeps at most ``capacity`` states
    (``WATCH_STATES_PER_ENTRY`` by default; ValueError below 1)."""

    def __init__(self, recheck: Any, capacity: int = ...) -> None: ...
    def __call__(self, f_locals: dict[str, Any]) -> bool: ...
    @property
    def rechecks(self) -> int: ...
    @property
    def calls(self) -> int:
        """Every call the gate checked (the recheck tells rechecks in a row by it)."""
    @property
    def states(self) -> tuple[WatchState, ...]: ...
    def install(self, state: WatchState) -> None: ...
    def prune(self, *_: Any) -> None: ...
    def release(self) -> None:
        """Drops its states, its recheck and its hot check, for good: its plan or cache entry is
        gone (``guardpolicy.runtime.watch.release``); every later call fails."""
