"""The sections the bench/ scripts write into bench/DETAILS.md: each script's ``render``, fed
a small fixed run, gives its section in DETAILS.md's layout (markers, heading, intro line
with date and machine, unit-labelled columns, one verdict line); each script's markers are in
DETAILS.md, and bench/RESULTS.md (the summary, kept by hand) holds only the ``zoo`` markers. No
benchmark runs here and nothing compiles: only the rendering of numbers."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import bench_dispatch  # noqa: E402
import bench_ranks  # noqa: E402
import bench_runtime  # noqa: E402
import bench_suggest  # noqa: E402
import bench_verify  # noqa: E402
import compile_share  # noqa: E402
import make_results  # noqa: E402
import results_section  # noqa: E402

DETAILS = BENCH / "DETAILS.md"
RESULTS = BENCH / "RESULTS.md"
# The marked section at the end of RESULTS.md that bench/bench_zoo.py writes (issue 35).
ZOO_BEGIN = "<!-- zoo: begin (bench/bench_zoo.py writes this section) -->"
ZOO_END = "<!-- zoo: end -->"
MARKERS = [(make_results.BEGIN, make_results.END), (compile_share.BEGIN, compile_share.END),
           (bench_runtime.BEGIN, bench_runtime.END), (bench_dispatch.BEGIN, bench_dispatch.END),
           (bench_verify.BEGIN, bench_verify.END), (bench_ranks.BEGIN, bench_ranks.END),
           (bench_suggest.BEGIN, bench_suggest.END), (bench_runtime.RECOVERY_BEGIN, bench_runtime.RECOVERY_END)]

MACHINE = "Test CPU (x86_64), 2 CPUs, Python 3.11.7, torch 2.13.0+cpu, 1 torch thread"
PERCALL = "| variant | median (µs/call) | p90 (µs/call) | ratio vs no filter (×) |"


def row(variant, median, twin=None, spread=0.02, minus=None):
    """One of ``latency.summarize``'s rows: ``twin`` its ratio vs the torch way (None: no twin)."""
    return {"variant": variant, "median_us": median, "p90_us": 1.5 * median, "block_mean_us": 1.1 * median,
            "vs_no_filter": median / 100.0, "vs_torch_way": twin, "minus_torch_way_us": minus, "copy_spread": spread}


def lines_of(text, begin, end):
    assert text.startswith(begin + "\n") and text.endswith("\n" + end + "\n")
    return text.splitlines()


def test_runtime_section():
    tables = {"mlp, eager": [row("eager", 120.0), row("no filter", 100.0),
                             row("zero-guard floor (all +ift +stance) (torch)", 80.0),
                             row("zero-guard floor (all +ift +stance) (gp.compile)", 84.0, twin=1.05, spread=0.10)]}
    trivial = [row("torch.compile", 40.0, spread=None), row("gp.compile", 41.5, spread=None, minus=1.5)]
    text = bench_runtime.render({"date": "2026-01-02", "machine": MACHINE, "calls": 400, "block": 20, "copies": 2,
                                 "tables": tables, "trivial": trivial, "trivial_calls": 4000, "trivial_block": 200})
    lines = lines_of(text, bench_runtime.BEGIN, bench_runtime.END)
    assert lines[1] == "## gp.compile against the torch way, per call (`bench/bench_runtime.py`)"
    assert f"Recorded 2026-01-02 on {MACHINE};" in lines
    assert "400 timed calls per variant (pooled from 2 builds of it), interleaved in blocks of 20." in lines
    assert "**mlp, eager** (builds of one variant up to 10.0% apart, 2.0% in the median variant)" in lines
    assert PERCALL + " ratio vs torch way (×) |" in lines
    assert "| zero-guard floor (all + free tensors + stance) (gp.compile) | 84.0 | 126.0 | 0.84 | 1.050 |" in lines
    assert "| torch.compile | 40.00 | 60.00 |  |" in lines
    assert lines[-2].startswith("Targets: every gp.compile variant at most 1.02× its torch way: **not met** "
                                "(largest 1.050, zero-guard floor on mlp, eager); ")
    assert lines[-2].endswith("at most 1 µs per call: **not met** (largest +1.50 µs).")


