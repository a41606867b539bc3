"""``gp.save_cache`` / ``gp.load_cache`` (docs/serving.md): torch's mega-cache saved with a header
in one process and loaded in another (Inductor, each process with a fresh Inductor cache
directory, so a hit comes from the file); the warm start keeps watching (a change after it is
caught); a changed policy, a changed torch config and another torch version refused in one
line; truncated, foreign and corrupt files refused in one line, never a crash."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import guardpolicy as gp
from guardpolicy.runtime.serving import cache_file

SCRIPT = textwrap.dedent("""
    import dataclasses, json, os, sys, time
    import torch
    import guardpolicy as gp
    from torch._dynamo.utils import counters

    for plugin, config in json.loads(os.environ["PLUGINS"]):  # those of the test's process: same fingerprint
        gp.load_plugin(plugin, config=config)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b, self.use_a = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), True

        def forward(self, x):
            return self.a(x) if self.use_a else self.b(x)

    mode, path, policy = sys.argv[1:4]
    out, net, x = {}, Net().eval(), torch.randn(2, 4)
    if mode == "save":  # the eager backend first: torch's mega-cache holds nothing for it
        eager = gp.compile(Net(), policy, backend="eager")
        eager(x)
        try:
            gp.save_cache(path, eager)
        except ValueError as e:
            out["eager"] = str(e)
    compiled = gp.compile(net, policy)  # Inductor
    if mode == "load":
        out["load"] = dataclasses.asdict(gp.load_cache(path, compiled))
    start = time.perf_counter()
    with torch.no_grad():
        compiled(x)
    out["first_output_s"] = time.perf_counter() - start
    out["inductor"] = dict(counters["inductor"])
    if mode == "save":
        out["header"] = gp.save_cache(path, compiled)
        try:
            gp.save_cache(policy, compiled)
        except OSError as e:
            out["over_input"] = type(e).__name__
    else:
        net.use_a = False  # a change after the warm start: watched, so seen
        with torch.no_grad():
            out["caught"] = bool(torch.equal(compiled(x), net(x)))
        out["compiles"] = gp.stats(compiled).compiles
    print(json.dumps(out))
""")


def _run(tmp: Path, mode: str, path: Path, policy: Path) -> dict:
    from guardpolicy.api.registry import loaded_plugins

    plugins = [list(p) for p in loaded_plugins() if p[0] != "builtin"]  # other tests may have loaded some
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / f"inductor_{mode}"), "PLUGINS": json.dumps(plugins)}
    proc = subprocess.run([sys.executable, str(tmp / "serve.py"), mode, str(path), str(policy)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A cache file saved by one process and loaded by another: ``(path, policy, save, load)``."""
    tmp = tmp_path_factory.mktemp("serve_cache")
    (tmp / "serve.py").write_text(SCRIPT)
    policy = tmp / "watch.gpol"
    policy.write_text(gp.std_policy_path("watch_state").read_text())
    path = tmp / "model.gpcache"
    save = _run(tmp, "save", path, policy)
    load = _run(tmp, "load", path, policy)
    return path, policy, save, load


def test_a_saved_compile_warms_a_fresh_process_and_keeps_watching(saved):
    path, policy, save, load = saved
    assert "holds nothing to save" in save["eager"] and "'eager'" in save["eager"]
    assert save["inductor"].get("fxgraph_cache_miss", 0) >= 1
    assert save["over_input"] == "FileExistsError"  # never over an input: the policy file is as it was
    assert policy.read_text() == gp.std_policy_path("watch_state").read_text()
    assert save["header"]["policy"]["name"] == "watch_state" and save["header"]["compile"]["backend"] == "inductor"
    assert load["load"]["loaded"] and load["load"]["artifacts"].get("inductor", 0) >= 1
    assert load["inductor"].get("fxgraph_cache_hit", 0) >= 1 and not load["inductor"].get("fxgraph_cache_miss")
    assert load["caught"] and load["compiles"] == 2
    print(f"time to first output: cold {save['first_output_s']:.2f} s, warm {load['first_output_s']:.2f} s")


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and text
    return text


def _uncalled(policy) -> torch.nn.Module:
    return gp.compile(torch.nn.Linear(4, 4), policy)  # Inductor, as the file was saved; never called


def test_another_policy_or_torch_config_is_refused_in_one_line(saved):
    path, policy, _, _ = saved
    with pytest.raises(gp.CacheMismatch) as refused:
        gp.load_cache(path, _uncalled(gp.load_std("skip_guard_on_all_nn_modules")))
    line = _one_line(refused.value)
    assert line.startswith(f"{path} was saved under policy 'watch_state' (program ")
    assert "this process has 'skip_guard_on_all_nn_modules'" in line
    with torch._dynamo.config.patch(specialize_float=True):
        with pytest.raises(gp.CacheMismatch, match=r"under torch\._dynamo\.config\.specialize_float False; "
                                                   r"this process has True$") as refused:
            gp.load_cache(path, _uncalled(str(policy)))
    assert refused.value.differences == [("torch._dynamo.config.specialize_float", False, True)]
    with pytest.warns(RuntimeWarning, match="ignored: this process compiles anew"):
        result = gp.load_cache(path, _uncalled(gp.load_std("skip_guard_on_all_nn_modules")), on_mismatch="recompile")
    assert not result.loaded and "policy 'watch_state'" in result.mismatch
    assert gp.load_cache(path, _uncalled(str(policy))).loaded  # the same settings: loaded


def _rewritten(path: Path, out: Path, **changes) -> Path:
    header, artifact = cache_file.read_cache_file(path)
    header.update(changes)
    out.write_bytes(cache_file.MAGIC + json.dumps(header).encode() + b"\n" + artifact)
    return out


def test_another_torch_version_is_refused(saved, tmp_path):
    path, policy, _, _ = saved
    other = _rewritten(path, tmp_path / "other.gpcache", torch="2.14.1")
    with pytest.raises(gp.CacheMismatch, match=rf"under torch 2\.14\.1; this process has {re.escape(torch.__version__)}$"):
        gp.load_cache(other, _uncalled(str(policy)))


@pytest.mark.parametrize("damage, said", [
    (lambda data: data[:-100], "truncated: its header announces"),
    (lambda data: data[:40], "truncated: the file ends inside its header"),
    (lambda data: data[:8], "truncated: the file ends inside its first line"),
    (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "corrupt: torch's artifact does not match"),
    (lambda data: data.split(b"\n", 2)[2], "not a guardpolicy cache file"),  # torch's own artifact bytes
    (lambda data: b"", "not a guardpolicy cache file"),
    (lambda data: b"guardpolicy-cache 1\n{not json\n", "corrupt header"),
    (lambda data: b"guardpolicy-cache 1\n" + json.dumps({"format": 9, "artifact": {}}).encode() + b"\n",
     "written in cache format 9"),
], ids=["artifact-cut", "header-cut", "magic-cut", "bit-flip", "foreign", "empty", "bad-json", "format"])
def test_a_damaged_or_foreign_file_is_refused_in_one_line(saved, tmp_path, damage, said):
    path, policy, _, _ = saved
    bad = tmp_path / "bad.gpcache"
    bad.write_bytes(damage(path.read_bytes()))
    with pytest.raises(gp.CacheFileError) as refused:
        gp.load_cache(bad, _uncalled(str(policy)))
    assert said in _one_line(refused.value) and str(refused.value).startswith(str(bad))
    with pytest.raises(gp.CacheFileError, match="cannot read it"):
        gp.load_cache(tmp_path / "missing.gpcache", _uncalled(str(policy)))
