"""The models of test_watch_kinds.py: each reads its state through an object of one kind
(a mapping proxy, a dict view, a subclass of a builtin type, a class hierarchy, a tuple of lists,
a ChainMap, an OrderedDict, ...), and ``CHANGES`` names a change of that state made after
warm-up, the way a user makes it. Each entry: ``(name, make() -> (model, change, undo))``."""

from __future__ import annotations

import collections
import types
import typing

import torch
from torch import nn


class Reads(nn.Module):
    """``forward(x) = x * read(self)``: one model class, its state read by ``read``."""

    def __init__(self, read, **state):
        super().__init__()
        self.read = read
        for name, value in state.items():
            setattr(self, name, value)

    def forward(self, x):
        return x * self.read(self)


def _proxy():
    d = {"scale": 2.0}
    m = Reads(lambda s: s.cfg["scale"], cfg=types.MappingProxyType(d))
    return m, lambda: d.__setitem__("scale", 3.0), lambda: d.__setitem__("scale", 2.0)


def _keys_view():
    d = {"a": 1}
    m = Reads(lambda s: 2.0 if "b" in s.keys else 3.0, keys=d.keys())
    return m, lambda: d.__setitem__("b", 1), lambda: d.pop("b")


class Config(dict):
    pass


def _attribute_of(config_class):
    """A config of ``config_class`` (a mapping) whose instance attribute ``mode`` the forward reads."""

    def make():
        cfg = config_class(scale=2.0)
        cfg.mode = "double"
        m = Reads(lambda s: 2.0 if s.cfg.mode == "double" else 3.0, cfg=cfg)
        return m, lambda: setattr(cfg, "mode", "triple"), lambda: setattr(cfg, "mode", "double")

    return make


class Scaled(dict):
    def __getitem__(self, key):
        return dict.__getitem__(self, key) * self.factor


def _dict_subclass_getitem():
    cfg = Scaled(scale=2.0)
    cfg.factor = 1.0
    m = Reads(lambda s: s.cfg["scale"], cfg=cfg)
    return m, lambda: setattr(cfg, "factor", 1.5), lambda: setattr(cfg, "factor", 1.0)


class Doubled(dict):
    def __getitem__(self, key):
        return dict.__getitem__(self, key) * 2


def _dict_subclass_class():
    cfg = Config(scale=2.0)
    m = Reads(lambda s: s.cfg["scale"], cfg=cfg)
    return m, lambda: setattr(cfg, "__class__", Doubled), lambda: setattr(cfg, "__class__", Config)


class Ordered(collections.OrderedDict):
    pass


class Pair(typing.NamedTuple):
    a: float
    b: float


class PairWithDict(Pair):
    pass


def _namedtuple_subclass():
    p = PairWithDict(2.0, 3.0)
    p.extra = 1.0
    m = Reads(lambda s: s.pair.a + s.pair.extra, pair=p)
    return m, lambda: setattr(p, "extra", 5.0), lambda: setattr(p, "extra", 1.0)


class Weight(float):
    pass


def _float_subclass():
    w = Weight(2.0)
    w.bias = 1.0
    m = Reads(lambda s: s.w.bias, w=w)
    return m, lambda: setattr(w, "bias", 4.0), lambda: setattr(w, "bias", 1.0)


class Low:
    scale = 2.0


class High:
    scale = 3.0


class Settings(Low):
    pass


def _bases():
    m = Reads(lambda s: s.settings.scale, settings=Settings())
    return m, lambda: setattr(Settings, "__bases__", (High,)), lambda: setattr(Settings, "__bases__", (Low,))


def _tuple_of_lists():
    taps = ([2.0], [1.0])
    m = Reads(lambda s: s.taps[0][0], taps=taps)
    return m, lambda: taps[0].__setitem__(0, 5.0), lambda: taps[0].__setitem__(0, 2.0)


def _chain_map():
    front, back = {}, {"scale": 2.0}
    m = Reads(lambda s: s.cm["scale"], cm=collections.ChainMap(front, back))
    return m, lambda: front.__setitem__("scale", 4.0), lambda: front.pop("scale")


def _ordered_move_to_end():
    steps = collections.OrderedDict(a=2.0, b=3.0)
    m = Reads(lambda s: next(iter(s.steps.values())), steps=steps)
    return m, lambda: steps.move_to_end("a"), lambda: steps.move_to_end("b")