def test_recovery_section():
    rows = [row("eager", 120.0), row("no filter", 100.0), row("before (torch)", 90.0),
            row("before (gp.compile)", 90.0, twin=1.0), row("after a recompile (torch)", 90.0),
            row("after a recovery (gp.compile)", 91.8, twin=1.02)]
    text = bench_runtime.render_recovery({"date": "2026-01-02", "machine": MACHINE, "calls": 2000, "block": 20,
                                          "copies": 1, "tables": {"mlp, eager": rows}})
    lines = lines_of(text, bench_runtime.RECOVERY_BEGIN, bench_runtime.RECOVERY_END)
    assert "2000 timed calls per variant, interleaved in blocks of 20." in lines
    assert "**mlp, eager** (builds of one variant up to 2.0% apart, 2.0% in the median variant)" in lines
    assert lines[-2] == ("Target: every gp.compile row at most 1.02× its torch way: **met** on mlp, eager (largest "
                         "1.020); gp.compile after a recovery vs before: 1.020× (eager).")


def test_dispatch_section_with_instructions():
    base = bench_dispatch.TORCH_WAY
    direct = "direct: skip_guard_on_all_nn_modules, verify=100 (gp.compile)"
    tight = "direct: keep_tensor_guards, verify=100 (gp.compile)"
    tables, instructions = {}, {}
    for model, wall in (("mlp", 0.9), ("gpt2", 1.1)):
        key = f"{model}, inductor"
        tables[key] = [row("no filter", 100.0), row(base, 80.0), row(direct, 80 * wall, twin=wall),
                       row(tight, 70.0, twin=0.875)]
        instructions[key] = {"no filter": 1_100_000, base: 1_000_000, direct: 1_000_000 * wall, tight: 900_000}
    text = bench_dispatch.render({"date": "2026-01-02", "machine": MACHINE, "calls": 2000, "block": 20, "copies": 2,
                                  "instruction_calls": 200, "tables": tables, "instructions": instructions})
    lines = lines_of(text, bench_dispatch.BEGIN, bench_dispatch.END)
    assert lines[1] == "## Direct dispatch, per call (`bench/bench_dispatch.py`)"
    assert lines[3].startswith("µs and instructions per call of")
    assert "200 calls per variant under callgrind." in lines
    assert (PERCALL + " ratio vs skip_all_guards + stance (×) | instructions per call | instructions ratio vs "
            "skip_all_guards + stance (×) |") in lines
    assert "| skip_all_guards + stance (torch) | 80.0 | 120.0 | 0.80 | | 1,000,000 | 1.000 |" in lines
    assert lines[-3] == ("Targets (inductor, ratio vs skip_all_guards + stance), skip_guard_on_all_nn_modules at most "
                         "1.0×: **met** on mlp (0.90× wall clock, 0.90× instructions), **not met** on gpt2 (1.10×, "
                         "1.10×); keep_tensor_guards at most 0.85×: **not met** (mlp 0.88×, 0.90×; gpt2 0.88×, 0.90×).")
    assert lines[-2] == ""


def test_verify_section():
    policy = "skip_guard_on_all_nn_modules"
    rows = [row("eager", 120.0), row("no filter", 100.0), row(policy, 90.0),
            row(f"{policy}, verify=100", 91.0, twin=91 / 90, spread=0.05)]
    text = bench_verify.render({
        "date": "2026-01-02", "machine": MACHINE, "policy": policy, "calls": 8000, "block": 100, "copies": 4,
        "instruction_calls": 200, "tables": {"mlp, eager": rows}, "paired": [("mlp, eager", 95.0, 96.0, 1.0105)],
        "instructions": [("mlp, eager", 800_000.0, 804_000.0, 1.005)], "cost_backend": "eager",
        "costs": [{"model": "mlp", "offered": 258, "dropped": 235, "verified_call_us": 42.6, "bind_us": 2.0,
                   "kept_check_us": 4.7, "full_check_us": 7.8}]})
    lines = lines_of(text, bench_verify.BEGIN, bench_verify.END)
    assert lines[1] == "## What verify costs, per call (`bench/bench_verify.py`)"
    assert "every offered guard. Recorded 2026-01-02 on Test CPU (x86_64), 2 CPUs, Python 3.11.7, torch 2.13.0+cpu," \
        in lines
    assert "| measure | eager | no filter | without verify | verify=100 | ratio verify=100 vs without (×) |" in lines
    assert "| median (µs/call) | 120.0 | 100.0 | 90.0 | 91.0 | 1.011 |" in lines
    assert "| amortized, separately built objects (µs/call) | | | 99.0 | 100.1 | 1.011 |" in lines
    assert "| instructions per call | | | 800,000 | 804,000 | 1.0050 |" in lines
    assert "| mlp | 258 / 235 | 42.6 | 2.0 | 4.7 | 7.8 |" in lines
    assert lines[-2] == ("Target: verify=100 at most 1.02× without it, per call amortized: instructions **met** "
                         "(largest 1.0050, mlp, eager); same compiled objects **met** (largest 1.0105, mlp, eager); "
                         "separately built objects **met** (largest 1.011, mlp, eager, builds up to 5.0% apart).")


