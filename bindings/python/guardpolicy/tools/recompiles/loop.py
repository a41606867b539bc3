"""One pass of the user's loop: ``run(compiled, model)`` on a freshly built model, with every
call's output and the model's state after it recorded, so that a compiled pass can be
compared call by call with an eager one.

``SCRIPT.py`` defines ``run(compiled, model)`` (as ``suggest --from-run`` takes it): it calls
``compiled`` the way the user's program does and changes ``model`` between calls as the
program does (an options dict per call, an adapter loaded per request, a module int set per
batch). The eager pass runs ``run(model, model)``. Each pass builds its own model with the
same seed, so the passes start from the same weights; nothing of the user's files changes.
Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import warnings
from typing import Any, Callable, Iterator

from ..common.compare import compare


class LoopError(Exception):
    """The script does not load, has no ``run``, or raised (one line)."""


def load_run(path: str) -> Callable[[Any, Any], Any]:
    """``run`` of the file ``path`` (``LoopError`` if it has none), read as ``suggest
    --from-run`` reads it."""
    from ..suggest.from_run import FromRunError, load

    try:
        return load(path)
    except FromRunError as e:
        raise LoopError(str(e)) from None


#: Module attributes of these types are compared after each call (what a call writes: a
#: counter, a per-batch int, a list it appends to).
_PLAIN = (int, float, bool, str, type(None))
#: Attributes that compiling sets on a module (torch's ``_is_torch_compile``), not state a call writes.
_COMPILE_MARKS = ("_is_torch_compile", "_torchdynamo", "_guardpolicy", "_compiled_call_impl")
#: A buffer up to this many elements is compared after each call (a counter kept as a tensor,
#: BatchNorm's statistics); larger ones (a KV cache) only by shape and dtype.
MAX_BUFFER = 1 << 16


def state_of(model: Any, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a call may have written, by value: every submodule's plain attributes (numbers,
    strings, lists and tuples of them) and its buffers (cloned up to ``MAX_BUFFER``
    elements), keyed ``"layers.0.step"``. Nothing for a function. A buffer equal to its copy
    in ``previous`` (the state after the call before) shares that copy: a loop of N calls
    keeps one copy of a buffer no call writes."""
    import torch

    out: dict[str, Any] = {}
    if not isinstance(model, torch.nn.Module):
        return out
    for path, m in model.named_modules():
        prefix = f"{path}." if path else ""
        for k, v in vars(m).items():
            if k.startswith(_COMPILE_MARKS):
                continue
            if isinstance(v, _PLAIN):
                out[prefix + k] = v
            elif isinstance(v, (list, tuple)) and all(isinstance(x, _PLAIN) for x in v):
                out[prefix + k] = list(v)
            elif isinstance(v, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in v):
                out[prefix + k] = [len(v)]  # a list of tensors it appends to: its length
        for k, b in m._buffers.items():
            if b is None:
                continue
            key, last = f"{prefix}{k}", (previous or {}).get(f"{prefix}{k}")
            with torch.no_grad():
                if b.numel() > MAX_BUFFER:
                    out[key] = (tuple(b.shape), b.dtype)
                elif isinstance(last, torch.Tensor) and last.shape == b.shape and last.dtype == b.dtype and \
                        torch.equal(last, b.detach()):
                    out[key] = last
                else:
                    out[key] = b.detach().clone()
    return out


@dataclasses.dataclass
class Pass:
    """One run of the loop. ``outputs`` and ``states``: per call of the compiled object (or of
    the model, in the eager pass), its output (detached) and ``state_of(model)`` after it;
    ``compiled``: the compiled object (None in the eager pass)."""

    outputs: list = dataclasses.field(default_factory=list)
    states: list = dataclasses.field(default_factory=list)
    compiled: Any = None
    seconds: float = 0.0


class _Recording:
    """``target`` called as the script calls it, each call's output and the state after it
    recorded in ``into``; attributes are ``target``'s (``compiled.eval()``)."""

    def __init__(self, target: Any, model: Any, into: Pass, tick: Callable[[], None]):
        self._target, self._model, self._into, self._tick = target, model, into, tick

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ..mutation.calls import detached

        out = self._target(*args, **kwargs)
        self._into.outputs.append(detached(out))
        states = self._into.states
        states.append(state_of(self._model, states[-1] if states else None))
        self._tick()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The storm's own warnings (torch's recompile limit, guardpolicy's eager fallback) held
    back while a pass runs: the report says what happened."""
    from ...runtime.torch_internals import DYNAMO_LOGGER

    loggers = [logging.getLogger(name) for name in ("guardpolicy", DYNAMO_LOGGER)]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def run_pass(run: Callable, build: Callable[[], Any], compile_fn: Callable[[Any], Any] | None,
             tick: Callable[[], None] = lambda: None, label: str = "") -> Pass:
    """Builds the model (seed 0), compiles it with ``compile_fn`` (None: the eager pass) and
    runs ``run(recording, model)`` under ``torch.no_grad()`` (``LoopError`` if it raises, naming
    the pass: ``label``, e.g. "in the eager pass").
    Dynamo's caches are reset before and after."""
    import time

    import torch

    torch.compiler.reset()
    gc.collect()  # the last pass's model and cache entries go before this one's are made
    torch.manual_seed(0)
    built = build()
    model = built.fn
    result = Pass()
    target = model if compile_fn is None else compile_fn(model)
    result.compiled = None if compile_fn is None else target
    t0 = time.perf_counter()
    try:
        with torch.no_grad(), _quiet():
            run(_Recording(target, model, result, tick), model)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code: one line
        where = f" {label}" if label else ""
        raise LoopError(f"run() raised {type(e).__name__}{where}: {e}") from None
    finally:
        result.seconds = time.perf_counter() - t0
        torch.compiler.reset()
    return result


def wrong_calls(compiled: Pass, eager: Pass) -> tuple[int, int, str]:
    """``(wrong outputs, wrong states, the first difference)``: calls whose output, or the
    state after which, differs from the eager pass's same call (``compare``: torch.testing's
    tolerances). A pass of another length counts each missing call as wrong."""
    wrong_out = wrong_state = 0
    first = ""
    for i in range(max(len(compiled.outputs), len(eager.outputs))):
        if i >= len(compiled.outputs) or i >= len(eager.outputs):
            wrong_out += 1
            continue
        problem = compare(compiled.outputs[i], eager.outputs[i])
        if problem:
            wrong_out += 1
            first = first or f"call {i + 1}: output: {problem}"
        state = _state_difference(compiled.states[i], eager.states[i])
        if state:
            wrong_state += 1
            first = first or f"call {i + 1}: state: {state}"
    return wrong_out, wrong_state, first


def _state_difference(got: dict, want: dict) -> str:
    for key in sorted(set(got) | set(want)):
        if key not in got or key not in want:
            return f"{key} present in one run only"
        problem = compare(got[key], want[key])
        if problem:
            return f"{key} is {_short(got[key])}, eager has {_short(want[key])}"
    return ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
