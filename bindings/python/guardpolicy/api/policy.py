"""The Python face of a compiled policy: a ``guard_filter_fn`` with introspection."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import _core
from . import data as _data
from .entry_code import guard_code


@dataclasses.dataclass(frozen=True)
class RuleRef:
    """Where a decision came from: the policy that wrote the rule and its source position."""

    policy: str
    file: str
    line: int
    column: int
    decision: str  # "keep", "drop" or "watch"

    def __str__(self) -> str:
        return f"{self.policy} at {self.file}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The decision for one guard entry. ``keep``: whether the policy keeps the guard (True for
    ``keep`` and for ``watch``, which a plain ``guard_filter_fn`` honours as a keep);
    ``watched``: the policy decided ``watch``; ``checked``: for a ``watch`` under
    ``guardpolicy.compile`` that torch checks on every call anyway, why (a tensor, an input,
    ambient state; docs/design-notes/watch.md), else "". ``rule`` is None when the policy
    default decided; ``code`` is what the guard checks (the schema field ``code``: torch's
    check code, one line per part, e.g. ``L['self'].n_active == 3``; "" for a guard without
    Python code)."""

    keep: bool
    rule: RuleRef | None
    name: str
    guard_type: str
    code: str = ""
    watched: bool = False
    checked: str = ""

    @property
    def decision(self) -> str:
        """``"keep"``, ``"drop"`` or ``"watch"``."""
        return "watch" if self.watched else "keep" if self.keep else "drop"


@dataclasses.dataclass(frozen=True)
class PolicyOrigin:
    """What a ``Policy`` was loaded from, so that unpickling loads it again (parsed, checked,
    compiled and verified anew, or for an artifact verified anew): the source ``text`` or the
    ``artifact`` bytes (a file's content as it was read at load time), the ``path`` it came
    from (for diagnostics), the ``policy`` name asked for, the bound ``params``, and the
    plugins loaded then (``(path, config)``), which are loaded first where missing. Or a
    registry ``filter`` name with its ``params``."""

    text: str | None = None
    artifact: bytes | None = None
    path: str = "<string>"
    policy: str = ""
    params: tuple[tuple[str, Any], ...] = ()
    plugins: tuple[tuple[str, str], ...] = ()
    filter: str | None = None

    def compile(self) -> _core.CompiledPolicy:
        """Loads the policy again. Raises ``PolicyError`` or ``PluginError`` as ``load`` does."""
        data_dir = str(_data.DATA_DIR)
        loaded = {p["path"] for p in _core.plugins(data_dir)}
        for path, config in self.plugins:
            if path not in loaded:
                _core.load_plugin(os.fsencode(path), config, data_dir)
        params = dict(self.params)
        if self.filter is not None:
            return _core.get_filter(self.filter, params, data_dir)
        if self.text is not None:
            return _core.load(self.text, os.fsencode(self.path), False, self.policy, params, data_dir)
        with tempfile.TemporaryDirectory() as tmp:
            artifact = os.path.join(tmp, os.path.basename(self.path) or "policy.gpolc")
            with open(artifact, "wb") as f:
                f.write(self.artifact or b"")
            return _core.load("", os.fsencode(artifact), True, self.policy, params, data_dir)


def _restore(origin: PolicyOrigin) -> Policy:
    """Unpickling: the policy loaded again from its origin."""
    return Policy(origin.compile(), origin)


