"""Where the installed data lives, and the names of the standard policies (a leaf module)."""

from pathlib import Path

#: Directory holding ``schema/guard_entry.yaml`` and ``std/*.gpol``.
DATA_DIR = Path(__file__).resolve().parent / "data"

#: The six torch built-in filters, as policies (``torch.compiler.<name>_unsafe``).
STD_POLICIES = (
    "skip_guard_on_inbuilt_nn_modules",
    "skip_guard_on_all_nn_modules",
    "keep_tensor_guards",
    "skip_guard_on_globals",
    "keep_portable_guards",
    "skip_all_guards",
)
