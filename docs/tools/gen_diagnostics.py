#!/usr/bin/env python3
"""Writes docs/diagnostics.md from diag_codes.h and the reject corpus.

Every code in core/include/guardpolicy/diag_codes.h gets a section: its meaning (the
comment beside it, or the table below) and, where tests/corpus/reject has a file for it,
the policy and the exact lint output (the corpus goldens, checked by the C++ tests). Each
policy carries a `make docs-test` annotation (docs/tools/docs_test.py) naming the codes of
its golden output, so the docs test checks them again through the Python package.
Usage: gen_diagnostics.py [--check]   (--check: exit 1 if the committed file differs)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_file import write_or_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CODES_H = ROOT / "core/include/guardpolicy/diag_codes.h"
REJECT = ROOT / "tests/corpus/reject"
OUT = ROOT / "docs/diagnostics.md"

MEANING = {
    "GP0001": "A policy file is missing, unreadable, a directory or not a regular file.",
    "GP0002": "A source is larger than `CompileOptions::max_source_bytes` (1 MiB).",
    "GP0003": "Parentheses or braces nest deeper than `CompileOptions::max_depth` (64).",
    "GP0004": "The source is not UTF-8, or holds a NUL byte.",
    "GP0005": "More rules than `CompileOptions::max_rules` (4096), counted after `use` expansion.",
    "GP0006": "A compiled policy (`.gpolc`) was refused: bad magic, a truncated file (also one cut inside the magic, or an empty `*.gpolc`), another format version (an older one says to recompile), another schema, wrong size, bad checksum, malformed tables, or bytecode the verifier rejects; or an artifact was given to a command that reads source (`lint`, `fmt`, `test`, `compile`).",
    "GP1001": "The parser rejected a token; the message says what it expected. Mistakes from other languages are named: single-quoted strings, `=` for `==`, `&&` `||` `!` for `and` `or` `not`, an unterminated string, a bare enum member after `=`, an invisible character (shown escaped, e.g. `\\u00a0`).",
    "GP1002": "The header names a language version other than 1.",
    "GP1003": "A string uses an escape other than `\\\\ \\\" \\n \\t \\r`.",
    "GP1004": "An integer literal does not fit in 64 bits.",
    "GP2001": "A name is neither a parameter nor a schema field (see docs/schema.md).",
    "GP2002": "A name is not a member of a closed enum such as `GuardSource`, or is a misspelt `GuardType` (within edit distance 2 of a name torch 2.11 to 2.15 produces).",
    "GP2003": "Operand types do not fit the operator, or the two sides differ.",
    "GP2004": "A condition, or an operand of `and`/`or`/`not`, is not bool.",
    "GP2005": "`use`, `extends` (or a `test`) names a policy that is neither in the file nor in policies/std.",
    "GP2006": "A parameter has an unknown type, a default or argument of the wrong type (an enum value is a member's name in a string, `\"LOCAL\"`), a `config` value of the wrong type, or `use` (or `extends`) passes an unknown parameter or leaves one without a default unset.",
    "GP2007": "Two policies in one file have the same name.",
    "GP2008": "`use` or `extends` chains loop back to a policy that is being expanded (a policy that uses or extends itself, or two that extend each other).",
    "GP2009": "A `matches` pattern is not valid RE2 (RE2's message is included), a `glob` has a reversed range (`[z-a]`), or a pattern is too long.",
    "GP2010": "`config` names a knob the schema does not declare, or gives it a value below the knob's least value (the schema's `min`: `recompile_limit` is at least 1, below which Dynamo compiles nothing). A value of the wrong type is GP2006.",
    "GP2011": "`stance` names a stance the schema does not declare, or fewer than 1 warm-up call; `on_recompile` without a `stance` line, or with an action the schema's `violation_actions` does not list.",
    "GP2012": "(warning) A `GuardType` name that no supported torch release (2.11 to 2.15) produces and more than 2 edits from every known one; allowed, since the enum is open.",
    "GP2013": "`default`, `doc`, `stance`, `on_error` or one `config` knob is given twice.",
    "GP2014": "`on_error` takes `keep`, `drop` or `raise` (not `watch`: an entry that cannot be read has no state to watch).",
    "GP2015": "A `test` expectation names an unknown field, or one tests cannot set.",
    "GP2016": "A call names no function or filter of a loaded plugin (`builtin.*` are always loaded).",
    "GP2017": "A call has the wrong number of arguments, an argument of the wrong type, or a filter argument that is not a literal or a parameter.",
    "GP2018": "A `verify every N calls` line with N below 1, an `on_violation` action the schema's `violation_actions` does not list, or `on_violation` in a policy without a `verify` line.",
    "GP2019": "A `dispatch` line names a mode the schema's `dispatch_modes` does not list.",
    "GP2021": "(warning) A `config` value with a risk the schema's `risks` list names: `recompile_limit` above 64 hides a recompile storm (each cache entry is one more guard check per miss, and its graph is kept in memory), `automatic_dynamic_shapes = false` compiles anew for every new input size, `force_parameter_static_shapes = false` lets parameters' shapes become symbols (slower kernels), `specialize_float = true` compiles anew for every new float value. A line a policy inherits through `extends` is reported in its base.",
    "GP2020": "(note) A `GuardType` member that only newer supported torch releases produce (the schema's `since`, e.g. `CURRENT_STREAM_MATCH` since 2.15): the policy is the same on every release, and on an older one no guard has that type. `lint` exits 0; `--werror` ignores notes.",
    "GP3001": ("A policy that can drop a guard is not marked `unsafe`; or it skips guard evaluation after "
               "warm-up (`stance skip_guard_eval_unsafe`); or it installs free tensors "
               "(`config install_free_tensors = true`) with no `watch`, whose installed tensors torch guards by "
               "metadata, not identity."),
    "GP3002": "(warning) A policy marked `unsafe` can never drop a guard (a `watch` is no drop).",
    "GP3003": "(warning) A rule can never fire: earlier rules (or a used policy's rules) decide every entry it matches; the note names the covering rule.",
    "GP3004": "(warning) A condition is always true: every entry that reaches the rule is decided there.",
    "GP3005": "(warning) A condition is always false: the rule never fires.",
    "GP3006": "(warning) The same rule appears earlier in the policy.",
    "GP3007": "(warning) A drop that only matches GRAD_MODE, DETERMINISTIC_ALGORITHMS or FSDP_TRAINING_STATE does nothing: GLOBAL_STATE checks those.",
    "GP3008": "(warning) A risky drop, with what can go stale: the SHAPE_ENV guard, the GLOBAL_STATE guard, TENSOR_MATCH on input tensors, or CONSTANT_MATCH/EQUALS_MATCH/TYPE_MATCH on the other inputs and their items (`guard_source == LOCAL`: a flag, a number, a `transformer_options`-style dict entry passed as an argument). The rule's condition counts: a drop limited to values of built-in classes (`value.type == \"builtins.NoneType\"`) or to modules cannot drop a tensor's guard, and one limited to globals or module state (`is_global`, `guard_source != LOCAL`) no input's.",
    "GP3009": "(warning) The policy drops every guard (by `default drop` or by rules that leave no entry to a keep or a watch); the GP3008 warnings still name the risks.",
    "GP3010": "(warning) A parameter is never used by the policy's rules.",
    "GP3011": "(warning) A string compared with `name` (`==`, `!=`, `in`, `startswith`, the literal part of a `glob`) that torch 2.13 does not produce: a module path in dotted style (`self.fc.weight`, `self.layers[0].attn`, `self.layers.0.`, a prefix `self.fc.`: torch names a submodule `self._modules['fc']` and its parameter `_parameters['weight']`), or one starting with `L[` (torch strips the local scope). An attribute chain that ends in no parameter or buffer name (`self.config.return_dict`) is left alone: torch names an attribute of a plain object so. The help gives the `path` spelling (docs/schema.md, \"Real names\").",
    "GP3012": "(warning) A `watch` (a rule, a used policy's rule or `default watch`) can match guards whose state is held in no dict a watcher can see, so torch can only check them on every call and the watch is honoured as a `keep`: the `TENSOR_MATCH` guards of input tensors (under `guardpolicy.compile` the attributes of an object passed in are watched, by the object's identity; a tensor's metadata is held in no dict) and the ambient guards of global state (`SHAPE_ENV`, `GLOBAL_STATE`, `GRAD_MODE`, `DETERMINISTIC_ALGORITHMS`, `TORCH_FUNCTION_STATE`, `DEFAULT_DEVICE` and the other guards on `GlobalStateSource`, each asked of the policy as GP3008 asks it of `SHAPE_ENV` and `GLOBAL_STATE`). Nothing is lost (a watch is as safe as a keep), but the policy does not say what torch does.",
    "GP4001": "At load time: no policy, several policies and no `policy=`, or an unknown `policy=` name.",
    "GP4002": "At load time: an unknown parameter, a value of the wrong type (or a misspelt `GuardType`), or a parameter with no default and no value.",
    "GP9001": "An internal error: the compiler produced bytecode the verifier refuses, or that does not link against the schema it was checked with. A defect of guardpolicy, not of the policy; nothing runs.",
}

FIX = {
    "GP0001": "Check the path; pass a `.gpol` file, not a directory.",
    "GP0002": "Split the file, or raise the limit in `CompileOptions`.",
    "GP0003": "Split the condition into several rules (first match decides, so `drop when a` then `drop when b` is `drop when a or b`).",
    "GP0004": "Save the file as UTF-8 and remove NUL bytes.",
    "GP0005": "Merge rules with `in {...}`, or split the policy.",
    "GP0006": "Recompile the policy with `guardpolicy compile` (with this guardpolicy and schema).",
    "GP1001": "Follow the expected-token list in the message; see docs/language.md for each construct.",
    "GP1002": "Write `guardpolicy 1` as the first line.",
    "GP1003": "Escape a backslash as `\\\\` (regexes: `\\\\[` for a literal `[`).",
    "GP1004": "Use a value between -2^63 and 2^63-1.",
    "GP2001": "Use the suggested field, or one from docs/schema.md.",
    "GP2002": "Use the suggested member; GuardSource and GuardType members are listed in docs/schema.md.",
    "GP2003": "Compare values of one type; ordering (`<` ...) is for ints; use `contains` on sets.",
    "GP2004": "Compare the value to something (`name == \"x\"`) or use a bool field.",
    "GP2005": "Use the suggested name, define the policy in this file, or add it to policies/std.",
    "GP2006": "Use bool, int, string, GuardType or GuardSource, a default of that type, and the used policy's parameter names.",
    "GP2007": "Rename one of the policies.",
    "GP2008": "Break the loop: move the shared rules into a third policy that both use (or extend).",
    "GP2009": "Use RE2 syntax: no backreferences, lookaround or named groups `(?<..>)` (write `(?P<..>)`); in a glob, write ranges low to high.",
    "GP2010": "Use a knob from the schema's `config:` section with a value of its type, at least its `min`.",
    "GP2011": "Write `stance skip_guard_eval_unsafe after N calls` with N of at least 1, and `on_recompile recompile`, `warn` or `raise` beside it.",
    "GP2012": "Check the spelling; keep it if it is a third-party guard type.",
    "GP2013": "Keep one of the two items.",
    "GP2014": "Write `on_error keep`, `on_error drop` or `on_error raise`.",
    "GP2015": "Use a schema field with a literal of its type (enum members as strings).",
    "GP2016": "Check the spelling, or load the plugin that declares it (`--plugin PATH`, `guardpolicy.load_plugin`).",
    "GP2017": "Pass one argument per declared parameter, each of the declared type (see `guardpolicy.plugins()` or docs/plugins.md).",
    "GP2018": "Write `verify every N calls` with N of at least 1 and `on_violation recompile`, `raise` or `warn` beside it.",
    "GP2019": "Write `dispatch direct`, or leave the line out for torch's own dispatch.",
    "GP2021": "Fix the storm at its guard instead (`TORCH_LOGS=recompiles` names it: drop, watch or pass the value as a tensor), or leave the knob at torch's default; keep the line if the cost is known and wanted.",
    "GP2020": "Nothing to fix: the note says which release produces the member (docs/schema.md, \"Between releases\").",
    "GP3001": "Write `unsafe policy`, or remove the drops (for free tensors: add `default watch`).",
    "GP3002": "Remove `unsafe`.",
    "GP3003": "Remove the rule, or move it before the rules that cover it.",
    "GP3004": "Write `default keep|drop` instead, or narrow the condition.",
    "GP3005": "Remove the rule, or fix the condition (two different values of one field cannot both hold).",
    "GP3006": "Remove the second copy.",
    "GP3007": "Drop `GLOBAL_STATE` instead (which stops checking all global state), or remove the rule.",
    "GP3008": "Put `keep when guard_type in {SHAPE_ENV, GLOBAL_STATE}` (and a keep for inputs: `keep when guard_source == LOCAL`) before the drops, or accept the risk knowingly.",
    "GP3009": "Keep at least the guards that protect correctness (SHAPE_ENV, GLOBAL_STATE, input TENSOR_MATCH).",
    "GP3010": "Remove the parameter, or use it in a rule.",
    "GP3011": "Compare `path` instead (`path startswith \"fc.\"`), or write the name as torch spells it (`self._modules['fc']._parameters['weight']`).",
    "GP3012": "Keep them before the watch: `keep when guard_source == LOCAL` for the inputs, `keep when source.kind in {\"GlobalStateSource\", \"ShapeEnvSource\"}` for the ambient guards (or the `guard_type` the help names).",
    "GP4001": "Pass `policy=\"name\"` to `guardpolicy.load` (or `--policy NAME`) with a name the file declares.",
    "GP4002": "Pass only declared parameters, with values of their types (closed enums: a member name).",
    "GP9001": "Report it, with the policy: the message names what the verifier or the linker refused.",
}


# Carriage returns, control characters (but tab and newline) and no-break spaces: shown
# as the file's bytes, not as a code block.
HIDDEN = re.compile("[\\r\\x00-\\x08\\x0b-\\x1f\\x7f\\u00a0]")


def docs_test_annotation(src: Path) -> str:
    """The `make docs-test` annotation of a reject file shown on the page: the codes of its
    golden output, the load its .options file asks for, or why the page cannot show it."""
    raw = src.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "<!-- docs-test: skip the file's bytes are not UTF-8 and the page shows them replaced -->"
    options = src.with_suffix(".options")
    load = []
    if options.exists():
        for line in options.read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition("="))
            if key == "policy":
                load.append(f"policy={value}" if value else "")
            elif key.startswith("param."):
                load.append(f"{key}={value}")
            elif key:
                return f"<!-- docs-test: skip needs `{line.strip()}` from {options.name} -->"
    golden = src.with_suffix(".expected")
    if not golden.exists():
        return f"<!-- docs-test: skip {src.name} has no golden output (.expected) -->"
    expected = golden.read_text()
    codes = " ".join(sorted(set(re.findall(r"\[(GP\d{4})\]", expected))))
    directives = [f"expect {codes}"]
    if options.exists():
        directives.append(" ".join(["load", *filter(None, load)]))
    return f"<!-- docs-test: {'; '.join(directives)} -->"


def render() -> str:
    codes = sorted(set(re.findall(r'"(GP\d{4})"', CODES_H.read_text())))
    lines = [
        "# Diagnostics",
        "",
        "Every finding has a stable code: `GP0xxx` input and limits, `GP1xxx` syntax, `GP2xxx`",
        "names and types, `GP3xxx` policy analysis, `GP4xxx` load-time selection and parameters.",
        "Text output is `file:line:col: severity[CODE]: message`, the source line, a caret under",
        "the range, then `= help:`. Messages are lowercase with user text in backticks.",
        "",
        "This file is generated by `docs/tools/gen_diagnostics.py` from",
        "`core/include/guardpolicy/diag_codes.h` and the reject corpus (`tests/corpus/reject`),",
        "whose outputs the C++ tests check exactly.",
        "",
    ]
    for code in codes:
        lines += [f"## {code}", "", MEANING.get(code, "(undocumented)"), "",
                  f"**Fix:** {FIX.get(code, '(undocumented)')}", ""]
        for src in sorted([*REJECT.glob(f"{code}_*.gpol"), *REJECT.glob(f"{code}_*.gpolc")]):
            expected = src.with_suffix(".expected")
            options = src.with_suffix(".options")
            if src.is_dir():
                lines += [f"`{src.name}` is a directory."]
            elif src.read_bytes().startswith(b"GPOLC\0") or src.suffix == ".gpolc":
                raw = src.read_bytes()
                shown = f"`{raw!r}`" if len(raw) <= 36 else f"a header `{raw[:36]!r}`, then the payload"
                lines += [f"`{src.name}` is a `.gpolc` file of {len(raw)} bytes: {shown}.", ""]
            elif HIDDEN.search(src.read_bytes().decode("utf-8", "replace")):
                lines += [f"`{src.name}` holds characters a page cannot show: `{src.read_bytes()!r}`.", ""]
            else:
                text = src.read_bytes().decode("utf-8", "replace")
                lines += [docs_test_annotation(src), "```gpol", text.rstrip("\n"), "```", ""]
            if options.exists():
                lines += ["with these options (`tests/corpus/reject/*.options`):", "",
                          "```text", options.read_text().rstrip("\n"), "```", ""]
            if expected.exists():
                lines += ["```text", expected.read_text().rstrip("\n"), "```", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    return write_or_check(OUT, render(), argv, "docs/tools/gen_diagnostics.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
