"""Plain lists under watch: a list read by a watched guard (a KV cache's ``layers``, a module's
list of floats) has its items compared by identity on every call, since no event tells of
``append``, ``pop`` or ``l[0] = x``; the guards through it are watched, not checked. Every
change below is made after warm-up, on the normal path and with direct dispatch, and each call
after it equals eager's on the same model and cache (``torch.testing``); the guards that read
through the list have left torch's manager (``stats(...).watches.unwatched``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import guardpolicy as gp

WATCH = "guardpolicy 1\n\npolicy w {\n  default watch\n}\n"
PATHS = [None, "direct"]


class CacheLayer:
    """One layer of a cache: its keys ``(1, 4)`` and a scale read as a constant."""

    def __init__(self, scale: float):
        self.keys = torch.ones(1, 4)
        self.scale = scale


class Cache:
    """A KV-cache-like input object: its layers in a plain list, as transformers' caches hold them."""

    def __init__(self, scales: list[float]):
        self.layers = [CacheLayer(s) for s in scales]


class Decoder(nn.Module):
    """``lin(x)`` scaled by ``taps[0]``, shifted by each later tap, then by each cache layer's
    ``keys * scale``; ``x`` of shape ``(1, 4)``."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.taps = [1.0, 0.5]

    def forward(self, x, cache):
        x = self.lin(x) * self.taps[0]
        for t in self.taps[1:]:
            x = x + t
        for layer in cache.layers:
            x = x + layer.keys * layer.scale
        return x


def _run(dispatch, changes):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, cache, x = Decoder().eval(), Cache([1.0, 2.0]), torch.randn(1, 4)
    compiled = gp.compile(model, gp.load(WATCH), backend="eager", dispatch=dispatch)
    for _ in range(10):  # past warm-up (direct dispatch captures after 8 quiet calls)
        compiled(x, cache)
    unwatched = gp.stats(compiled).watches.unwatched
    through_lists = {(u.name, u.why) for u in unwatched if "layers" in u.name or "taps" in u.name}
    tensor = "a tensor's metadata changes without any dict changing"  # an input's tensor: checked
    assert through_lists == {(f"cache.layers[{i}].keys", tensor) for i in range(2)}, through_lists
    for what, change in changes(model, cache):
        change()
        for _ in range(2):  # the call that sees the change, and the one served after it
            torch.testing.assert_close(compiled(x, cache), model(x, cache), msg=lambda m, what=what: f"after {what}: {m}")
    return compiled


@pytest.mark.parametrize("dispatch", PATHS)
def test_a_modules_list_changed_in_place_is_seen(dispatch):
    def changes(model, cache):
        taps = model.taps
        return [
            ("taps[0] = 2.0", lambda: taps.__setitem__(0, 2.0)),
            ("taps[0] = 0.0", lambda: taps.__setitem__(0, 0.0)),
            ("taps[0] = -1.0", lambda: taps.__setitem__(0, -1.0)),
            ("taps.append(3.0)", lambda: taps.append(3.0)),
            ("taps.reverse()", taps.reverse),
            ("taps.pop()", taps.pop),
            ("taps[1:] = [] (one tap)", lambda: taps.__setitem__(slice(1, None), [])),
            ("taps.extend([1.0, 2.0]), then pop()", lambda: (taps.extend([1.0, 2.0]), taps.pop())),
            ("taps[:] = [1.0, 0.5] (as built)", lambda: taps.__setitem__(slice(None), [1.0, 0.5])),
            ("model.taps = a new list", lambda: setattr(model, "taps", [2.0, -0.5])),
            ("the new list's last item", lambda: model.taps.__setitem__(-1, 1.0)),
        ]

    _run(dispatch, changes)


@pytest.mark.parametrize("dispatch", PATHS)
def test_a_caches_list_of_layers_changed_in_place_is_seen(dispatch):
    def changes(model, cache):
        layers = cache.layers
        return [
            ("layers[0].scale = -1.0 (an object read through the list)", lambda: setattr(layers[0], "scale", -1.0)),
            ("layers[1] = another CacheLayer", lambda: layers.__setitem__(1, CacheLayer(0.0))),
            ("layers.append(a third)", lambda: layers.append(CacheLayer(4.0))),
            ("the third one's scale = 0.0", lambda: setattr(layers[2], "scale", 0.0)),
            ("layers.pop(0)", lambda: layers.pop(0)),
            ("layers.clear() (none left)", layers.clear),
            ("layers.append(one again)", lambda: layers.append(CacheLayer(1.0))),
            ("cache.layers = a new list", lambda: setattr(cache, "layers", [CacheLayer(2.0), CacheLayer(-2.0)])),
            ("the new list reversed", lambda: cache.layers.reverse()),
        ]

    _run(dispatch, changes)


def test_a_list_subclass_stays_checked():
    class Taps(list):
        pass

    torch._dynamo.reset()
    model, cache, x = Decoder().eval(), Cache([1.0]), torch.randn(1, 4)
    model.taps = Taps([1.0, 0.5])
    compiled = gp.compile(model, gp.load(WATCH), backend="eager")
    for _ in range(3):
        compiled(x, cache)
    model.taps[0] = 3.0
    torch.testing.assert_close(compiled(x, cache), model(x, cache))
    reasons = {u.why for u in gp.stats(compiled).watches.unwatched if "taps" in u.name}
    assert reasons == {"a `Taps` is not a kind the watch sees every change of (docs/design-notes/watch.md)"}, reasons


@pytest.mark.parametrize("dispatch", PATHS)
def test_a_cache_whose_list_a_state_holds_is_freed_with_its_layers(dispatch):
    """A state holds a watched list and its items; the cache at its root is held weakly, so
    dropping the cache drops the state, and the list's layers (and their tensors) are freed."""
    import gc
    import weakref

    torch._dynamo.reset()
    model, x = Decoder().eval(), torch.randn(1, 4)
    compiled = gp.compile(model, gp.load(WATCH), backend="eager", dispatch=dispatch)
    cache = Cache([1.0, 2.0])
    for _ in range(10):
        compiled(x, cache)
    dead = [weakref.ref(cache), weakref.ref(cache.layers[0]), weakref.ref(cache.layers[1].keys)]
    del cache
    gc.collect()
    assert [ref() is None for ref in dead] == [True, True, True]
    other = Cache([3.0])  # the entry still serves a new cache, checked in full first
    torch.testing.assert_close(compiled(x, other), model(x, other))
