"""Ready to serve (docs/serving.md): ``gp.would_recompile`` and ``gp.coverage`` checked against
what really happens when each call is then made (a compile where they said one, none where
they said none), on a HF Llama decode-like step warmed on batch sizes {1, 2, 4} and on a model
given a new options object per call; ``gp.serving`` across two threads; the ``coverage``
command. Backend eager throughout."""

from __future__ import annotations

import dataclasses
import logging
import textwrap
import threading

import pytest
import torch
from torch import nn

import guardpolicy as gp
from guardpolicy.tools import coverage as coverage_cli


def _ids(batch: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
    return torch.randint(0, 64, (batch, 1), dtype=dtype)


def _tiny_llama() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, vocab_size=64,
                                      max_position_embeddings=64)
    return transformers.LlamaForCausalLM(config).eval()


def _checked_against_reality(step, calls) -> list[gp.WouldRecompile]:
    """Asks ``would_recompile`` for each ``(args, kwargs, grad)`` call, then makes the call
    under the same grad mode: a compile exactly where it said one."""
    answers = []
    for i, (args, kwargs, grad) in enumerate(calls):
        with torch.set_grad_enabled(grad):
            answer = gp.would_recompile(step, *args, **kwargs)
            before = gp.stats(step).compiles
            step(*args, **kwargs)
        compiled = gp.stats(step).compiles - before
        assert answer.would_compile == (compiled == 1), f"call {i}: {answer}"
        assert (answer.served_by is None) == answer.would_compile, f"call {i}: {answer}"
        answers.append(answer)
    return answers


def test_would_recompile_on_a_llama_decode_step_is_what_the_call_does():
    model = _tiny_llama()
    step = gp.compile(model, "watch_state", backend="eager", dynamic=False)
    with torch.no_grad():
        for batch in (1, 2, 4):  # the warm-up buckets
            step(_ids(batch), use_cache=False)
    assert gp.stats(step).compiles == 3
    kw = {"use_cache": False}
    calls = [((_ids(b),), kw, False) for b in (1, 2, 4, 2, 1)]
    calls += [((_ids(3),), kw, False), ((_ids(3),), kw, False)]                       # outside warm-up, then warm
    calls += [((_ids(2, torch.int32),), kw, False), ((_ids(2, torch.int32),), kw, False)]  # a dtype change
    calls += [((_ids(1),), kw, True), ((_ids(1),), kw, True)]                         # grad mode on
    calls += [((_ids(b),), kw, False) for b in (4, 3, 1, 2, 4, 2, 3, 1, 4)]
    answers = _checked_against_reality(step, calls)
    assert len(answers) >= 20
    assert [i for i, a in enumerate(answers) if a.would_compile] == [5, 7, 9]
    size, dtype, grad = answers[5], answers[7], answers[9]
    assert {e.compile_id for e in size.entries} == {"0/0", "0/1", "0/2"}
    failure = size.failures[0]  # the most recently used entry first: batch size 1
    ids = failure.guard  # the input ids as explain names them: args[1] behind transformers 5.25's decorator
    assert ids in {e.name for e in gp.explain(step)[0] if e.guard_type == "TENSOR_MATCH" and e.keep}
    assert (failure.guard_type, failure.decision) == ("TENSOR_MATCH", "keep")
    assert (failure.expected, failure.got) == ("size[0] 1", "size[0] 3")
    assert all(f.guard == ids and f.got == "dtype Int" for f in dtype.failures)
    assert all(f.guard == "GLOBAL_STATE" and f.got == "grad_mode=True" for f in grad.failures)
    assert answers[6].served_by == "0/3" and answers[8].served_by == "0/4"
    assert answers[0].checked_frames == (str(answers[0].checked_frames[0]),) and not answers[0].unchecked_frames
    assert f"{ids} (TENSOR_MATCH): expected size[0] 1, got size[0] 3" in str(size)


@dataclasses.dataclass
class Options:
    scale: float
    act: str


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, options):
        y = self.lin(x) * options.scale
        return torch.tanh(y) if options.act == "tanh" else torch.relu(y)


