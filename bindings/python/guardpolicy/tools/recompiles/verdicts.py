"""Storms and what to do about each: the guards that failed on recompile after recompile,
grouped and counted, each with a verdict.

A **storm** is a guard that failed in at least ``STORM_AFTER`` cache entries of one frame (each
compiled for another value). Its
verdict says what fixes it:

* ``drop``: the mutation audit proved dropping it harmless, the state the call writes
  included (the policy line that drops it);
* ``config``: a torch setting fixes it (an int attribute of an ``nn.Module`` set per batch or
  counted per call: ``config allow_unspec_int_on_nn_module = true`` makes it a symbol);
* ``dynamic``: a size (a tensor's shape, a list's length): ``mark_dynamic`` or bucketing;
* ``tensor``: a Python float the graph specializes on: pass it as a tensor;
* ``structure``: the module tree changes (an adapter loaded per request): no filter fixes it;
  the library's own fix where one exists (PEFT's and diffusers' LoRA hotswap);
* ``keep``: the graph really changes with it (the audit's finding says why).

Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any, Iterable

from ...api.policy_text import gpol_string
from ...runtime.recompiles import EntryFailure, Recompile, attribute_path, failing_guards

#: A guard is a storm once it failed in this many cache entries of one frame.
STORM_AFTER = 2
#: The values a storm keeps, for its report.
MAX_VALUES = 8

VERDICTS = ("drop", "config", "dynamic", "tensor", "structure", "keep")

#: What an adapter library changes per request (PEFT's, diffusers'): its config and layers.
_ADAPTER = re.compile(r"(peft_config|lora_[A-Za-z]|\.scaling\b|active_adapter|adapter_name)")
#: A module's own dicts of submodules, parameters and buffers (their keys, their length).
_TREE = re.compile(r"(_modules|_parameters|_buffers)'?\]?$")
_SIZE = re.compile(r"size\(\)|\.size\[|stride|numel|size mismatch|shape")
_FLOAT = re.compile(r"^-?(\d+\.\d*(e-?\d+)?|\d+e-?\d+|inf|nan)$")
_INT = re.compile(r"^-?\d+$")
UNSPEC_INT = "config allow_unspec_int_on_nn_module = true"
_LENGTHS = ("SEQUENCE_LENGTH", "LENGTH_CHECK", "DICT_LENGTH")


@dataclasses.dataclass
class Storm:
    """One storming guard. ``guard``: its name as ``gp.explain`` gives it (``"self.step"``);
    ``guard_type``: torch's (``"EQUALS_MATCH"``); ``frame``: ``"forward at model.py:6"``;
    ``failures``: how often it failed, over every cache entry of every recompile;
    ``recompiles``: the recompiles it failed in; ``values``: the values its cache entries
    were compiled for (torch's text, at most ``MAX_VALUES``); ``hint``: torch's HINT;
    ``verdict``: one of ``VERDICTS``; ``line``: the policy line that fixes it (``""`` for
    none); ``advice``: what to do, one or two sentences."""

    guard: str
    guard_type: str
    frame: str
    failures: int = 0
    recompiles: int = 0
    values: list[str] = dataclasses.field(default_factory=list)
    hint: str = ""
    verdict: str = "keep"
    line: str = ""
    advice: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "hint"}


def storms_of(recompiles: Iterable[Recompile], explanations: list) -> list[Storm]:
    """The storms of a compiled object's recompiles (``gp.stats(c).recompiles`` and
    ``.explanations``), most failures first."""
    found: dict[tuple[str, str], Storm] = {}
    types: dict[tuple[str, str], Counter] = {}
    entries: dict[tuple[str, str], set[str]] = {}
    for r in recompiles:
        frame = f"{r.frame.function} at {r.frame.file}:{r.frame.line}"
        seen: set[tuple[str, str]] = set()
        for g in failing_guards(r, explanations):
            key = (frame, g.name)  # a float's CONSTANT_MATCH, then its SHAPE_ENV guard: one storm
            storm = found.setdefault(key, Storm(g.name, g.guard_type, frame, hint=g.hint))
            types.setdefault(key, Counter())[g.guard_type] += 1
            storm.failures += 1
            storm.hint = storm.hint or g.hint
            if g.expected and g.expected not in storm.values and len(storm.values) < MAX_VALUES:
                storm.values.append(g.expected)
            if key not in seen:
                storm.recompiles += 1
                seen.add(key)
            entries.setdefault(key, set()).add(g.entry)
    for key, storm in found.items():
        storm.guard_type = types[key].most_common(1)[0][0]
    # a storm fails in one cache entry after another; a guard failing again and again in the
    # same old entry (an int made dynamic after one recompile) made one compile only
    storms = [s for key, s in found.items() if len(entries[key]) >= STORM_AFTER]
    return sorted(storms, key=lambda s: (-s.failures, s.guard))


def drop_line(storm: Storm) -> str:
    """The policy line that drops exactly this guard."""
    return f"drop when name == {gpol_string(storm.guard)} and guard_type == {storm.guard_type}"


def library_fix(model: Any) -> str:
    """The library's own fix for adapters changed per request, for a model built with it."""
    import sys

    modules = {type(m).__module__.split(".")[0] for m in _modules(model)}
    if "peft" in modules and "peft" in sys.modules:
        return ("PEFT's hotswap compiles once: call peft.utils.hotswap.prepare_model_for_compiled_hotswap(model, "
                "target_rank=R) before compiling, then swap each request's weights in with "
                "hotswap_adapter_from_state_dict(model, state_dict, adapter_name, config) instead of loading a new adapter")
    if "diffusers" in modules:
        return ("diffusers' LoRA hotswap compiles once: pipe.enable_lora_hotswap(target_rank=R) before compiling, "
                "then pipe.load_lora_weights(..., hotswap=True, adapter_name=...) per request")
    return ("keep the module tree fixed after compiling: load every variant once before warm-up and switch "
            "between them with a tensor or a flag the graph reads, or compile each variant apart")