def test_ranks_section():
    one = {"model": "mlp", "backend": "eager", "in_call_agree_us": 492.6, "plain_us": 301.2, "verify_us": 297.8,
           "ratio": 0.989, "spread": 0.114, "same_objects_ratio": 1.036, "same_objects_ci": 0.018,
           "median_ratio": 1.029, "median_interval": (1.024, 1.034), "unsampled_ratio": 1.018,
           "verified_extra_us": 792.0, "cpu_ratio": 1.025}
    text = bench_ranks.render({"date": "2026-01-02", "machine": "Test CPU (x86_64), 2 CPUs", "calls": 4000,
                               "block": 200, "copies": 2, "paired": 300, "agreements": 2000,
                               "results": {2: [{"agree_us": 153.0, "per_rank_us": 369.9, "rows": [one]}]}})
    lines = lines_of(text, bench_ranks.BEGIN, bench_ranks.END)
    assert "int64). Recorded 2026-01-02 on Test CPU (x86_64), 2 CPUs; 4000 calls per variant" in lines
    assert "| 2 | 153.0 | 369.9 |" in lines
    assert "**2 ranks**" in lines
    assert ("| mlp, eager | 492.6 | 301.2 | 297.8 | 0.989 | 11.4% | 1.036 ±0.018 | 1.029 [1.024–1.034] | 1.018 | 792 "
            "| 1.025 |") in lines
    assert lines[-2].startswith("Target: verify=100 at most 1.03× without it on every rank. Same objects: median call "
                                "**met** (largest 1.029, highest interval end 1.034)")
    assert "mean **not met** (largest 1.036 ± 0.018, an interval that holds 1.03: the mean does not decide)" in lines[-2]


def test_suggest_section():
    rows = [row("eager", 120.0, spread=None), row("no filter", 100.0, spread=None),
            row("suggested_mlp (gp.compile)", 90.0, spread=None)]
    run = {"key": "mlp, eager", "policy": "suggested_mlp", "dropped": 43, "offered": 258,
           "counts": {"dangerous": 110, "caught": 1, "harmless": 45, "not mutated": 102}, "audit_s": 1.2, "rows": rows}
    text = bench_suggest.render({"date": "2026-01-02", "machine": MACHINE, "calls": 400, "block": 20, "runs": [run]})
    lines = lines_of(text, bench_suggest.BEGIN, bench_suggest.END)
    assert lines[1] == "## The suggested policy, per call (`bench/bench_suggest.py`)"
    assert "gives the audit's counts of guards: dangerous, caught, harmless, not mutated, and the time it took." in lines
    assert ("**mlp, eager**: suggested_mlp drops 43 of 258 guards (audit: dangerous 110, caught 1, harmless 45, "
            "not mutated 102; 1 s)") in lines
    assert PERCALL in lines and "| suggested_mlp (gp.compile) | 90.0 | 135.0 | 0.90 |" in lines
    assert lines[-2] == "Verdict: information only, no current target."


