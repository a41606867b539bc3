"""``suggest --from-run SCRIPT.py``: what the user's own workload changes is never dropped.

``SCRIPT.py`` defines ``run(compiled, model)``: it calls ``compiled`` (the model compiled
with the suggested policy in dry-run mode: every guard kept, docs/verify.md) the way the
user's program does and changes ``model`` between calls as the program does (a decode loop
that lowers ``model.n_active``, an adapter swap). Every recompile the policy would have
served stale is attributed to the dropped guards that failed (``gp.stats(compiled)
.dry_run_events``); ``changed_guards`` returns their ``(name, guard_type)``, which the
second pass of ``suggest`` keeps. The model and its inputs are restored afterwards.

``--from-run REPORT.json`` reads the same from a dry-run report your own program wrote
(``gp.compile(model, policy, dry_run="REPORT.json")``): no second run of anything.
"""

from __future__ import annotations

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


def changed_guards(run: Callable[[Any, Any], Any], built: Any, policy_text: str,
                   backend: str) -> set[tuple[str, str]]:
    """``(name, guard_type)`` of the guards the policy ``policy_text`` drops that failed
    while ``run`` ran (see the module docstring)."""
    import torch

    from ...api.loading import load as load_policy
    from ...runtime.compiled import compile as gp_compile, stats
    from ..mutation.calls import Session
    from ..mutation.record import Call

    session = Session(Call(built.fn, built.args, built.kwargs))
    torch.compiler.reset()
    try:
        compiled = gp_compile(built.fn, load_policy(policy_text), backend=backend, dry_run=True, verify=0)
        try:
            run(compiled, built.fn)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - the user's code: one line
            raise FromRunError(f"run() raised {type(e).__name__}: {e}") from None
        return {(g.name, g.guard_type) for event in stats(compiled).dry_run_events for g in event.guards}
    finally:
        session.restore()
        torch.compiler.reset()
