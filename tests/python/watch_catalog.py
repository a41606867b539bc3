"""The changes test_watch_generated.py makes after warm-up, each ``change(h, target, arg)``:
``h`` is the test's ``Harness`` (its models, hook handles, input state and the example's own
``watch_models`` module), ``target`` picks what to change among the candidates (modulo their
number) and ``arg`` how. A change returns what it did in words (the test's failure message
lists them in order) or None where it has nothing to change (a hook order with one hook).

Every change leaves a model that eager runs: eager is the oracle after each call."""

from __future__ import annotations

import collections
import gc
import importlib.util
import itertools
import sys
import types
from pathlib import Path

import torch
from torch import nn

_loaded = itertools.count()


def fresh_models() -> types.ModuleType:
    """watch_models.py loaded as a new module (own classes, functions and globals)."""
    name = f"watch_models_{next(_loaded)}"
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("watch_models.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


class Nothing(Exception):
    """No candidate to change (a parameter-free model has no parameter): the change returns None."""


def pick(candidates: list, target):
    """``candidates[target]`` modulo their number; a name picks the ``(name, object)`` of that name
    (the hand-written sequences name what they change). Raises ``Nothing`` where there is none."""
    if isinstance(target, str):
        return next(c for c in candidates if c[0] == target)
    if not candidates:
        raise Nothing
    return candidates[target % len(candidates)]


def _value(values: list, arg: int):
    return values[arg % len(values)]


# --------------------------------------------------------------------------- hooks


def forward_hook(h, target, arg):
    name, m = pick(h.modules(), target)
    b = float(arg % 4)  # hooks with different constants do not commute: their order matters
    h.handles.append(m.register_forward_hook(lambda mod, args, out: out * 2.0 + b))
    return f"forward hook out*2+{b} on {name}"


def pre_hook(h, target, arg):
    name, m = pick(h.modules(), target)
    b = float(arg % 4)

    def hook(mod, args):  # a root's input may be a Batch or a dict: left alone
        return (args[0] * 0.5 + b, *args[1:]) if isinstance(args[0], torch.Tensor) else None

    h.handles.append(m.register_forward_pre_hook(hook))
    return f"forward pre-hook x*0.5+{b} on {name}"


def global_hook(h, target, arg):
    if arg % 2:
        h.handles.append(nn.modules.module.register_module_forward_pre_hook(
            lambda mod, args: (args[0] + 1.0, *args[1:]) if isinstance(mod, nn.Linear) else None))
        return "global forward pre-hook (Linear: x+1)"
    h.handles.append(nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: out * 1.5 if isinstance(mod, nn.Linear) else out))
    return "global forward hook (Linear: out*1.5)"


def remove_hook(h, target, arg):
    if not h.handles:
        return None
    handle = h.handles.pop(target % len(h.handles))
    handle.remove()
    return f"hook {handle.id} removed"


def hook_order(h, target, arg):
    name, m = pick([(n, m) for n, m in h.modules() if len(m._forward_hooks) > 1], target)
    m._forward_hooks.move_to_end(next(iter(m._forward_hooks)))
    return f"forward hooks of {name} reordered (move_to_end)"


# --------------------------------------------------------------------------- config and globals

CONFIG_VALUES = [("k", 0), ("k", 1), ("k", -1), ("k", lambda v: v - 1), ("k", lambda v: v + 1),
                 ("scale", 0.0), ("scale", -1.0), ("scale", 2.5), ("flag", lambda v: not v),
                 ("bias", None), ("bias", 0.5), ("bias", -1.0)]


def config_attr(h, target, arg):
    name, owner = pick(h.config_owners(), target)
    attr, value = _value(CONFIG_VALUES, arg)
    value = value(getattr(owner.cfg, attr)) if callable(value) else value
    setattr(owner.cfg, attr, value)
    return f"{name}.cfg.{attr} = {value!r}"


def config_replaced(h, target, arg):
    name, owner = pick(h.config_owners(), target)
    values = h.mod.fields(owner.cfg)
    if arg % 2:
        values["scale"] = values["scale"] + 1.0
    owner.cfg = type(owner.cfg)(**values)
    return f"{name}.cfg replaced by an {'un' if arg % 2 else ''}equal {type(owner.cfg).__name__}"