def test_compile_share_section():
    def result(policy, share):
        return {"model": "mlp", "policy": policy, "frames": 1, "entries": 258, "compile_ms": 250.0,
                "filter_ms": 250 * share, "share": share}

    after = {"date": "2026-01-02", "machine": "Test CPU, 2 CPUs", "repeats": 3, "tree": "",
             "results": [result("skip_all_guards", 0.0002), result("paths", 0.004)]}
    before = {**after, "tree": "main at abc1234", "results": [result("skip_all_guards", 0.0001)]}
    text = compile_share.render(after, before)
    lines = lines_of(text, compile_share.BEGIN, compile_share.END)
    assert lines[1] == "## Filter share of compile time (`bench/compile_share.py`)"
    assert "2026-01-02 on Test CPU, 2 CPUs." in lines
    assert "`-`: `paths` was not in the before run." in lines
    assert "**mlp** (1 frame, 258 guard entries)" in lines
    assert ("| policy | compile before (ms) | compile after (ms) | filter before (ms) | filter after (ms) | share before "
            "| share after |") in lines
    assert "| paths | - | 250 | - | 1.000 | - | 0.400% |" in lines
    assert lines[-2] == "Target: every share at most 1%: **met** (largest 0.400%, paths on mlp; before: 0.010%)."


def test_write_section_keeps_what_follows(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("intro\n<!-- x: begin -->\nold\n<!-- x: end -->\n\n## next\n", encoding="utf-8")
    results_section.write_section(path, "<!-- x: begin -->", "<!-- x: end -->", "<!-- x: begin -->\nnew\n<!-- x: end -->\n")
    assert path.read_text(encoding="utf-8") == "intro\n<!-- x: begin -->\nnew\n<!-- x: end -->\n\n## next\n"


def test_make_results_section_opens_details():
    ns = {"vm_O1/rules30": 95.5, "vm_O0/rules30": 324.3, "reference/rules30": 3111.8}
    e2e = {"machine": "Test CPU (x86_64), 2 CPUs", "results": [
        {"model": "mlp", "entries": 258, "policy": p, "reference": "ref", "policy_ns_per_entry": 2.0,
         "ref_ns_per_entry": 4.0, "ratio": 0.5} for p in ("keep_tensor_guards", "rules30")]}
    startup = {"files": 6, "runs": 30, "exe_wall": 23.7, "exe_cpu": 8.7, "py_wall": 198.0, "py_cpu": 70.0}
    text = make_results.render(ns, e2e, startup, "2026-01-02", "Linux 6", 2)
    lines = lines_of(text, make_results.BEGIN, make_results.END)
    assert lines[1] == "# Benchmark details"
    assert "| rules30 | 95.5 | 324.3 | 3111.8 | 32.6x |" in lines
    assert lines[-3] == ("Target: a lint starts and ends within 20 ms of CPU: **met** (8.7 ms; 8x less CPU than "
                         "`python -m`; wall time adds the wait for a CPU on this shared VM).")
    # DETAILS.md opens with the title and intro this render writes (up to the run's date and machine).
    intro = lines[:next(i for i, line in enumerate(lines) if line.startswith("The sections up to"))]
    assert "Every table of every benchmark; [bench/RESULTS.md](RESULTS.md) is the summary (one line per" in intro
    assert DETAILS.read_text(encoding="utf-8").splitlines()[:len(intro)] == intro


def test_sections_are_in_details_and_results_holds_the_zoo():
    details, results = DETAILS.read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8")
    for begin, end in MARKERS:
        assert details.count(begin) == 1 and details.count(end) == 1, begin
        assert details.index(begin) < details.index(end)
        assert begin not in results and end not in results
    assert results.count(ZOO_BEGIN) == 1 and results.count(ZOO_END) == 1
    assert results.rstrip("\n").endswith(ZOO_END)


def test_write_section_fills_the_zoo_in_place(tmp_path):
    path = tmp_path / "RESULTS.md"
    old = RESULTS.read_text(encoding="utf-8")
    path.write_text(old, encoding="utf-8")
    results_section.write_section(path, ZOO_BEGIN, ZOO_END, f"{ZOO_BEGIN}\n| model |\n|---|\n| gpt2 |\n{ZOO_END}\n")
    head = old.split(ZOO_BEGIN)[0]
    assert path.read_text(encoding="utf-8") == f"{head}{ZOO_BEGIN}\n| model |\n|---|\n| gpt2 |\n{ZOO_END}\n"
    assert head.rstrip("\n").endswith("## suggest on the model zoo")