def _defaultdict_factory():
    d = collections.defaultdict(lambda: 2.0)
    m = Reads(lambda s: s.d["scale"], d=d)
    return m, lambda: d.__setitem__("scale", 5.0), lambda: d.pop("scale")


class Doubling(torch.overrides.TorchFunctionMode):
    """Doubles the result of every multiplication."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.Tensor.mul or func is torch.mul else out


def _function_mode():
    modes: list = []

    def enter():
        modes.append(Doubling())
        modes[-1].__enter__()

    m = Reads(lambda s: s.scale, scale=2.0)
    return m, enter, lambda: modes.pop().__exit__(None, None, None)


CHANGES: dict[str, typing.Callable] = {
    "a mapping proxy's dict changed": _proxy,
    "a stored dict.keys() view's dict gained a key": _keys_view,
    "an attribute of a dict subclass set": _attribute_of(Config),
    "a dict subclass's __getitem__ reads an attribute set": _dict_subclass_getitem,
    "a dict subclass's __class__ swapped": _dict_subclass_class,
    "an attribute of an OrderedDict subclass set": _attribute_of(Ordered),
    "an attribute of a NamedTuple subclass set": _namedtuple_subclass,
    "an attribute of a float subclass set": _float_subclass,
    "a config class's __bases__ replaced": _bases,
    "a list inside a tuple mutated": _tuple_of_lists,
    "a ChainMap's front dict gained a key": _chain_map,
    "an OrderedDict reordered with move_to_end": _ordered_move_to_end,
    "a defaultdict's key set": _defaultdict_factory,
    "a TorchFunctionMode entered": _function_mode,
}


class NoParams(nn.Module):
    """A parameter-free module: its frame has no watched guard of its own state."""

    def forward(self, x, k=2.0):
        return x * k


def _forward_defaults():
    m = NoParams()
    fn = NoParams.forward
    return m, lambda: setattr(fn, "__defaults__", (3.0,)), lambda: setattr(fn, "__defaults__", (2.0,))


def _forward_code():
    m = NoParams()
    fn, old = NoParams.forward, NoParams.forward.__code__

    def tripled(self, x, k=2.0):
        return x * k * 3

    return m, lambda: setattr(fn, "__code__", tripled.__code__), lambda: setattr(fn, "__code__", old)


def scale(x, *, k=2.0):
    return x * k


def _function_kwdefaults():
    old = scale.__kwdefaults__
    return scale, lambda: setattr(scale, "__kwdefaults__", {"k": 5.0}), lambda: setattr(scale, "__kwdefaults__", old)


#: Function state under direct dispatch: ``(name, make() -> (model or function, change, undo))``.
FUNCTION_CHANGES: dict[str, typing.Callable] = {
    "a parameter-free forward's __defaults__ replaced": _forward_defaults,
    "a parameter-free forward's __code__ replaced": _forward_code,
    "a compiled function's __kwdefaults__ replaced": _function_kwdefaults,
}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x)


def _hooked(module, call):
    """``(model, call, change, undo)``: a forward hook on ``module`` added, then removed."""
    handles = []
    return (call, lambda: handles.append(module.register_forward_hook(lambda m, args, out: out * 2)),
            lambda: handles.pop().remove())


def _root_hook():
    m = nn.Sequential(nn.Linear(2, 2))
    return (m, *_hooked(m, lambda f, x: f(x)))


def _argument_hook():
    m = nn.Linear(2, 2)

    def step(model, x):
        return model(x) + 1

    return (step, *_hooked(m, lambda f, x: f(m, x)))


def _block_hook():
    blocks = nn.Sequential(*(Net() for _ in range(3)))
    return (blocks, *_hooked(blocks[1], lambda f, x: f(x)))


def _user_root_hook():
    m = Net()
    return (m, *_hooked(m, lambda f, x: f(x)))


#: Hooks added after warm-up where the compiled frame runs them: ``(name, make() -> (model or
#: function, call(compiled, x), change, undo))``. A built-in module compiled whole (torch
#: compiles its call), a module passed as an argument and a block compiled in place run their
#: own hooks inside the frame, with no guard of their own (plain torch.compile serves them
#: stale); a user module compiled whole runs them around its forward's frame.
HOOK_CHANGES: dict[str, typing.Callable] = {
    "a hook on a compiled nn.Sequential": _root_hook,
    "a hook on a module passed as an argument": _argument_hook,
    "a hook on one block compiled in place": _block_hook,
    "a hook on a compiled user module": _user_root_hook,
}