def test_would_recompile_with_a_new_options_object_per_call_and_direct_dispatch():
    model = Scaled().eval()
    step = gp.compile(model, "watch_state", backend="eager", dynamic=False, dispatch="direct")
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(12):  # warm-up, then direct dispatch captures the entry
            step(x, Options(0.5, "relu"))
    assert gp.stats(step).dispatch.state == "direct"
    direct = gp.stats(step).dispatch.direct_calls
    calls = [((x, Options(0.5, "relu")), {}, False) for _ in range(3)]
    calls += [((x, Options(0.5, "tanh")), {}, False), ((x, Options(0.5, "tanh")), {}, False)]
    calls += [((x, Options(0.5, "relu")), {}, False), ((torch.randn(3, 4), Options(0.5, "relu")), {}, False)]
    with torch.no_grad():
        answers = _checked_against_reality(step, calls)
    act = answers[3].failures[0]
    assert (act.guard, act.expected, act.got) == ("options.act", "'relu'", "'tanh'")
    assert act.guard_type in ("EQUALS_MATCH", "CONSTANT_MATCH")
    assert [a.would_compile for a in answers] == [False, False, False, True, False, False, True]
    assert gp.stats(step).dispatch.direct_calls > direct  # the served calls went direct
    torch.testing.assert_close(step(x, Options(0.5, "tanh")), model(x, Options(0.5, "tanh")))


