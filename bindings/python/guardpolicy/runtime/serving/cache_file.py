"""``guardpolicy.save_cache(path, compiled)`` and ``guardpolicy.load_cache(path, compiled)``:
torch's mega-cache (``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``: the
Inductor FX graph and AOTAutograd cache entries of this process) in a file whose header says
under what it was compiled, so that a later process refuses it when that differs.

The file: the line ``guardpolicy-cache 1``, one line of JSON (the header), then torch's
artifact bytes. The header holds guardpolicy's and torch's versions, the policy's fingerprint
(``distributed.fingerprint``: name, a digest of its program and lines, parameters, plugins),
the settings that change what a compile produces (the backend and its options,
``torch.compile``'s ``dynamic``, the object's config lines, Dynamo's dynamic-shape and
specialization knobs: ``torch_internals.COMPILE_KNOBS``), the frames compiled (shown, not
compared), and the artifact's size and SHA-256. Loading compares every compared field with
this process's and names the first that differs in one line.

A warm start still traces with Dynamo, so the guards, the policy's decisions and the watch
are made anew exactly as in a cold start (a change after it is seen); what the mega-cache
saves is Inductor's code generation and compile. It holds nothing for the eager backend.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import warnings
from typing import Any

MAGIC = b"guardpolicy-cache 1\n"
FORMAT = 1
MAX_HEADER = 1 << 20  # bytes: a header line longer than this is not one of ours
ON_MISMATCH = ("raise", "recompile")


class CacheFileError(ValueError):
    """A cache file that cannot be used: missing, truncated, foreign, corrupt, or (a
    ``CacheMismatch``) saved under other settings. The message is one line."""


class CacheMismatch(CacheFileError):
    """A cache file saved under another policy, torch, guardpolicy or compile setting.
    ``differences``: ``(field, saved, now)`` for each field that differs, in header order."""

    def __init__(self, message: str, differences: list[tuple[str, Any, Any]]):
        super().__init__(message)
        self.differences = differences


@dataclasses.dataclass(frozen=True)
class CacheLoad:
    """What ``load_cache`` did: ``loaded`` (torch's caches were warmed from the file),
    ``artifacts`` (per kind, ``inductor``, ``aot_autograd``, ..., how many torch loaded) and
    ``mismatch`` (under ``on_mismatch="recompile"``, the line that says why it was ignored)."""

    path: str
    loaded: bool
    artifacts: dict[str, int]
    mismatch: str = ""


def header_of(compiled: Any) -> dict[str, Any]:
    """The compared part of a cache file's header for the ``guardpolicy.compile`` result
    ``compiled`` in this process. Raises TypeError for anything else."""
    import torch

    from ..._core import __version__
    from ...distributed.fingerprint import fingerprint
    from .. import torch_internals as _tp
    from ..stats import stats
    from .frame import top_frame

    stats_ = stats(compiled)
    fp = fingerprint(stats_.policy, 0, {})
    config = {**stats_.policy.config, **stats_.config_overrides}
    return {"torch": torch.__version__, "guardpolicy": __version__,
            "policy": {"name": fp.policy, "program": fp.program, "params": [list(p) for p in fp.params],
                       "plugins": [list(p) for p in fp.plugins]},
            "compile": _tp.compile_identity(top_frame(compiled).ctx),
            "config lines": {str(k): _plain(v) for k, v in sorted(config.items())},
            "dynamo": _tp.compile_knobs()}


def save_cache(path: str | os.PathLike, compiled: Any) -> dict[str, Any]:
    """Writes torch's mega-cache of this process (every Inductor compile so far, not only
    ``compiled``'s) to ``path`` with a header for ``compiled`` (a ``guardpolicy.compile``
    result that has compiled); returns the header written. The file is replaced atomically
    and never over the policy's own file. Raises TypeError for another ``compiled``,
    ValueError when torch has nothing to save (the eager backend, nothing compiled yet, or
    Inductor's FX graph cache off), OSError when the file cannot be written."""
    import torch

    from ...api.files import write_file
    from .. import torch_internals as _tp
    from ..stats import stats

    header = header_of(compiled)
    if not _tp.fx_graph_cache_enabled():
        raise ValueError("guardpolicy.save_cache: Inductor's FX graph cache is off "
                         f"({_tp.INDUCTOR_CONFIG}.fx_graph_cache): torch's mega-cache has nothing to reuse")
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        raise ValueError(f"guardpolicy.save_cache: torch's mega-cache holds nothing to save (it keeps Inductor "
                         f"compiles; this object compiles with backend {header['compile']['backend']!r} and has "
                         f"compiled {stats(compiled).compiles} frames)")
    artifact, info = saved
    header["frames"] = [str(f.frame) for f in stats(compiled).explanations]
    header["artifact"] = {"bytes": len(artifact), "sha256": hashlib.sha256(artifact).hexdigest(),
                          "kinds": {str(k): len(v) for k, v in getattr(info, "artifacts", {}).items()}}
    data = MAGIC + json.dumps({"format": FORMAT, **header}, separators=(",", ":")).encode() + b"\n" + artifact
    write_file(path, data, inputs=_inputs(stats(compiled).policy))
    return header


def load_cache(path: str | os.PathLike, compiled: Any, on_mismatch: str = "raise") -> CacheLoad:
    """Warms torch's caches from a file ``save_cache`` wrote, when its header matches
    ``compiled`` (a ``guardpolicy.compile`` result, best not yet called) in this process:
    the next compiles of the same frames reuse Inductor's saved work. When a compared field
    differs, ``on_mismatch="raise"`` raises ``CacheMismatch`` (one line naming the first
    difference); ``"recompile"`` warns (a ``RuntimeWarning``) and loads nothing, so the
    object compiles anew. Raises ``CacheFileError`` for a missing, truncated, foreign or
    corrupt file, TypeError for another ``compiled``, ValueError for another
    ``on_mismatch``."""
    import torch

    from ..logs import log

    if on_mismatch not in ON_MISMATCH:
        raise ValueError(f"on_mismatch must be one of {', '.join(map(repr, ON_MISMATCH))}, not {on_mismatch!r}")
    saved, artifact = read_cache_file(path)
    differences = compare(saved, header_of(compiled))
    if differences:
        message = mismatch_line(path, differences)
        if on_mismatch == "raise":
            raise CacheMismatch(message, differences)
        message += "; ignored: this process compiles anew"
        log.warning("%s", message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return CacheLoad(os.fspath(path), False, {}, message)
    try:
        info = torch.compiler.load_cache_artifacts(artifact)
    except Exception as error:  # noqa: BLE001 - torch's loader on bytes it did not accept
        raise CacheFileError(f"{os.fspath(path)}: torch could not load its artifact "
                             f"({type(error).__name__}: {_first_line(error)})") from None
    kinds = {str(k): len(v) for k, v in getattr(info, "artifacts", {}).items()} if info is not None else {}
    return CacheLoad(os.fspath(path), True, kinds)


def read_cache_file(path: str | os.PathLike) -> tuple[dict[str, Any], bytes]:
    """``(header, artifact)`` of a cache file, checked whole. Raises ``CacheFileError`` (one
    line, the path first) for a file that cannot be read, is not one, or is cut or corrupt."""
    where = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise CacheFileError(f"{where}: cannot read it: {error.strerror or error}") from None
    if not data.startswith(MAGIC):
        if data and MAGIC.startswith(data):
            raise CacheFileError(f"{where}: truncated: the file ends inside its first line")
        raise CacheFileError(f"{where}: not a guardpolicy cache file (it starts with {data[:16]!r}; "
                             "guardpolicy.save_cache writes one)")
    end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER)
    if end < 0:
        raise CacheFileError(f"{where}: truncated: the file ends inside its header")
    try:
        header = json.loads(data[len(MAGIC):end])
    except ValueError as error:
        raise CacheFileError(f"{where}: corrupt header ({error})") from None
    return _checked(where, header), _artifact(where, header, data[end + 1:])


def _checked(where: str, header: Any) -> dict[str, Any]:
    if not isinstance(header, dict) or not isinstance(header.get("artifact"), dict):
        raise CacheFileError(f"{where}: corrupt header (no artifact record)")
    if header.get("format") != FORMAT:
        raise CacheFileError(f"{where}: written in cache format {header.get('format')!r}; this guardpolicy reads "
                             f"format {FORMAT}")
    return header


def _artifact(where: str, header: dict[str, Any], artifact: bytes) -> bytes:
    announced = header["artifact"].get("bytes")
    if announced != len(artifact):
        raise CacheFileError(f"{where}: truncated: its header announces {announced} bytes of torch's artifact, "
                             f"the file holds {len(artifact)}")
    if hashlib.sha256(artifact).hexdigest() != header["artifact"].get("sha256"):
        raise CacheFileError(f"{where}: corrupt: torch's artifact does not match the SHA-256 its header records")
    return artifact


def compare(saved: dict[str, Any], now: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(field, saved, now)`` for each compared field of two headers that differs, in order:
    torch, guardpolicy, the policy, the compile settings, the config lines, Dynamo's knobs."""
    before = _fields(saved)
    return [(field, before.get(field), value) for field, value in _fields(now).items() if before.get(field) != value]


def _fields(header: dict[str, Any]) -> dict[str, Any]:
    """A header's compared fields, flat, named as a mismatch line names them."""
    from ..torch_internals import DYNAMO_CONFIG

    policy = header.get("policy") or {}
    flat: dict[str, Any] = {"torch": header.get("torch"), "guardpolicy": header.get("guardpolicy"),
                            "policy": f"{policy.get('name')!r} (program {policy.get('program')})",
                            "policy parameters": policy.get("params"), "plugins": policy.get("plugins")}
    for name, value in (header.get("compile") or {}).items():
        flat[f"torch.compile {name}"] = value
    for name, value in (header.get("config lines") or {}).items():
        flat[f"config line {name}"] = value
    for name, value in (header.get("dynamo") or {}).items():
        flat[f"{DYNAMO_CONFIG}.{name}"] = value
    return flat


def mismatch_line(path: str | os.PathLike, differences: list[tuple[str, Any, Any]]) -> str:
    """One line naming the first difference (and how many more there are)."""
    field, saved, now = differences[0]
    more = f" (and {len(differences) - 1} more: {', '.join(d[0] for d in differences[1:4])}" + \
        (", ..." if len(differences) > 4 else "") + ")" if len(differences) > 1 else ""
    return f"{os.fspath(path)} was saved under {field} {_shown(saved)}; this process has {_shown(now)}{more}"


def _inputs(policy: Any) -> list[str]:
    """The files a cache file must never replace: the policy's own and its plugins'."""
    files = [getattr(policy, "source_file", "") or ""]
    origin = getattr(policy, "origin", None)
    files += [p for p, _ in getattr(origin, "plugins", ()) if p != "builtin"]
    return [f for f in files if f and os.path.exists(f)]


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)


def _shown(value: Any) -> str:
    return "(none)" if value is None else str(value)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0]
