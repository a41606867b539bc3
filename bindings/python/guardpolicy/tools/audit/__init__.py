"""``python -m guardpolicy audit``: what each policy lets go stale.

For every policy and every *state change* in ``CHANGES`` the audit

1. builds a fresh audit model (``build_audit_model``), calls ``torch.compiler.reset()`` and
   compiles it with ``backend="eager"`` and the policy as ``guard_filter_fn``, wrapped in a
   recorder that counts the filter's calls (torch makes one per compiled frame) and keeps
   the name and guard type of every guard the policy dropped;
2. calls the compiled model once on the example input under ``torch.no_grad()`` (and
   checks it matches eager);
3. applies ONE change (a module attribute, a global, a closure cell, the input, grad mode,
   ...), computes eager's output on the changed state, calls the compiled model again, and
   undoes the change.

The second call is classified as

* ``recompiled``: the filter was called again, i.e. a kept guard failed and Dynamo
  compiled a new frame (a guard caught the change);
* ``unaffected``: no recompile, and the output still equals eager's (same shape, dtype,
  ``requires_grad`` and values): the change does not need a guard, the compiled code reads
  the new state at run time (parameters, buffers and inputs are graph inputs);
* ``stale``: no recompile, and the output differs from eager's: the silent wrong result.
  The cell names the dropped guards that let it through: the dropped guards whose name (or,
  for ambient guards, guard type) relates to the changed state, else every dropped guard
  type with its count;
* ``error``: no recompile, and the stale compiled code raised on the changed input;
* ``n/a``: eager itself cannot run the change on this model.

Every ``stale`` or ``error`` cell is checked against a control: the same change with no
``guard_filter_fn`` at all (run once per model and change). When the control is just as
stale (marked ``†``), torch itself does not guard the change and no policy could have kept
a guard for it (in torch 2.13: hooks added after compiling, ``skip_nnmodule_hook_guards``).
A stale cell under a policy that dropped nothing (``keep_all``) whose control is right is a
bug in guardpolicy: it is printed, and the command exits 1.

The audit models wrap a core (``guardpolicy.tools.common.models``' MLP, or a tiny transformers GPT-2
with its dropout probabilities at 0 so that ``train()`` stays deterministic) in
``AuditModel``, whose forward reads every piece of state a change touches, so that each
change shows in the output when nothing guards it.

With ``--verify N`` every stale or error cell is run once more under
``guardpolicy.compile(..., verify=N, on_violation="recompile")``: the cell says whether
verify caught the change, after how many calls (at most N: sampling is by call count), and
whether that call returned eager's output (docs/verify.md).

The package, one concept a module: ``model`` (the audit models, ``build_audit_model``),
``changes`` (``Trial``, ``Change``, the ``CHANGES`` table), ``trial`` (one cell:
``run_trial``, ``verify_trial``), ``results`` (``Cell``, ``PolicyAudit``, the tables, the
soundness findings), ``run`` (every change under every policy: ``audit_policy``,
``run_audit``, ``resolve_policy``) and ``command`` (``main``, the command line, which
without ``--changes`` runs the guard-driven mutation audit, ``guardpolicy.tools.mutation``).
"""

from ..common.compare import compare
from .changes import CHANGE_KEYS, CHANGES, Change, Trial
from .command import main
from .model import MODEL_NAMES, build_audit_model
from .results import (LEGEND, OUTCOMES, VERIFY_LEGEND, Cell, PolicyAudit, format_matrix, format_policy_table,
                      soundness_findings, torch_own)
from .run import DEFAULT_POLICIES, audit_policy, resolve_policy, run_audit
from .trial import related_guards, run_trial, verify_trial

__all__ = [
    "CHANGES", "CHANGE_KEYS", "Cell", "Change", "DEFAULT_POLICIES", "LEGEND", "MODEL_NAMES",
    "OUTCOMES", "PolicyAudit", "Trial", "VERIFY_LEGEND", "audit_policy", "build_audit_model", "compare",
    "format_matrix", "format_policy_table", "main", "related_guards", "resolve_policy", "run_audit", "run_trial",
    "soundness_findings", "torch_own", "verify_trial",
]
