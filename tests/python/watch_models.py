"""The models of test_watch_generated.py, built from a small grammar (``Net``: a stem, a stack
of ``Layer``s in a ``ModuleList``, ``Sequential`` or ``ModuleDict``, a head). The test loads
this file anew for every generated example (``watch_catalog.fresh_models``), so each example
has its own classes, functions and module globals: a class attribute, a helper's defaults or a
global that one example changes ends with it, and Dynamo compiles each example's code afresh.

Every forward reads, besides its modules: a config object (``types.SimpleNamespace``, a small
class, a dataclass, a dict subclass or a class with ``__slots__``, the classes with a base whose
class attribute is read), a plain list of floats (a ``Layer``'s ``taps``), a helper with defaults and kwdefaults, a helper reading a closure cell,
a module global, the builtin ``max``, a class attribute and a metaclass attribute; and holders
of kinds the watch leaves to torch (``holders``: a mapping proxy and a keys view over a dict, a
ChainMap, a tuple of lists, a float subclass with an instance dict). Each module casts its input
to its weight's dtype, so that ``.half()`` of any submodule runs in eager.

Besides ``Net``, two roots of other shapes: ``Free``, a parameter-free module (its frame may
have nothing but functions to watch), and ``step``, a plain function compiled with the model as
its argument; both have a default that a change replaces, and a twin whose ``__code__`` a
change gives them."""

import collections
import dataclasses
import types
from typing import Optional

import torch
from torch import nn

WIDTH = 4
GAIN = 1.0  # a module global the forwards read


def helper(x, scale=1.0, *, mode="add"):  # called with its defaults and kwdefaults
    return x * scale + 0.5 if mode == "add" else x * scale - 0.5


def helper_tripled(x, scale=1.0, *, mode="add"):  # its __code__ is given to helper by a change
    return x * scale * 3.0


def _closure():
    bias = 0.0

    def shifted(x):  # reads a closure cell
        return x + bias

    def set_bias(value):  # writes it through nonlocal
        nonlocal bias
        bias = value

    return shifted, set_bias


shifted, set_bias = _closure()


class Unit:  # a base of the config classes: its class attribute `unit` is read through them
    unit = 1.0


class Twice:  # what a config class's base is swapped to (`__bases__`: no dict changes)
    unit = 2.0


class SlotUnit:  # the same, for a class with __slots__
    __slots__ = ()
    unit = 1.0


class Options(Unit):  # a config class
    def __init__(self, k=2, scale=1.0, flag=True, bias=None):
        self.k, self.scale, self.flag, self.bias = k, scale, flag, bias


@dataclasses.dataclass
class DataOptions(Unit):  # a config dataclass
    k: int = 2
    scale: float = 1.0
    flag: bool = True
    bias: Optional[float] = None


class DictOptions(dict, Unit):  # a config that is a dict subclass written in Python, its fields attributes
    def __init__(self, k=2, scale=1.0, flag=True, bias=None):
        super().__init__(kind="dict")
        self.k, self.scale, self.flag, self.bias = k, scale, flag, bias


class SlotOptions(SlotUnit):  # a config with __slots__: a kind the watch leaves to torch
    __slots__ = ("k", "scale", "flag", "bias")

    def __init__(self, k=2, scale=1.0, flag=True, bias=None):
        self.k, self.scale, self.flag, self.bias = k, scale, flag, bias


CONFIGS = {"namespace": types.SimpleNamespace, "class": Options, "dataclass": DataOptions, "dict": DictOptions,
           "slots": SlotOptions}
FIELDS = ("k", "scale", "flag", "bias")


def config(kind, **values):
    base = {"unit": 1.0} if kind == "namespace" else {}  # a namespace holds `unit` itself
    return CONFIGS[kind](**{"k": 2, "scale": 1.0, "flag": True, "bias": None, **base, **values})


def fields(cfg):
    """A config's fields, whatever holds them (a ``__dict__``, slots)."""
    names = FIELDS + (("unit",) if isinstance(cfg, types.SimpleNamespace) else ())
    return {name: getattr(cfg, name) for name in names}


@dataclasses.dataclass
class Batch:  # an input object
    x: torch.Tensor
    scale: float = 1.0
    mode: str = "add"


def unpack(batch):
    if isinstance(batch, Batch):
        return batch.x, batch.scale, batch.mode
    if isinstance(batch, dict):
        return batch["x"], batch["scale"], batch["mode"]
    return batch, 1.0, "add"


def read(cfg, x):
    """What each forward reads besides its modules."""
    if cfg.flag:
        x = x * cfg.scale
    if cfg.k > 1:
        x = x + cfg.k
    elif cfg.k < 0:
        x = x - 1.0
    if cfg.bias is not None:
        x = x + cfg.bias
    return shifted(helper(x)) * GAIN * max(cfg.k, 1) * cfg.unit


