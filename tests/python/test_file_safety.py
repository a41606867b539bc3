"""Files a user names are neither destroyed nor waited on forever (issue 17, items 2, 3, 5).

Writers (``guardpolicy compile -o``, ``fmt``, ``Policy.save``, ``capture -o``, the tools'
``--json``) refuse a FIFO, a device, a read-only file and their own input, leaving it as it
was; readers (plugins, policies, snapshots) refuse a FIFO instead of blocking on it; a
compressed snapshot is capped once inflated. Each command runs in a subprocess with a
timeout, so a hang fails the test instead of the suite.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import guardpolicy as gp
from guardpolicy.tools.capture import Snapshot

CLI = Path(sys.executable).parent / "guardpolicy"
POLICY = "guardpolicy 1\nunsafe policy p { drop when is_global }\n"
TIMEOUT = 60


def run(*args, cwd=None):
    return subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)


def run_python(code: str, *args):
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "p.gpol"
    path.write_text(POLICY)
    return path


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def read_only(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o444)
    return path


# --------------------------------------------------------------------------- compile -o


def test_compile_onto_a_fifo_is_refused_and_the_fifo_stays(src, fifo):
    r = run("compile", src, "-o", fifo)
    assert r.returncode == 2
    assert r.stderr == f"guardpolicy: cannot write `{fifo}`: it is a FIFO, not a regular file; nothing was written\n"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_compile_onto_its_input_is_refused(src):
    r = run("compile", src, "-o", src)
    assert r.returncode == 2
    assert f"cannot write `{src}`: it is the input file `{src}`; nothing was written" in r.stderr
    assert src.read_text() == POLICY


def test_compile_onto_a_read_only_file_is_refused(src, tmp_path):
    out = read_only(tmp_path / "out.gpolc", "old")
    r = run("compile", src, "-o", out)
    assert r.returncode == 2
    assert r.stderr == f"guardpolicy: cannot write `{out}`: it is read-only; nothing was written\n"
    assert out.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["out.gpolc", "p.gpol"]  # no temporary file left


def test_fmt_leaves_a_read_only_file_alone(tmp_path):
    messy = "guardpolicy 1\nunsafe policy p {   drop when is_global }\n"
    path = read_only(tmp_path / "p.gpol", messy)
    r = run("fmt", path)
    assert r.returncode == 2
    assert "it is read-only; it was left as it was" in r.stderr
    assert path.read_text() == messy


# --------------------------------------------------------------------------- Policy.save


def test_policy_save_refuses_what_compile_refuses(src, fifo, tmp_path):
    policy = gp.load(src)
    with pytest.raises(OSError) as info:
        policy.save(fifo)
    assert info.value.strerror == "it is a FIFO, not a regular file"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    with pytest.raises(FileExistsError) as info:
        policy.save(src)  # the policy's own source
    assert info.value.strerror == f"it is the input file `{src}`"
    assert src.read_text() == POLICY
    out = read_only(tmp_path / "ro.gpolc", "old")
    with pytest.raises(PermissionError, match="it is read-only"):
        policy.save(out)
    assert out.read_text() == "old"
    with pytest.raises(IsADirectoryError):
        policy.save(tmp_path)
    policy.save(tmp_path / "ok.gpolc")
    assert gp.load(tmp_path / "ok.gpolc").rules == policy.rules


def test_snapshot_to_json_refuses_a_fifo(fifo):
    r = run_python("import sys\nfrom guardpolicy.tools.capture import Snapshot\n"
                   "Snapshot(frames=[], torch='', schema_version=1).to_json(sys.argv[1])\n", fifo)
    assert r.returncode == 1
    assert "OSError: [Errno 22] it is a FIFO, not a regular file" in r.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_capture_refuses_to_write_over_its_script_before_running_it(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    r = subprocess.run([sys.executable, "-m", "guardpolicy", "capture", str(script), "-o", str(script)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 2
    assert f"cannot write {script}: it is the input file `{script}`" in r.stderr
    assert script.read_text() == "open(__file__ + '.ran', 'w').close()\n"
    assert not (tmp_path / "s.py.ran").exists()


# --------------------------------------------------------------------------- readers


def test_plugin_fifo_is_refused_without_hanging(fifo):
    r = run("filters", "--plugin", fifo)
    assert r.returncode == 2
    assert r.stderr == f"guardpolicy: error: {fifo}: cannot load the plugin: it is a FIFO, not a regular file\n"
    r = run_python("import sys, guardpolicy as gp\n"
                   "try:\n    gp.load_plugin(sys.argv[1])\nexcept gp.PluginError as e:\n    print(e)\n", fifo)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{fifo}: cannot load the plugin: it is a FIFO, not a regular file\n"


@pytest.mark.parametrize("command", [["lint"], ["compile"], ["check", "--guards", "x.json"]])
def test_policy_fifo_is_refused_without_hanging(fifo, command):
    r = run(command[0], fifo, *command[1:])
    assert r.returncode == 2
    assert f"cannot read `{fifo}`: is a FIFO, not a regular file" in r.stderr


def test_snapshot_fifo_and_schema_fifo_are_refused_without_hanging(src, fifo):
    r = run("check", src, "--guards", fifo)
    assert r.returncode == 2
    assert f"cannot read guard snapshot `{fifo}`: is a FIFO, not a regular file" in r.stderr
    r = run("lint", "--schema", fifo, src)
    assert r.returncode == 2
    assert f"{fifo}: cannot read the schema file: is a FIFO, not a regular file" in r.stderr
    r = run_python("import sys\nfrom guardpolicy.tools.capture import Snapshot\nSnapshot.from_json(sys.argv[1])\n", fifo)
    assert r.returncode == 1
    assert "OSError: [Errno 22] is a FIFO, not a regular file" in r.stderr


# --------------------------------------------------------------------------- snapshot cap

LIMIT = 128 << 20  # snapshot.h: kMaxSnapshotBytes


def gzip_bomb(path: Path, inflated: int) -> Path:
    """`inflated` bytes of valid JSON ({"rows": []} padded with spaces), gzip-compressed to
    about a thousandth of that, written in pieces (never all in memory)."""
    head, tail = b'{"rows": [', b"]}"
    z = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (1 << 20)
    with open(path, "wb") as f:
        f.write(z.compress(head))
        left = inflated - len(head) - len(tail)
        while left > 0:
            f.write(z.compress(chunk[:min(left, len(chunk))]))
            left -= len(chunk)
        f.write(z.compress(tail) + z.flush())
    return path


def test_a_compressed_snapshot_is_capped_once_inflated(src, tmp_path):
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", LIMIT + 1)
    assert bomb.stat().st_size < 1 << 20
    r = run("check", src, "--guards", bomb)
    assert r.returncode == 2
    assert f"cannot read guard snapshot `{bomb}`: inflates to over {LIMIT} bytes, the limit for a snapshot" in r.stderr
    with pytest.raises(OSError, match=f"inflates to over {LIMIT} bytes") as info:
        Snapshot.from_json(bomb)
    assert info.value.errno == 27  # EFBIG


def test_from_json_reads_gzip_by_its_magic(tmp_path):
    """As `guardpolicy check` does: a compressed snapshot need not be named .gz."""
    snap = Snapshot(frames=[{"frame": 0, "code": "f", "compile_id": "0/0", "entries": [{"name": "x"}]}],
                    torch="2.13.0", schema_version=1)
    snap.to_json(tmp_path / "s.json.gz")
    (tmp_path / "s.json.gz").rename(tmp_path / "renamed.json")
    assert Snapshot.from_json(tmp_path / "renamed.json").rows() == [{"name": "x"}]
