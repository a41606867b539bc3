"""One home for progress (``guardpolicy.tools.common.progress``): tqdm bars on a terminal, one line per
phase (or nothing) elsewhere."""

import os
import pty
import subprocess
import sys
import threading

SNIPPET = """
from guardpolicy.tools.common.progress import Progress, for_terminal
p = Progress("tool", lines=True)
for i in range(1, 4):
    p.step("mlp: timing round", i, 3)
p("mlp · policy · 2/5 self.blocks")
p("mlp · policy · 3/5 self.norm")
p("gpt2, eager: compiling")
p.done()
print("callback:", for_terminal("audit") is not None)
"""


def run(tty: bool, argv: list[str] | None = None, cwd=None) -> tuple[str, str]:
    argv = argv or [sys.executable, "-c", SNIPPET]
    if not tty:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout, proc.stderr
    leader, follower = pty.openpty()
    chunks = []

    def read():
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal's other end closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=follower, text=True, cwd=cwd)
    os.close(follower)
    out = proc.communicate(timeout=120)[0]
    reader.join(30)
    os.close(leader)
    assert proc.returncode == 0
    return out, b"".join(chunks).decode("utf-8", "replace")


def test_off_a_terminal_one_line_per_phase_and_no_callback():
    out, err = run(tty=False)
    assert err.splitlines() == ["tool: mlp: timing round 1/3", "tool: mlp · policy · 2/5 self.blocks",
                                "tool: gpt2, eager: compiling"]
    assert "callback: False" in out  # audit and suggest show nothing off a terminal


def test_on_a_terminal_tqdm_bars_with_the_count():
    out, err = run(tty=True)
    assert "callback: True" in out
    assert "tool: mlp: timing round: 100%" in err and "3/3" in err  # tqdm's bar
    assert "tool: mlp · policy" in err and "3/5" in err and "self.norm" in err
    assert "tool: gpt2, eager: compiling" in err  # a message without a count: one written line


SCRIPT = """import torch
for k in (1, 2):
    torch.compile(lambda x: x + k, backend="eager")(torch.ones(2))
"""


def test_capture_counts_the_compiled_frames_on_a_terminal_only(tmp_path):
    (tmp_path / "two.py").write_text(SCRIPT)
    argv = [sys.executable, "-m", "guardpolicy", "capture", "two.py", "-o", "g.json"]
    out, err = run(True, argv, cwd=tmp_path)
    assert "captured 2 frames" in out
    assert "capture: frames compiled: 2" in err and "<lambda>" in err  # tqdm's count, the frame's code
    out, err = run(False, argv[:-1] + ["h.json"], cwd=tmp_path)
    assert "captured 2 frames" in out and "frames compiled" not in err