def _modules(model: Any) -> list:
    modules = getattr(model, "modules", None)
    try:
        return list(modules()) if callable(modules) else []
    except Exception:  # noqa: BLE001 - only a hint
        return []


def classify(storm: Storm, proven: dict[tuple[str, str], tuple[str, str]], model: Any = None) -> None:
    """Sets ``storm.verdict``, ``line`` and ``advice``. ``proven``: the audit's verdict and
    detail per ``(guard, guard_type)`` of a candidate drop (``"harmless"``, ``"dangerous"``,
    ...); a guard missing from it was not audited."""
    name, kind = storm.guard, storm.guard_type
    audit, detail = proven.get((name, kind), ("", ""))
    values = storm.values
    if kind == "TENSOR_MATCH" or (kind == "SHAPE_ENV" and _SIZE.search(name)) or _SIZE.search(name):
        storm.verdict = "dynamic"
        from ...runtime.torch_internals import MARK_DYNAMIC

        storm.advice = (f"a size changes per call: mark it dynamic before the first call "
                        f"({MARK_DYNAMIC}(x, dim), or maybe_mark_dynamic) or pad to a few buckets and "
                        f"warm each up ({name})")
    elif kind in _LENGTHS and audit != "harmless":
        storm.verdict = "keep"
        why = f"the audit found dropping it {audit}: {detail}" if audit else "not proven harmless"
        storm.advice = (f"a list whose length the graph reads grows per call ({why}): bound it (a deque with "
                        f"maxlen, reset per request) or keep its contents in a preallocated tensor")
    elif audit == "harmless":
        storm.verdict, storm.line = "drop", drop_line(storm)
        storm.advice = "the audit proved dropping it harmless: outputs and the state the call writes equal eager's"
    elif _structural(name, kind):
        storm.verdict = "structure"
        storm.advice = "the module tree changes between calls; no guard filter fixes that. " + library_fix(model)
    elif values and all(_FLOAT.match(v) for v in values) or kind == "SHAPE_ENV":
        storm.verdict = "tensor"
        storm.advice = (f"a Python float the graph specializes on: keep it in a tensor, e.g. "
                        f"register_buffer('{_leaf(name)}', torch.tensor(v)) once and `.fill_(v)` per step (or pass "
                        f"torch.tensor(v) as an input) instead of assigning a new float; where an op takes only a "
                        f"Python float (dropout's p, a norm's eps), round it to a few values and warm each up")
    elif values and all(_INT.match(v) for v in values) and (
            "allow_unspec_int_on_nn_module" in storm.hint or _module_attribute(name)):
        storm.verdict, storm.line = "config", UNSPEC_INT
        storm.advice = ("an int attribute of an nn.Module set per batch or counted per call: torch makes it a "
                        "symbol with allow_unspec_int_on_nn_module (one compile for every value)")
    else:
        storm.verdict = "keep"
        why = f"the audit found dropping it {audit}: {detail}" if audit else "not proven harmless"
        storm.advice = f"the graph changes with it ({why}); make the value stable across calls, or pass it as a tensor"


def _structural(name: str, kind: str) -> bool:
    """Whether a storm's guard reads the module tree: an adapter's config or layers, a
    module's dict of submodules, parameters or buffers, or a module's identity or class."""
    path = attribute_path(name)
    if _ADAPTER.search(path) or (not kind and name != path):  # a key gone from a module's dict
        return True
    if kind in ("DICT_KEYS_MATCH", "DICT_KEYS", "DICT_LENGTH", "LENGTH_CHECK") and _TREE.search(name):
        return True
    return kind in ("ID_MATCH", "TYPE_MATCH") and "." in path


def _leaf(name: str) -> str:
    return re.split(r"[.\[\]']+", name.strip("]'"))[-1] or "value"


def _module_attribute(name: str) -> bool:
    return name.startswith("self.") and "[" not in name


def failed(recompiles: Iterable[Recompile], explanations: list) -> list[EntryFailure]:
    """Every failure of every recompile, named (for the JSON's ``recompiles``)."""
    return [g for r in recompiles for g in failing_guards(r, explanations)]
