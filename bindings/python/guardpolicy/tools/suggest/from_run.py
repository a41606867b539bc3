"""``suggest --from-run SCRIPT.py``: what the user's own workload changes is dropped only
where the audit proved it harmless on the values the workload gave it.

``SCRIPT.py`` defines ``run(compiled, model)``: it calls ``compiled`` (the model compiled
in dry-run mode, every guard kept, docs/verify.md, with the suggested policy that also drops
the inputs' harmless guards: ``command.offered``) the way the user's program does and changes ``model`` between calls as the program does (a decode loop
that lowers ``model.n_active``, an adapter swap, a new ``run_id`` per call). Every recompile
the policy would have served stale is attributed to the dropped guards that failed
(``gp.stats(compiled).dry_run_events``); ``observe`` returns their ``(name, guard_type)``
and, per guarded state of the call's own frame, the values each call gave it (read before
each call, as the guard reads them: numbers, strings, None, tuples of them; the first
``MAX_VALUES`` distinct ones). The second pass of ``suggest`` audits those values too and
drops such a guard only when each was harmless, output and written state (a storm fix: a
per-call id read only by a dead branch); every other one it keeps. The model and its inputs
are restored afterwards.

``--from-run REPORT.json`` reads the failed guards from a dry-run report your own program
wrote (``gp.compile(model, policy, dry_run="REPORT.json")``): no second run of anything, and
no values, so each of them is kept.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

from ..common.model_spec import ModelSpecError, import_file


class FromRunError(Exception):
    """The script does not load, has no ``run``, or raised; or the report is no dry-run
    report (one line)."""


def report_guards(path: str) -> set[tuple[str, str]]:
    """``(name, guard_type)`` of every failed guard of a dry-run report's JSON (what
    ``gp.compile(..., dry_run="report.json")`` writes at exit, docs/verify.md)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return {(g["name"], g["guard_type"]) for event in data["events"] for g in event["guards"]}
    except OSError as e:
        raise FromRunError(f"{path}: {e.strerror}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise FromRunError(f"{path}: not a dry-run report ({type(e).__name__}: {e})") from None


def load(path: str) -> Callable[[Any, Any], Any]:
    """``run`` of the file ``path``."""
    try:
        module = import_file(path)
    except ModelSpecError as e:
        raise FromRunError(str(e)) from None
    run = getattr(module, "run", None)
    if not callable(run):
        raise FromRunError(f"{path}: defines no function `run(compiled, model)`")
    return run


#: Distinct values kept per guarded state (each one costs the audit a trial).
MAX_VALUES = 8

#: The guard types whose state's values are read per call.
VALUE_GUARD_TYPES = ("CONSTANT_MATCH", "EQUALS_MATCH")


@dataclasses.dataclass
class RunSeen:
    """What a run showed: ``changed``, ``(name, guard_type)`` of the dropped guards that
    failed; ``values``, per guard name, the distinct values the calls gave that state."""

    changed: set = dataclasses.field(default_factory=set)
    values: dict = dataclasses.field(default_factory=dict)


class _Watched:
    """``compiled``, reading the values of ``groups``' states before each call."""

    def __init__(self, compiled: Any, model: Any, groups: list[Any], seen: RunSeen):
        self._compiled, self._model, self._groups, self._seen = compiled, model, groups, seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._record(args, kwargs)
        return self._compiled(*args, **kwargs)

    def _record(self, args: tuple, kwargs: dict) -> None:
        from ..mutation.plan import is_constant
        from ..mutation.record import RecordedFrame, read

        try:
            frame = RecordedFrame(0, None, _arguments(self._model, args, kwargs), _globals(self._model))
        except (TypeError, ValueError):  # arguments forward does not take: the call itself says so
            return
        for group in self._groups:
            try:
                value = read(group.guards[0].source, frame)
            except Exception:  # noqa: BLE001 - not readable from this call: no value
                continue
            if not is_constant(value):
                continue
            values = self._seen.values.setdefault(group.name, [])
            if len(values) < MAX_VALUES and not any(type(v) is type(value) and v == value for v in values):
                values.append(value)


def _owner(model: Any) -> Any:
    import torch

    return type(model).forward if isinstance(model, torch.nn.Module) else model


def _arguments(model: Any, args: tuple, kwargs: dict) -> dict:
    """The call's locals as its frame starts (Dynamo's ``L``): the bound arguments, defaults
    included, ``self`` first for a module."""
    import torch

    sig = inspect.signature(_owner(model), follow_wrapped=False)
    bound = sig.bind(model, *args, **kwargs) if isinstance(model, torch.nn.Module) else sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _globals(model: Any) -> dict:
    return getattr(_owner(model), "__globals__", {})


def _watched_groups(groups: list[Any]) -> list[Any]:
    """The states of the call's own frame with a value guard: the ones whose values a call
    can be read for."""
    return [g for g in groups if getattr(g, "root", False) and g.name and g.guards[0].has_value
            and any(x.guard_type in VALUE_GUARD_TYPES for x in g.guards)]


def observe(run: Callable[[Any, Any], Any], built: Any, policy_text: str, backend: str,
            groups: list[Any] = ()) -> RunSeen:
    """Runs ``run`` on the model compiled with ``policy_text`` in dry-run mode: the guards the
    policy drops that failed, and the values each call gave the states of ``groups`` (a
    ``MutationAudit``'s groups; see the module docstring)."""
    import torch

    from ...api.loading import load as load_policy
    from ...runtime.compiled import compile as gp_compile, stats
    from ..mutation.calls import Session
    from ..mutation.record import Call

    session = Session(Call(built.fn, built.args, built.kwargs))
    seen = RunSeen()
    torch.compiler.reset()
    try:
        compiled = gp_compile(built.fn, load_policy(policy_text), backend=backend, dry_run=True, verify=0)
        watched = _Watched(compiled, built.fn, _watched_groups(list(groups)), seen)
        try:
            run(watched, built.fn)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - the user's code: one line
            raise FromRunError(f"run() raised {type(e).__name__}: {e}") from None
        seen.changed = {(g.name, g.guard_type) for event in stats(compiled).dry_run_events for g in event.guards}
        seen.values = {name: v for name, v in seen.values.items() if any(name == n for n, _ in seen.changed)}
        return seen
    finally:
        session.restore()
        torch.compiler.reset()


def changed_guards(run: Callable[[Any, Any], Any], built: Any, policy_text: str,
                   backend: str) -> set[tuple[str, str]]:
    """``(name, guard_type)`` of the guards the policy ``policy_text`` drops that failed
    while ``run`` ran (``observe`` without values)."""
    return observe(run, built, policy_text, backend).changed
