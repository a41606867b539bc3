"""Waiting for the real ``torch.distributed`` processes a rank test started (test_ranks.py,
test_uneven_ranks.py): a hang fails the test, and no process outlives it."""

from __future__ import annotations

import subprocess

import pytest


def finish(procs: list[subprocess.Popen], hard_timeout_s: float) -> list[str]:
    """Each process's output, in rank order; ``pytest.fail`` when one has not ended within
    ``hard_timeout_s`` seconds (a hang). Every process still running is killed."""
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=hard_timeout_s)[0])
    except subprocess.TimeoutExpired:
        pytest.fail(f"{len(procs)} ranks did not finish within {hard_timeout_s} s (a hang)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return logs