def config_dict(h, target, arg):
    name, owner = pick(h.config_owners(), target)
    if isinstance(owner.cfg, types.SimpleNamespace) or not hasattr(owner.cfg, "__dict__"):  # read-only, or slots
        return None
    owner.cfg.__dict__ = {**vars(owner.cfg), "scale": _value([3.0, 1.0, -2.0], arg)}
    return f"{name}.cfg.__dict__ = a new dict (scale {owner.cfg.scale})"


def config_bases(h, target, arg):
    """A config class's base swapped (``Class.__bases__ = ...``): the class attribute ``unit``
    read through it changes with no dict written."""
    name, owner = pick(h.config_owners(), target)
    cls, mod = type(owner.cfg), h.mod
    if cls not in (mod.Options, mod.DataOptions, mod.DictOptions):
        return None
    now = mod.Twice if mod.Unit in cls.__bases__ else mod.Unit
    cls.__bases__ = tuple(now if b in (mod.Unit, mod.Twice) else b for b in cls.__bases__)
    return f"{name}.cfg's class {cls.__name__} now based on {now.__name__}"


def global_value(h, target, arg):
    h.mod.GAIN = _value([0.0, 0.5, 2.0, -1.0, 1.0], arg)
    return f"module global GAIN = {h.mod.GAIN}"


def builtin_shadowed(h, target, arg):
    if arg % 2:
        h.mod.__dict__.pop("max", None)
        return "module global max deleted (the builtin again)"
    h.mod.max = min
    return "module global max = min (shadows the builtin)"


def class_attr(h, target, arg):
    h.mod.Layer.shift = _value([1.0, 0.0, -0.5], arg)
    return f"class attribute Layer.shift = {h.mod.Layer.shift}"


def metaclass_attr(h, target, arg):
    h.mod.Meta.mult = _value([3.0, 1.0, 0.0], arg)
    return f"metaclass attribute Meta.mult = {h.mod.Meta.mult} (read as type(self).mult and Layer.mult)"


ACTS = [("sigmoid", torch.sigmoid), ("tanh", torch.tanh), ("relu", torch.relu)]


def method_class(h, target, arg):
    what, fn = _value(ACTS, arg)
    h.mod.Layer.act = lambda self, x: fn(x)
    return f"Layer.act monkeypatched on the class ({what})"


def method_instance(h, target, arg):
    name, layer = pick(h.layers(), target)
    what, fn = _value(ACTS, arg)
    layer.act = types.MethodType(lambda self, x: fn(x) * 2.0, layer)
    return f"{name}.act monkeypatched on the instance ({what}*2)"


TAPS = [("set", 0.0), ("set", -1.0), ("append", 0.5), ("set", 2.0), ("pop", None), ("reverse", None),
        ("replace", None), ("set", 1.0)]


def list_changed(h, target, arg):
    name, layer = pick(h.holders(), target)
    how, value = _value(TAPS, arg)
    taps = layer.taps
    if how == "set":
        at = arg % len(taps)
        taps[at] = value
        return f"{name}.taps[{at}] = {value} (in place)"
    if how == "append":
        taps.append(value)
        return f"{name}.taps.append({value})"
    if how == "pop":
        if len(taps) < 2:
            return None
        return f"{name}.taps.pop() (took {taps.pop()})"
    if how == "reverse":
        taps.reverse()
        return f"{name}.taps.reverse() (now {taps})"
    layer.taps = [taps[-1], *taps[:-1]]
    return f"{name}.taps = a new list {layer.taps}"


HOLDERS = [("backing", "gain", 2.0), ("backing", "off", True), ("backing", "off", None), ("table", None, 0.5),
           ("chain back", "gain", 3.0), ("chain front", "gain", 0.5), ("chain front", "gain", None), ("chain", None, 1.5),
           ("pairs inner", 0, 2.0), ("pairs", None, 0.5), ("factor", "extra", 1.0), ("factor", None, 2.0)]