def test_a_watched_change_and_the_frames_after_a_graph_break():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.n = nn.Linear(4, 4), 3

        def forward(self, x):
            y = self.lin(x) * self.n
            torch._dynamo.graph_break()
            return y + 1

    net = Net()
    step = gp.compile(net, "watch_state", backend="eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        step(x)
        answer = gp.would_recompile(step, x)
        assert answer.served_by == "0/0"
        assert answer.unchecked_frames and all("resume" in f for f in answer.unchecked_frames)
        net.n = 4  # a watched attribute: the watch gate's verdict
        answer = gp.would_recompile(step, x)
        failure = answer.failures[0]
        assert answer.would_compile and failure.watched
        assert (failure.guard, failure.expected, failure.got) == ("self.n", "3", "4")
        before = gp.stats(step).compiles
        torch.testing.assert_close(step(x), net(x))
        assert gp.stats(step).compiles > before
    plain = torch.compile(Net(), backend="eager")  # a plain torch.compile object too
    plain(x)
    assert not gp.would_recompile(plain, x).would_compile
    assert gp.would_recompile(plain, torch.randn(5, 4)).failures[0].guard == "x"
    with pytest.raises(TypeError, match="x"):
        gp.would_recompile(step, y=x)


def _scale(x, k=2):
    return x * k


@pytest.mark.parametrize("make", [
    lambda: gp.compile(_scale, "watch_state", backend="eager", dynamic=False, dispatch="direct"),
    lambda: gp.compile(_scale, gp.load_std("skip_guard_on_all_nn_modules"), backend="eager", dynamic=False, verify=3),
    lambda: gp.compile(Scaled(), "watch_state", backend="eager", dynamic=False, inplace=True),
], ids=["function-direct-dispatch", "function-verify", "module-in-place"])
def test_would_recompile_finds_the_first_frame_behind_each_wrapper(make):
    step = make()
    args = (Options(1.0, "relu"),) if isinstance(step, nn.Module) else ()
    with torch.no_grad():
        for _ in range(10):
            step(torch.randn(2, 4), *args)
        assert gp.would_recompile(step, torch.randn(2, 4), *args).served_by == "0/0"
        answer = gp.would_recompile(step, torch.randn(3, 4), *args)
        assert answer.would_compile and answer.failures[0].expected == "size[0] 2"
        step(torch.randn(3, 4), *args)
    assert gp.stats(step).compiles == 2


def test_coverage_table():
    step = gp.compile(Scaled().eval(), "watch_state", backend="eager", dynamic=False)
    with torch.no_grad():
        step(torch.randn(2, 4), Options(1.0, "relu"))
        table = gp.coverage(step, [(torch.randn(2, 4), Options(1.0, "relu")),
                                   ((torch.randn(8, 4), Options(1.0, "relu")), {}),
                                   ((torch.randn(2, 4),), {"options": Options(1.0, "relu")})])
    assert [r.would_compile for r in table] == [False, True, False] and not table.covered
    assert table[1].failing == "x (TENSOR_MATCH): expected size[0] 2, got size[0] 8"
    assert "| 1 | f32[8, 4], Options | **compiles** |" in str(table)
    assert "2 of 3 calls served by a cache entry; 1 would compile" in str(table)
    with pytest.raises(TypeError, match="call 0"):
        gp.coverage(step, [[torch.randn(2, 4)]])


def _blocking_backend(compiling: threading.Event, release: threading.Event):
    def backend(gm, example_inputs):
        if any(tuple(getattr(t, "shape", ()))[:1] == (5,) for t in example_inputs):
            compiling.set()
            assert release.wait(30), "the request thread never raised"
        return gm.forward
    return backend


def test_serving_raises_on_this_thread_while_another_thread_compiles():
    compiling, release = threading.Event(), threading.Event()
    model = Scaled().eval()
    step = gp.compile(model, "watch_state", backend=_blocking_backend(compiling, release), dynamic=False)
    relu = Options(1.0, "relu")
    with torch.no_grad():
        step(torch.randn(2, 4), relu)
    errors: list = []

    def warm_up():  # outside any scope: compiles the unseen shape
        try:
            with torch.no_grad():
                step(torch.randn(5, 4), relu)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    warm = threading.Thread(target=warm_up)
    with gp.serving(step), torch.no_grad():
        warm.start()
        assert compiling.wait(30)
        with pytest.raises(gp.ServeTimeCompile, match="expected size.0. 2, got size.0. 5") as raised:
            step(torch.randn(5, 4), relu)  # the other thread holds Dynamo's compile lock: no wait here
        release.set()
        warm.join(30)
        assert not errors and not warm.is_alive()
        x = torch.randn(5, 4)
        torch.testing.assert_close(step(x, relu), model(x, relu))  # served by the warm-up thread's compile
    assert raised.value.guard == "x" and raised.value.answer.would_compile
    assert gp.stats(step).serve_time_compiles == 1 and gp.stats(step).compiles == 2


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_serving_warn_compiles_and_logs_once_per_guard():
    step = gp.compile(Scaled(), "watch_state", backend="eager", dynamic=False)
    other = gp.compile(Scaled(), "watch_state", backend="eager", dynamic=False)
    relu = Options(1.0, "relu")
    with torch.no_grad():
        step(torch.randn(2, 4), relu)
        other(torch.randn(2, 4), relu)
        logger, records = logging.getLogger("guardpolicy"), _Records()
        logger.addHandler(records)
        try:
            with gp.serving(step, on_compile="warn"):
                step(torch.randn(5, 4), relu)
                step(torch.randn(6, 4), relu)
                other(torch.randn(7, 4), relu)  # not this scope's object: compiles, not counted
        finally:
            logger.removeHandler(records)
    lines = [line for line in records.lines if "guardpolicy.serving" in line]
    assert len(lines) == 1 and "entry 0/0: x (TENSOR_MATCH): expected size[0] 2, got size[0] 5" in lines[0]
    assert gp.stats(step).serve_time_compiles == 2 and gp.stats(step).compiles == 3
    assert gp.stats(other).serve_time_compiles == 0 and gp.stats(other).compiles == 2
    with pytest.raises(TypeError, match="plain torch.compile"):
        gp.serving(torch.compile(nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="on_compile"):
        gp.serving(step, on_compile="ignore")


def test_coverage_command(tmp_path, capsys):
    (tmp_path / "model.py").write_text(textwrap.dedent("""
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)

            def forward(self, x):
                return self.lin(x).relu()

        def build():
            return Net(), (torch.randn(2, 4),)
    """))
    (tmp_path / "calls.py").write_text(textwrap.dedent("""
        import torch

        def warmup():
            return [(torch.randn(2, 4),), (torch.randn(4, 4),)]

        def calls():
            return [(torch.randn(2, 4),), ((torch.randn(4, 4),), {}), (torch.randn(3, 4),)]
    """))
    (tmp_path / "covered.py").write_text("import torch\n\ndef calls():\n    return [(torch.randn(2, 4),)]\n")
    args = ["--model", f"{tmp_path / 'model.py'}:build", "--backend", "eager", "--dynamic", "false"]
    assert coverage_cli.main([*args, "--calls", str(tmp_path / "calls.py")]) == 1
    out = capsys.readouterr().out
    assert "| 2 | f32[3, 4] | **compiles** | x (TENSOR_MATCH): expected size[0] 4, got size[0] 3 |" in out
    assert "2 of 3 calls served by a cache entry; 1 would compile" in out
    assert coverage_cli.main([*args, "--calls", str(tmp_path / "covered.py")]) == 0
    assert coverage_cli.main([*args, "--calls", str(tmp_path / "model.py")]) == 2
    assert "defines no function `calls()`" in capsys.readouterr().err
