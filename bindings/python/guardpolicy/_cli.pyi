"""The C++ ``guardpolicy`` command line as a Python module (tools/cli/python_module.cpp):
``python -m guardpolicy`` runs it in-process. It links the core beside ``_core``, never
through it."""

from collections.abc import Sequence

def run_cli(args: Sequence[bytes], data_dir: bytes) -> int:
    """Runs the C++ ``guardpolicy`` command line with ``args`` (without the program name),
    writing to ``sys.stdout``/``sys.stderr``; returns the exit code (0, 1 or 2)."""
