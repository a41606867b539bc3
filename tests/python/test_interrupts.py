"""A Ctrl-C (KeyboardInterrupt), SystemExit or any BaseException that is not an Exception,
raised while a policy reads guard entries, ends the call: on_error decides only failures
to read an entry (Exceptions). A real SIGINT during torch.compile reaches the caller."""

from __future__ import annotations

import ctypes
import functools
import signal
import types
import warnings

import pytest
import torch

import guardpolicy as gp
import sigint
from conftest import compile_with

NAME_POLICY = 'guardpolicy 1\nunsafe policy p {\n  drop when name == "x"\n}\n'
NAME_POLICY_DROP = 'guardpolicy 1\nunsafe policy p {\n  drop when name == "x"\n  on_error drop\n}\n'


class Raising:
    """An entry whose `name` raises `exc`."""

    def __init__(self, exc: BaseException):
        self._exc = exc

    @property
    def name(self):
        raise self._exc


def _plain(name: str = "x"):
    return types.SimpleNamespace(name=name)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), GeneratorExit()],
                         ids=["KeyboardInterrupt", "SystemExit", "GeneratorExit"])
@pytest.mark.parametrize("source", [NAME_POLICY, NAME_POLICY_DROP], ids=["on_error keep", "on_error drop"])
def test_base_exceptions_from_an_entry_propagate(exc, source):
    p = gp.load(source)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no PolicyRuntimeWarning either
        with pytest.raises(type(exc)) as info:
            p([_plain("y"), Raising(exc), _plain()])
        assert info.value is exc
        with pytest.raises(type(exc)):
            p.explain([Raising(exc)])


def test_an_exception_from_an_entry_still_gets_on_error():
    with pytest.warns(gp.PolicyRuntimeWarning, match="boom"):
        assert gp.load(NAME_POLICY)([_plain("y"), Raising(RuntimeError("boom")), _plain()]) == [True, True, False]
    with pytest.warns(gp.PolicyRuntimeWarning, match="boom"):
        assert gp.load(NAME_POLICY_DROP)([Raising(RuntimeError("boom")), _plain("y")]) == [False, True]


def test_a_keyboard_interrupt_from_a_mapping_row_propagates():
    class Row(dict):
        def get(self, key, default=None):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gp.load(NAME_POLICY).evaluate([Row()])


_libc_raise = ctypes.CDLL(None)["raise"]
_libc_raise.argtypes = [ctypes.c_int]


class SignalsOnRead(int):
    """An entry whose `name` sends this process the signal it holds (libc's raise(), which
    runs no Python signal handler) and is no str (a read failure): no Python code runs
    between the signal and the next entry, so only the policy's own check can see it."""

    name = property(_libc_raise)


@pytest.fixture
def python_sigint():
    """Python's SIGINT handler, also in a test run started with SIGINT ignored."""
    with sigint.python_handler():
        yield


def test_a_sigint_during_a_call_stops_it_before_the_next_entry(python_sigint):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    read = []

    class Logged:
        name = property(functools.partial(list.append, read))  # C only as well

    p = gp.load(NAME_POLICY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gp.PolicyRuntimeWarning)
        with pytest.raises(KeyboardInterrupt):
            p([SignalsOnRead(signal.SIGINT), Logged(), Logged()])
    assert read == []  # no entry was read after the SIGINT


class Armed:
    """A global whose `__class__` (read by isinstance, the policy's value.is_tensor) sends
    SIGINT while `armed` is set."""

    armed = False

    @property
    def __class__(self):
        if Armed.armed:
            Armed.armed = False
            signal.raise_signal(signal.SIGINT)
        return Armed


GLOBAL_VALUE = Armed()


def _reads_global(x):
    return x + 1 if isinstance(GLOBAL_VALUE, Armed) else x


def test_a_sigint_while_torch_compile_runs_the_policy_reaches_the_caller(python_sigint):
    policy = gp.load("guardpolicy 1\npolicy p {\n  keep when value.is_tensor\n}\n")
    calls = []

    def filter_fn(entries):
        calls.append(len(entries))
        Armed.armed = True
        try:
            return policy(entries)
        finally:
            Armed.armed = False

    compiled = compile_with(_reads_global, filter_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", gp.PolicyRuntimeWarning)
        with pytest.raises(KeyboardInterrupt):
            compiled(torch.ones(2))
    assert calls  # the interrupt came from inside the filter
    # The same compile without the signal succeeds: nothing else failed.
    torch._dynamo.reset()
    assert torch.equal(compile_with(_reads_global, policy)(torch.ones(2)), torch.full((2,), 2.0))


class ValueInterruptsOnSecondRead:
    """An entry whose `value` raises KeyboardInterrupt the second time it is read: the host
    reads it once (value.is_tensor, which modinfo's fields read), then modinfo reads it."""

    name = "v"
    guard_type = "TYPE_MATCH"
    has_value = True
    is_global = False

    def __init__(self):
        self.reads = 0

    @property
    def value(self):
        self.reads += 1
        if self.reads == 2:
            raise KeyboardInterrupt
        return 3


def test_a_keyboard_interrupt_a_plugin_meets_propagates(example_plugins):
    p = gp.load('guardpolicy 1\nunsafe policy p {\n  drop when modinfo.class_name == "int"\n}\n')
    entry = ValueInterruptsOnSecondRead()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KeyboardInterrupt):
            p([entry])
    assert entry.reads == 2  # raised by modinfo's own read
    assert p([types.SimpleNamespace(name="w", has_value=True, value=3)]) == [False]  # nothing left pending
