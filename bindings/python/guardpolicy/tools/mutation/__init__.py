"""The guard-driven mutation audit (``gp.audit``): ``plan`` finds the mutations each dropped
guard stands for, ``state`` snapshots and restores the model around a trial, ``calls`` runs
the compiled and the eager call, ``values`` makes the changed values, ``record`` records
what the filter decided, ``results`` holds the verdicts, and ``run`` runs it all (``audit``)."""

from .run import LEGEND, AuditStateError, NotRepeatableError, audit  # noqa: F401
