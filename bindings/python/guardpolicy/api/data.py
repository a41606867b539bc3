"""Where the installed data lives, the names of the standard policies, and the schema's
runtime lists (a leaf module: it imports only ``_core``)."""

from pathlib import Path

from .. import _core

#: Directory holding ``schema/guard_entry.yaml``, ``std/*.gpol`` and ``examples/*.gpol``.
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

#: The example policies (``policies/examples`` of the checkout), installed with the package so
#: that the tools find them from any directory.
EXAMPLES_DIR = DATA_DIR / "examples"


def example_policy(name: str) -> Path:
    """The installed example policy ``name`` (``"serving"`` -> ``.../data/examples/serving.gpol``)."""
    return EXAMPLES_DIR / f"{name}.gpol"

#: The six torch built-in filters, as policies (``torch.compiler.<name>_unsafe``).
STD_POLICIES = (
    "skip_guard_on_inbuilt_nn_modules",
    "skip_guard_on_all_nn_modules",
    "keep_tensor_guards",
    "skip_guard_on_globals",
    "keep_portable_guards",
    "skip_all_guards",
)

#: guardpolicy's own standard policies, which drop nothing: ``watch_state``, the safe setting
#: in one line (``guardpolicy.compile(model, "watch_state")``, docs/design-notes/watch.md).
SAFE_POLICIES = ("watch_state",)


def schema_list(name: str) -> tuple[str, ...]:
    """The schema's list ``name``, in schema order: ``"violation_actions"`` (``on_violation``
    and ``on_recompile``), ``"dispatch_modes"`` or ``"stances"``. Raises KeyError for another
    name."""
    return tuple(_core.schema_lists(str(DATA_DIR))[name])
