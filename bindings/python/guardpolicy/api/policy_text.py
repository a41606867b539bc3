"""Policy source built from a small structure: the one place that writes ``.gpol`` text
(the suggested policies, the bench and audit policies, a verify or dispatch line added to a
suggestion). ``PolicyText(...).render()`` is the text ``guardpolicy.load`` reads."""

from __future__ import annotations

import dataclasses


def gpol_string(text: str) -> str:
    """``text`` as a ``.gpol`` string literal (quotes, backslashes and control characters escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace(
        "\t", "\\t").replace("\r", "\\r") + '"'


@dataclasses.dataclass(frozen=True)
class PolicyText:
    """One policy and its test block, as lines without their indentation.

    ``body``: rules and ``use`` lines, in order; ``settings``: runtime lines (``config``,
    ``stance``, ``verify``, ``dispatch``, ...), written after the body and before
    ``default``; ``default``: ``""`` writes no ``default`` line (an ``extends`` policy then
    has its base's); ``extends``: the policy it extends, or None; ``header``: comment lines
    above the policy (``""`` is a bare ``#``); ``tests``: the ``test NAME { ... }`` block's
    lines, or None for no block."""

    name: str
    body: tuple[str, ...] = ()
    default: str = "keep"
    unsafe: bool = False
    doc: str | None = None
    settings: tuple[str, ...] = ()
    header: tuple[str, ...] = ()
    tests: tuple[str, ...] | None = None
    extends: str | None = None

    def with_settings(self, *lines: str, name: str | None = None) -> PolicyText:
        """This policy with ``lines`` added to its runtime lines (and renamed to ``name``)."""
        return dataclasses.replace(self, settings=self.settings + lines, name=name or self.name)

    def render(self) -> str:
        out = ["guardpolicy 1", ""]
        out += [f"# {h}" if h else "#" for h in self.header]
        base = f" extends {self.extends}" if self.extends else ""
        out.append(f"{'unsafe ' if self.unsafe else ''}policy {self.name}{base} {{")
        if self.doc is not None:
            out.append(f"  doc {gpol_string(self.doc)}")
        default = (f"default {self.default}",) if self.default else ()
        out += [f"  {line}" for line in (*self.body, *self.settings, *default)]
        out.append("}")
        if self.tests is not None:
            out += ["", f"test {self.name} {{", *(f"  {line}" for line in self.tests), "}"]
        return "\n".join(out) + "\n"
