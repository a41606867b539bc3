#!/usr/bin/env python3
"""Writes docs/schema.md from policies/schema/guard_entry.yaml (the fields a rule can read)
and, for the "Real names" section, the committed snapshots of docs/snapshots/ (captured from
real compiles by docs/tools/capture_snapshots.py).

Usage: gen_schema.py [--check]   (--check: exit 1 if the committed file differs)
Needs PyYAML (in .venv: transformers depends on it).
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_file import write_or_check  # noqa: E402

import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "policies/schema/guard_entry.yaml"
OUT = ROOT / "docs/schema.md"
SNAPSHOTS = ROOT / "docs/snapshots"

#: (snapshot, guard name, guard type): the guards the "Real names" table shows. Their
#: `path` and `module_path` come from the snapshot, as torch 2.13 offered them.
EXAMPLES = [
    ("nested", "self._modules['fc']._parameters['weight']", "TENSOR_MATCH"),
    ("nested", "self._modules['layers']._modules['1']._parameters['bias']", "TENSOR_MATCH"),
    ("nested", "self._modules['a']._modules['b']._buffers['c']", "TENSOR_MATCH"),
    ("nested", "self._modules['norm'].eps", "CONSTANT_MATCH"),
    ("nested", "self._modules['layers']._modules", "DICT_KEYS_MATCH"),
    ("nested", "self._modules['a']._modules['b']", "TYPE_MATCH"),
    ("nested", "self.scale", "CONSTANT_MATCH"),
    ("nested", "self", "TYPE_MATCH"),
    ("nested", "x", "TENSOR_MATCH"),
    ("nested", "G['GLOBAL_INT']", "CONSTANT_MATCH"),
    ("serving", "G['FLAGS'].fast", "CONSTANT_MATCH"),
    ("serving", "G['torch'].relu", "BUILTIN_MATCH"),
    ("gpt2", "args[0]", "TENSOR_MATCH"),
    ("gpt2", "func.__closure__[3].cell_contents", "CONSTANT_MATCH"),
    ("gpt2", "self._modules['transformer']._modules['h']._modules['0']._modules['mlp']._modules['dropout'].p",
     "CONSTANT_MATCH"),
    ("gpt2", "self.config.return_dict", "CONSTANT_MATCH"),
    ("gpt2", "dict(type(self._modules['transformer']).__dict__)['forward'].__closure__[0].cell_contents",
     "CLOSURE_MATCH"),
    ("nested", "", "GLOBAL_STATE"),
]


def _snapshot_rows(name: str) -> list[dict]:
    data = json.loads(gzip.decompress((SNAPSHOTS / f"{name}.json.gz").read_bytes()))
    return [row for frame in data["frames"] for row in frame["entries"]]


def real_names() -> list[str]:
    """The "Real names" section: how `path` and `module_path` spell real guards."""
    lines = [
        "## Real names: `path` and `module_path`",
        "",
        "`name` is Dynamo's source spelling: torch 2.13 reaches a submodule through",
        "`_modules['...']` and a parameter through `_parameters['...']`, so a rule written",
        "against `self.fc.weight` never matches. `path` spells the same value as",
        "`named_modules()`, `named_parameters()` and `named_buffers()` do under the module being",
        "compiled (`self`); `module_path` is the nearest module on the way (the value itself",
        "when it is a module). Other roots get a prefix that a module name cannot have:",
        "",
        "| root | `path` |",
        "|---|---|",
        "| the compiled frame's `self`, when it is an `nn.Module` | no prefix: `fc.weight`; `\"\"` is `self` itself |",
        "| another local (an argument) of the compiled frame | `input:x`, `input:args[0]` |",
        "| a free or cell variable of the compiled frame | `closure:NAME` |",
        "| a global of the compiled frame's module | `global:NAME` (torch's own `__import_*` and `__builtins_dict___0` globals included) |",
        "",
        "Then, per step: `.NAME` for an attribute and for an item of a module's `_modules`,",
        "`_parameters` or `_buffers`; `[KEY]` (Python's repr of the key) for a dict or sequence",
        "item; `.__closure__`, `.__code__`, `.__defaults__[I]` and `.__kwdefaults__['K']` as",
        "torch names them. A value reached through a step without such a name (`type(...)`,",
        "`__dict__`, `__mro__`, dict keys, tensor sizes) has `path` `\"\"`, and so do the ambient",
        "guards (GLOBAL_STATE, SHAPE_ENV, ...); `module_path` is then still the last module on the",
        "way, or `\"\"`. After a graph break inside a submodule's `forward`, the resumed frame's",
        "`self` is that submodule, and paths in that frame are relative to it. Snapshots captured",
        "before these fields existed have no `path`/`module_path`: they read as `\"\"`.",
        "",
        "Real guards (captured from torch 2.13 by `docs/tools/capture_snapshots.py`; the models",
        "are the demo models and those of `docs/tools/doc_models.py`):",
        "",
        "| model | `name` | `guard_type` | `path` | `module_path` |",
        "|---|---|---|---|---|",
    ]
    for snap, name, guard_type in EXAMPLES:
        rows = [r for r in _snapshot_rows(snap) if r["name"] == name and r["guard_type"] == guard_type]
        if not rows:
            raise SystemExit(f"gen_schema.py: no {guard_type} guard named {name!r} in docs/snapshots/{snap}.json.gz")
        row = rows[0]

        def code(text: str) -> str:
            return f"`{text}`" if text else "`\"\"`"

        lines.append(f"| {snap} | {code(name)} | {guard_type} | {code(row['path'])} | {code(row['module_path'])} |")
    lines += [
        "",
        "In a rule: `drop when module_path startswith \"blocks.\" and guard_type == CONSTANT_MATCH`,",
        "`keep when path == \"head.weight\"`, `drop when path startswith \"global:CONFIG\"`.",
        "",
    ]
    return lines


def between_releases(data: dict) -> list[str]:
    """The "Between releases" section: the schema's `since` members and what else differs."""
    since = data["enums"]["GuardType"].get("since", {})
    releases = ("2.11", "2.12", "2.13", "2.14", "2.15")
    lines = [
        "## Between releases",
        "",
        "guardpolicy supports torch 2.11 to 2.15 (docs/support.md says what works where). A",
        "policy means the same on each; what torch gives it differs:",
        "",
        "| what | " + " | ".join(f"torch {r}" for r in releases) + " |",
        "|---|" + "---|" * len(releases),
    ]
    for member, release in since.items():
        cells = ["✓" if tuple(map(int, r.split("."))) >= tuple(map(int, release.split("."))) else "—"
                 for r in releases]
        lines.append(f"| GuardType `{member}` produced | " + " | ".join(cells) + " |")
    lines += [
        "| `code` read from | `orig_guard.code_list` while the filter runs | the same | the same | the same (reset after it returns) | `entry.code_parts` |",
        "| value guards on floats (EQUALS_MATCH, CONSTANT_MATCH, ...) | `==` | `==` | `==`: `0.0` and `-0.0` equal, NaN never equal | `==` | bit for bit: `-0.0` recompiles, NaN equals NaN |",
        "| `skip_guard_eval_unsafe` stance flag | one global | one global | one global | one global | per thread, copied from the global stance on each compiled call |",
        "| a kept `TENSOR_MATCH` on a module's parameter | not evaluated while the module's `_parameters` dict is unchanged (`skip_tensor_guards_with_matching_dict_tags`): `requires_grad_()` or `.data =` another dtype is not seen | evaluated | evaluated | evaluated | evaluated |",
        "| a function with no source file (`exec`) | compiled through a wrapper frame shared by all such functions: the filter sees `fn` (`CLOSURE_MATCH`), and dropping it reuses one function's graph for another | the same | its own frame | its own frame | its own frame |",
        "",
        "A member a release does not produce lints with note GP2020 and is never true there.",
        "`guardpolicy.runtime.torch_internals.value_guards_compare_bits()` says which float semantics the",
        "running torch has; the mutation audit tries `-0.0` and NaN only where they recompile.",
        "",
    ]
    return lines