class Policy:
    """A compiled, verified guard-filter policy.

    Call it with ``list[GuardFilterEntry]`` (what ``torch.compile`` passes as
    ``guard_filter_fn``): it returns a ``list[bool]`` of the same length, ``True`` = keep
    (a ``watch`` is a keep there), each element exactly ``bool``. It reads only the fields listed in ``fields`` and keeps
    no reference to any entry after the call. Immutable; safe to share between threads.
    Pickles (and deep-copies) as its origin: loaded again, re-checked, on the other side.
    """

    __slots__ = ("_compiled", "_rules", "_origin")

    def __init__(self, compiled: _core.CompiledPolicy, origin: PolicyOrigin | None = None):
        self._compiled = compiled
        self._rules = [RuleRef(**r) for r in compiled.rules]
        self._origin = origin

    def __reduce__(self):
        if self._origin is None:
            raise TypeError(f"policy {self.name!r} was not made by guardpolicy.load or "
                            "guardpolicy.filter: it cannot be pickled")
        return (_restore, (self._origin,))

    def __call__(self, entries: Sequence[Any]) -> list[bool]:
        """``guard_filter_fn``: ``list[GuardFilterEntry] -> list[bool]``, True = keep (keep
        or watch: torch checks a watched guard as a kept one)."""
        return self._compiled(entries)

    def evaluate(self, rows: Sequence[Mapping[str, Any]]) -> list[bool]:
        """Decisions for plain mappings ``{field name: value}`` (absent fields read as
        false, 0 or ""); the same program as ``__call__``, for tests and snapshots: True =
        keep or watch. Unlike ``__call__``, a row that cannot be read raises (TypeError,
        ValueError). ``decide`` tells a watch from a keep."""
        return [decision != "drop" for decision in self.decide(rows)]

    def decide(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """The decision, ``"keep"``, ``"drop"`` or ``"watch"``, for each mapping row (as
        ``evaluate``, which gives them as bools)."""
        return [decision for decision, _ in self._compiled.explain(list(rows), True, True)]

    def explain(self, entries: Sequence[Any]) -> list[Explanation]:
        """Per entry (a ``GuardFilterEntry`` or a mapping row as for ``evaluate``): the
        decision (keep, drop or watch), the rule that made it (or None for the default), the ``name`` and
        ``guard_type`` and ``code`` (read now: call it while ``guard_filter_fn`` runs, as
        ``guardpolicy.compile`` does, for the code of a live entry). Any iterable is
        accepted."""
        entries = list(entries)
        rows = bool(entries) and all(isinstance(e, Mapping) for e in entries)
        out = []
        for entry, (decision, rule) in zip(entries, self._compiled.explain(entries, rows, rows)):
            field = entry.get if rows else (lambda key, default, e=entry: getattr(e, key, default))
            out.append(
                Explanation(
                    keep=decision != "drop",
                    rule=self._rules[rule] if rule >= 0 else None,
                    name=str(field("name", "")),
                    guard_type=str(field("guard_type", "")),
                    code=str(field("code", "")) if rows else guard_code(entry),
                    watched=decision == "watch",
                )
            )
        return out

    @property
    def name(self) -> str:
        return self._compiled.name

    @property
    def doc(self) -> str:
        return self._compiled.doc

    @property
    def is_unsafe(self) -> bool:
        return self._compiled.is_unsafe

    @property
    def fields(self) -> list[str]:
        """Schema fields the policy reads, in slot order."""
        return list(self._compiled.fields)

    @property
    def params(self) -> dict[str, Any]:
        """The values the parameters are bound to (declared defaults, then ``load(**params)``)."""
        return dict(self._compiled.params)

    @property
    def source_file(self) -> str:
        """The file the policy was loaded from (``<string>`` for source text)."""
        return self._compiled.source_file

    @property
    def rules(self) -> list[RuleRef]:
        return list(self._rules)

    @property
    def default_decision(self) -> str:
        """The decision when no rule matches: ``"keep"``, ``"drop"`` or ``"watch"``."""
        return self._compiled.default_decision

    @property
    def config(self) -> dict[str, Any]:
        """``config`` lines: Dynamo config knobs (docs/schema.md) and their values."""
        return dict(self._compiled.config)

    @property
    def stance(self) -> tuple[str, int] | None:
        """``(stance, after_calls)`` from a ``stance`` line, or None."""
        return self._compiled.stance

    @property
    def stance_warmup(self) -> int | None:
        """The calls without a compile after which ``stance skip_guard_eval_unsafe after N
        calls`` applies (N), or None when the policy has no such line."""
        stance = self._compiled.stance
        return stance[1] if stance and stance[0] == "skip_guard_eval_unsafe" else None

    @property
    def origin(self) -> PolicyOrigin | None:
        """What the policy was loaded from (unpickling loads it again from this), or None for
        a policy ``guardpolicy.load`` or ``guardpolicy.filter`` did not make."""
        return self._origin

    @property
    def verify(self) -> tuple[int, str | None] | None:
        """``(every_calls, on_violation)`` from ``verify every N calls`` and ``on_violation
        ACTION`` lines, or None without a ``verify`` line. ``on_violation`` defaults to the
        first of the schema's ``violation_actions`` (``recompile``). ``guardpolicy.compile``
        uses it when its ``verify=``/``on_violation=`` arguments are not given."""
        return self._compiled.verify

    @property
    def on_recompile(self) -> str | None:
        """What a call after the stance's warm-up that no cache entry accepts does
        (``recompile``, ``warn`` or ``raise``; an ``on_recompile`` line, default ``recompile``),
        or None without a ``stance`` line."""
        return self._compiled.on_recompile

    @property
    def dispatch(self) -> str | None:
        """The mode of a ``dispatch`` line (``"direct"``), or None: ``guardpolicy.compile``'s
        default for ``dispatch=``."""
        return self._compiled.dispatch

    @property
    def on_error(self) -> str:
        return self._compiled.on_error

    def save(self, path) -> None:
        """Writes the compiled policy as a ``.gpolc`` artifact (what ``guardpolicy compile``
        writes, through the same code: atomically, never over a FIFO, a device, a read-only
        file or the policy's own source); ``guardpolicy.load(path)`` reads it back, verified.
        Raises ``OSError`` (``PermissionError``, ``FileExistsError``, ...) and leaves
        ``path`` as it was when it may not be written."""
        from .files import write_file

        # The source is named only if it is a file ("<string>" is none: no file is the same).
        write_file(path, self._compiled.serialize(), inputs=[self.source_file] if self.source_file else [])

    def disassemble(self) -> str:
        """The bytecode listing (same as ``guardpolicy disasm``)."""
        return self._compiled.disassemble()

    def observed(self, observer: Callable[[list[Any], list[bool]], None],
                 extra_config: Mapping[str, Any] | None = None) -> ObservedPolicy:
        """This policy, with ``observer(entries, decisions)`` called after each
        ``guard_filter_fn`` call (the tools record what it decided this way) and
        ``extra_config`` added to its ``config`` lines. Pickles as this policy."""
        return ObservedPolicy(self, observer, extra_config)

    def __repr__(self) -> str:
        return f"<guardpolicy.Policy {self.name!r}: {len(self._rules)} rules, default {self.default_decision}>"


class ObservedPolicy(Policy):
    """``Policy.observed``: decides as ``inner``, then calls ``observer(entries, decisions)``
    (``entries`` as a list, ``decisions`` the ``list[bool]`` returned)."""

    __slots__ = ("inner", "observer", "_extra_config")

    def __init__(self, inner: Policy, observer: Callable[[list[Any], list[bool]], None],
                 extra_config: Mapping[str, Any] | None = None):
        super().__init__(inner._compiled, inner._origin)
        self.inner = inner
        self.observer = observer
        self._extra_config = dict(extra_config or {})

    def __call__(self, entries: Sequence[Any]) -> list[bool]:
        entries = list(entries)
        decisions = self.inner(entries)
        self.observer(entries, decisions)
        return decisions

    @property
    def config(self) -> dict[str, Any]:
        return {**self.inner.config, **self._extra_config}