class Factor(float):  # a float subclass with an instance dict
    pass


def holders(m):
    """Gives ``m`` the holders of kinds not in the watch's table (what ``odd`` reads): the dict
    ``backing`` seen only through a mapping proxy and a keys view, a ChainMap, a tuple of lists
    and a ``Factor`` with an attribute."""
    m.backing = {"gain": 1.0}
    m.table = types.MappingProxyType(m.backing)
    m.names = m.backing.keys()
    m.chain = collections.ChainMap({}, {"gain": 1.0})
    m.pairs = ([1.0], [0.0])
    m.factor = Factor(1.0)
    m.factor.extra = 0.0


class Holds:
    """A module with ``holders``: deep-copied with a new proxy and view over its copied dict
    (neither can be copied itself)."""

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("table", "names")}

    def __setstate__(self, state):
        super().__setstate__(state)
        self.table, self.names = types.MappingProxyType(self.backing), self.backing.keys()


def odd(m, x):
    x = x * m.table["gain"] * m.chain["gain"] * m.pairs[0][0] + m.pairs[1][0]
    if "off" in m.names:
        x = -x
    return x * float(m.factor) + m.factor.extra


def tapped(taps, x):
    x = x * taps[0]
    for t in taps[1:]:
        x = x + t
    return x


class Meta(type):
    mult = 1.0  # read through the class: type(self).mult and Layer.mult


class Layer(Holds, nn.Module, metaclass=Meta):
    shift = 0.0  # a class attribute

    def __init__(self, cfg_kind):
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)
        self.drop = nn.Dropout(0.25)
        self.cfg = config(cfg_kind)
        self.register_buffer("offset", torch.zeros(WIDTH))
        self.taps = [1.0, 0.0]  # a plain list: a scale, then shifts
        holders(self)

    def tapped(self, x):
        return tapped(self.taps, x)

    def act(self, x):
        return torch.relu(x)

    def forward(self, x):
        x = odd(self, self.tapped(self.act(self.drop(self.lin(x.to(self.lin.weight.dtype))))) + self.offset)
        return read(self.cfg, x) + self.shift * type(self).mult + (Layer.mult - 1.0)  # both through the class


class LayerTwice(Layer):  # what a Layer's __class__ is swapped to
    def forward(self, x):
        return super().forward(x) * 2.0


class Net(nn.Module):
    def __init__(self, container, depth, cfg_kind, conv):
        super().__init__()
        self.cfg = config(cfg_kind)
        self.stem = nn.Conv2d(WIDTH, WIDTH, 3, padding=1) if conv else nn.Linear(WIDTH, WIDTH)
        layers = [Layer(cfg_kind) for _ in range(depth)]
        if container == "dict":
            self.layers = nn.ModuleDict({f"l{i}": layer for i, layer in enumerate(layers)})
        else:
            self.layers = nn.ModuleList(layers) if container == "list" else nn.Sequential(*layers)
        self.head = nn.Linear(WIDTH, 3)

    def forward(self, batch):
        x, scale, mode = unpack(batch)
        x = self.stem(x.to(self.stem.weight.dtype))
        if isinstance(self.layers, nn.Sequential):
            x = self.layers(x)
        else:
            for layer in self.layers.values() if isinstance(self.layers, nn.ModuleDict) else self.layers:
                x = layer(x)
        x = x * scale if mode == "add" else x - scale
        return self.head(read(self.cfg, x).to(self.head.weight.dtype))


class NetTwice(Net):  # what the root's __class__ is swapped to
    def forward(self, batch):
        return super().forward(batch) * 2.0


def forward_plus(self, batch):  # bound to a compiled root with types.MethodType
    return type(self).forward(self, batch) + 1.0


class Free(Holds, nn.Module):  # a parameter-free root: its state, holders and functions, no tensor of its own
    def __init__(self, cfg_kind):
        super().__init__()
        self.cfg = config(cfg_kind)
        self.taps = [1.0, 0.0]
        holders(self)

    def forward(self, batch, gain=1.0):
        x, scale, mode = unpack(batch)
        x = odd(self, tapped(self.taps, x)) * gain
        return read(self.cfg, x * scale if mode == "add" else x - scale)


def free_forward_twice(self, batch, gain=1.0):  # its __code__ is given to Free.forward by a change
    x, scale, mode = unpack(batch)
    return read(self.cfg, odd(self, tapped(self.taps, x)) * gain * 2.0)


def step(model, batch, gain=1.0):  # a plain compiled function: the model is its argument
    return model(batch) * gain


def step_twice(model, batch, gain=1.0):  # its __code__ is given to step by a change
    return model(batch) * gain * 2.0 - 1.0