def holder_changed(h, target, arg):
    """A holder of a kind not in the watch's table changed (watch_models.holders): torch's
    manager checks what the forward read through it; torch.compile itself is stale on a ChainMap's
    front dict and on a list inside a tuple (the design note lists them)."""
    name, m = pick(h.holders(), target)
    what, key, value = _value(HOLDERS, arg)
    if what == "backing":  # seen through m.table and m.names
        m.backing.pop(key, None) if value is None else m.backing.__setitem__(key, value)
        return f"{name}.backing[{key!r}] = {value!r} (read through a mapping proxy and a keys view)"
    if what == "table":
        m.backing = {**m.backing, "gain": value}
        m.table, m.names = types.MappingProxyType(m.backing), m.backing.keys()
        return f"{name}.table, .names = a proxy and a view over a new dict (gain {value})"
    if what.startswith("chain "):
        maps = m.chain.maps[0 if what == "chain front" else 1]
        maps.pop(key, None) if value is None else maps.__setitem__(key, value)
        return f"{name}.chain.maps[{0 if what == 'chain front' else 1}][{key!r}] = {value!r}"
    if what == "chain":
        m.chain = collections.ChainMap({}, {"gain": value})
        return f"{name}.chain = a new ChainMap (gain {value})"
    if what == "pairs inner":
        m.pairs[key][0] = value
        return f"{name}.pairs[{key}][0] = {value} (a list inside a tuple, in place)"
    if what == "pairs":
        m.pairs = ([value], [0.0])
        return f"{name}.pairs = a new tuple of lists ({value})"
    if key is not None:
        m.factor.extra = value
        return f"{name}.factor.extra = {value} (a float subclass's instance dict)"
    m.factor = h.mod.Factor(value)
    m.factor.extra = 0.0
    return f"{name}.factor = Factor({value})"


# --------------------------------------------------------------------------- functions


def helper_defaults(h, target, arg):
    h.mod.helper.__defaults__ = (_value([2.0, 1.0, 0.0], arg),)
    return f"helper.__defaults__ = {h.mod.helper.__defaults__}"


def helper_kwdefaults(h, target, arg):
    h.mod.helper.__kwdefaults__["mode"] = _value(["sub", "add"], arg)
    return f"helper.__kwdefaults__['mode'] = {h.mod.helper.__kwdefaults__['mode']!r} (in place)"


def helper_code(h, target, arg):
    what, code = _value([("helper_tripled", h.mod.helper_tripled.__code__), ("its original", h.helper_code)], arg)
    h.mod.helper.__code__ = code
    return f"helper.__code__ = {what} __code__"


def frame_defaults(h, target, arg):
    """The compiled frame's own defaults: ``Free.forward`` and ``step`` (watch_models)."""
    gain = _value([2.0, 1.0, -1.0], arg)
    h.mod.Free.forward.__defaults__ = h.mod.step.__defaults__ = (gain,)
    return f"Free.forward.__defaults__ = step.__defaults__ = ({gain},)"


def frame_code(h, target, arg):
    """The compiled frame's own code replaced (what IPython's autoreload does)."""
    mod = h.mod
    if arg % 2:
        mod.Free.forward.__code__, mod.step.__code__ = h.frame_code
        return "Free.forward.__code__, step.__code__ = their originals"
    mod.Free.forward.__code__, mod.step.__code__ = mod.free_forward_twice.__code__, mod.step_twice.__code__
    return "Free.forward.__code__, step.__code__ = their twins' (*2)"


def closure_cell(h, target, arg):
    value = _value([1.0, -2.0, 0.0], arg)
    h.mod.set_bias(value)
    return f"closure cell bias = {value} (nonlocal)"


# --------------------------------------------------------------------------- modules


def class_swapped(h, target, arg):
    name, m = pick(h.swappable(), target)
    swaps = {h.mod.Layer: h.mod.LayerTwice, h.mod.LayerTwice: h.mod.Layer,
             h.mod.Net: h.mod.NetTwice, h.mod.NetTwice: h.mod.Net}
    m.__class__ = swaps[type(m)]
    return f"{name}.__class__ = {type(m).__name__}"


