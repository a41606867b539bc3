"""What the test_dispatch_*.py files share: ``direct`` (``gp.compile`` with
``dispatch="direct"`` and a std policy), ``warm`` (calls past the warm-up), ``fresh`` (a copy
of a function with its own code object, so its own Dynamo cache) and two small models,
``scaled`` and ``Doubler``."""

import types

import torch

import guardpolicy as gp
from guardpolicy.runtime.call import dispatch

WARMUP = dispatch.DEFAULT_WARMUP
NN = "skip_guard_on_all_nn_modules"


def fresh(fn):
    """A copy of ``fn`` with its own code object (its own Dynamo cache)."""
    out = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def direct(model, std=NN, backend="eager", **kwargs):
    return gp.compile(model, gp.load_std(std), backend=backend, dispatch="direct", **kwargs)


def warm(fn, *args, calls=WARMUP + 2):
    for _ in range(calls):
        fn(*args)


def scaled(x):
    return torch.sin(x) * 3 + 1


class Doubler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * 2