def render() -> str:
    data = yaml.safe_load(SCHEMA.read_text())
    lines = [
        "# Schema: what a rule can read",
        "",
        "Generated by `docs/tools/gen_schema.py` from `policies/schema/guard_entry.yaml`; a test",
        "checks that it is current. Every field is read from one",
        "`torch._dynamo.types.GuardFilterEntry` (torch 2.8+, checked on 2.11.0, 2.12.1, 2.13.0, 2.14.1 and 2.15.0) by the Python",
        "binding, only when a policy's bytecode loads it.",
        "",
        "## Fields",
        "",
        "| field | type | meaning | read from | since |",
        "|---|---|---|---|---|",
    ]
    for name, f in data["fields"].items():
        doc = " ".join(str(f["doc"]).split())
        lines.append(f"| `{name}` | {f['type']} | {doc} | `{f['from']}` | {f.get('since', '')} |")
    lines += [""] + real_names()
    lines += ["## Enums", ""]
    for name, e in data["enums"].items():
        kind = "open: other names are allowed, with warning GP2012; one within edit distance 2 of a member is error GP2002" if e.get("open") else "closed"
        lines += [f"### {name} ({kind})", "", " ".join(str(e.get("doc", "")).split()), "",
                  ", ".join(f"`{m}`" for m in e["members"]), ""]
    lines += between_releases(data)
    lines += ["## Config knobs (`config KNOB = VALUE`)", "",
              "Set while the compiled object's frames compile, for that object alone. A value below `min` is",
              "GP2010; a value with a risk is warning GP2021, with the schema's text.", "",
              "| knob | type | meaning | risks |", "|---|---|---|---|"]
    for name, k in data.get("config", {}).items():
        lines.append(f"| `{name}` | {k['type']} | {' '.join(str(k.get('doc', '')).split())} | {knob_risks(k)} |")
    lines += ["", "## Stances (`stance NAME after N calls`)", ""]
    lines += [f"- `{s}`" for s in data.get("stances", [])]
    lines += ["", "## Violation actions (`on_violation ACTION` and `on_recompile ACTION`; the first is the default)", ""]
    lines += [f"- `{a}`" for a in data.get("violation_actions", [])]
    lines += ["", "## Dispatch modes (`dispatch MODE`)", ""]
    lines += [f"- `{m}`" for m in data.get("dispatch_modes", [])]
    lines.append("")
    return "\n".join(lines)


def knob_risks(knob: dict) -> str:
    """A config knob's `min` and `risks` as one table cell."""
    out = [f"below {knob['min']}: error" if "min" in knob else ""]
    for risk in knob.get("risks", []):
        value = (f"above {risk['above']}" if "above" in risk
                 else f"`{str(risk['equals']).lower() if isinstance(risk['equals'], bool) else risk['equals']}`")
        out.append(f"{value}: {risk['text']}")
    return "; ".join(filter(None, out))


def main(argv: list[str]) -> int:
    return write_or_check(OUT, render(), argv, "docs/tools/gen_schema.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