def forward_replaced(h, target, arg):
    name, root = pick(h.roots(), target)
    if arg % 2 and "forward" in vars(root):
        del root.forward
        return f"{name}.forward (instance) deleted"
    root.forward = types.MethodType(h.mod.forward_plus, root)
    return f"{name}.forward = types.MethodType(forward_plus, {name})"


def buffer_replaced(h, target, arg):
    name, layer = pick(h.layers(), target)
    shape = (1,) if arg % 3 == 2 else layer.offset.shape  # (1,) broadcasts: another shape
    layer.offset = torch.full(shape, float(arg % 3) - 0.5)
    return f"{name}.offset = a new buffer of shape {tuple(shape)}"


def param_data(h, target, arg):
    name, p = pick(h.parameters(), target)
    p.data = torch.randn(p.shape, generator=torch.Generator().manual_seed(arg), dtype=p.dtype)
    return f"{name}.data = other values, same shape"


def param_dtype(h, target, arg):
    name, m = pick([(n, m) for n, m in h.modules() if isinstance(m, (nn.Linear, nn.Conv2d))], target)
    dtype = torch.float32 if m.weight.dtype == torch.float64 else torch.float64
    for p in m.parameters():
        p.data = p.data.to(dtype)
    return f"{name}.weight.data, .bias.data = {dtype} (its input is cast to match)"


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def to_dtype(h, target, arg):
    name, m = pick(h.modules(), target)
    m.to(_value(DTYPES, arg))
    return f"{name}.to({_value(DTYPES, arg)})"


def channels_last(h, target, arg):
    name, m = pick(h.models(), target)
    fmt = torch.contiguous_format if arg % 2 else torch.channels_last
    m.to(memory_format=fmt)
    return f"{name}.to(memory_format={fmt})"


def train_eval(h, target, arg):
    name, m = pick(h.modules(), target)
    m.train(arg % 2 == 0)
    return f"{name}.{'train' if arg % 2 == 0 else 'eval'}()"


def submodule_swapped(h, target, arg):
    name, layer = pick(h.layers(), target)
    choice = arg % 4
    if choice == 3:
        layer.lin = nn.Linear(layer.lin.in_features, layer.lin.out_features).to(layer.lin.weight.dtype)
        return f"{name}.lin = a new Linear"
    layer.drop = [nn.Identity(), nn.Tanh(), nn.Dropout(0.5)][choice]
    return f"{name}.drop = {layer.drop!r}"


# --------------------------------------------------------------------------- inputs


def input_field(h, target, arg):
    if h.input_kind == "tensor":
        return None
    field, value = _value([("scale", 2.0), ("mode", "sub"), ("scale", 0.0), ("mode", "add"), ("scale", 1.0)], arg)
    h.fields[field] = value
    where = "the held input" if h.held is not None else "each new input"
    if isinstance(h.held, dict):
        h.held[field] = value
    elif h.held is not None:
        setattr(h.held, field, value)
    return f"{where}: {field} = {value!r}"


def input_new(h, target, arg):
    if h.input_kind == "tensor":
        return None
    h.held = None
    gc.collect()  # the old input object dies before the new one comes
    h.held = h.make_input()
    return f"the input object dies, a new {h.input_kind} comes"


def input_per_call(h, target, arg):
    if h.input_kind == "tensor":
        return None
    h.held = h.make_input() if h.held is None else None
    return "the same input object on every call" if h.held is not None else "a new input object per call"


CATALOG = {f.__name__: f for f in (
    forward_hook, pre_hook, global_hook, remove_hook, hook_order, config_attr, config_replaced, config_dict, config_bases,
    global_value, builtin_shadowed, list_changed, holder_changed, class_attr, metaclass_attr, method_class,
    method_instance, helper_defaults, helper_kwdefaults, helper_code, frame_defaults, frame_code, closure_cell,
    class_swapped, forward_replaced, buffer_replaced, param_data, param_dtype, to_dtype, channels_last, train_eval,
    submodule_swapped, input_field, input_new, input_per_call)}
