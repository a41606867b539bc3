"""The optional dependencies of the tools, and the one error that names the extra to install.

``pip install guardpolicy`` brings the policy engine alone; the Python tools (capture, audit,
suggest, bench, demo) need torch, and their models and charts need ``transformers`` and
``matplotlib``: the ``tools`` extra (``pip install 'guardpolicy[tools]'``, pyproject.toml).
"""

from __future__ import annotations

import importlib
from typing import Any

#: The extra that brings each optional top-level module.
EXTRA_OF = {"torch": "tools", "transformers": "tools", "matplotlib": "tools", "tqdm": "tools", "diffusers": "test",
            "peft": "test"}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency is not installed; the message says which extra brings it."""


def require(module: str, purpose: str) -> Any:
    """``importlib.import_module(module)``, or ``MissingExtraError`` ("the demo models need
    transformers: pip install 'guardpolicy[tools]'") when its top-level package is missing.
    A module missing *inside* an installed package is torch's or the package's own error."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name != top:
            raise
        extra = EXTRA_OF.get(top, "tools")
        raise MissingExtraError(f"{purpose} need{'s' if not purpose.endswith('s') else ''} {top}: "
                                f"pip install 'guardpolicy[{extra}]'", name=top) from None
