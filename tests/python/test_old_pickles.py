"""Objects pickled by guardpolicy before its layers (``tests/python/data/pickles_before_layers.pkl``,
written by the flat-module package at commit ffe5b41: a ``Policy``, a ``GuardPolicyModule``
with verify, one with direct dispatch, and a ``CompileStats``) load in a fresh process, and the
modules keep working: outputs equal eager's, verify still samples, dispatch still goes direct.
The pickle names ``guardpolicy.policy``, ``guardpolicy.runtime``, ``guardpolicy.ranks``,
``guardpolicy.frames`` and ``guardpolicy.dispatch`` (``guardpolicy/moved.py``)."""

from __future__ import annotations

import pickletools
import subprocess
import sys
from pathlib import Path

PICKLES = Path(__file__).with_name("data") / "pickles_before_layers.pkl"

#: One module per process: both wrap an ``nn.Sequential``, whose ``forward`` code object holds
#: torch's cache entries, so a second module in the same process would reuse the first's.
PROGRAM = f"""
import pickle, sys, torch, guardpolicy as gp
objs = pickle.loads(open({str(PICKLES)!r}, "rb").read())
x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
m = objs[sys.argv[1]]
stats_line = f"stats {{type(objs['stats']).__module__}} {{objs['stats'].calls}} {{objs['stats'] is gp.stats(m)}}"
with torch.no_grad():
    for _ in range(12):
        torch.testing.assert_close(m(x), m._orig_mod(x))
st = gp.stats(m)
print(type(m).__name__, st.calls, st.compiles, st.verify_every, st.verified_calls,
      st.dispatch.state if st.dispatch else None)
print("policy", type(objs["policy"]).__module__, objs["policy"].name)
print(stats_line)
"""


def old_module_names() -> set[str]:
    names = set()
    for op, arg, _ in pickletools.genops(PICKLES.read_bytes()):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE") and isinstance(arg, str) and arg.startswith("guardpolicy."):
            names.add(arg)
    return names


def test_the_pickle_names_the_old_flat_modules():
    assert {"guardpolicy.policy", "guardpolicy.runtime", "guardpolicy.ranks", "guardpolicy.frames",
            "guardpolicy.dispatch"} <= old_module_names()


def run(key: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", PROGRAM, key], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    same = key == "verified_module"  # the pickled stats are that module's (one object, pickled once)
    assert lines[1:] == ["policy guardpolicy.api.policy skip_guard_on_all_nn_modules",
                         f"stats guardpolicy.runtime.stats 4 {same}"]
    return lines[0].split()


def test_an_old_verified_module_loads_in_a_fresh_process_and_verifies():
    # 4 calls before pickling, 12 after; 1 compile then, 1 now; calls 3 (then), 6, 9, 12, 15 verified
    assert run("verified_module") == ["GuardPolicyModule", "16", "2", "3", "5", "None"]


def test_an_old_direct_dispatch_module_loads_in_a_fresh_process_and_goes_direct():
    assert run("direct_module") == ["GuardPolicyModule", "16", "1", "0", "0", "direct"]
