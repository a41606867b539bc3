"""The one description of the machine a timing ran on, for every tool's and bench script's
header, stamp and JSON."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name: ``/proc/cpuinfo``'s ``model name`` where there is one, else
    ``platform.processor()``, else ``"unknown CPU"``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_description() -> str:
    """``"CPU model (arch), N CPUs, OS release, Python X.Y.Z, torch V"``: the machine, its
    system and the versions a timing depends on (torch imported lazily; ``torch not
    installed`` without it). Run settings (torch threads, calls) are the caller's to add."""
    try:
        import torch

        torch_version = f"torch {torch.__version__}"
    except ImportError:
        torch_version = "torch not installed"
    return (f"{cpu_model()} ({platform.machine()}), {os.cpu_count()} CPUs, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, {torch_version}")


def give_back_freed_memory() -> None:
    """Collects garbage and hands the C heap's free pages back to the system (glibc's
    ``malloc_trim(0)``; nothing elsewhere), so that a tool's next phase grows from what is in
    use, not from the last phase's peak."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def peak_rss_mib() -> float:
    """This process's peak resident set so far, in MiB (``getrusage``'s ``ru_maxrss``: KiB on
    Linux, bytes on macOS); 0.0 where ``resource`` does not exist (Windows)."""
    try:
        import resource
    except ImportError:
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if platform.system() == "Darwin" else peak / 1024
