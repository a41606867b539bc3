"""The filter registry: every guard filter guardpolicy can hand to ``torch.compile`` by name.

    gp.filters()                                # what is there
    gp.filter("builtin.skip_guard_on_globals")  # torch's filter, native
    gp.filter("skip_guard_on_globals")          # the same filter written as a std policy
    gp.load_plugin("libgp_names.so")            # adds names.depth(), names.drop_deep
    gp.filter("names.drop_deep", max_depth=3)

Four kinds of entries, all returned as ``Policy`` objects (a ``guard_filter_fn``):

- ``builtin``: ``builtin.<name>``, torch's six ``torch.compiler.*_unsafe`` filters implemented
  natively (core/src/plugin/builtin_filters.cpp), decisions identical to torch's functions;
- ``std``: the same six written in the language (policies/std/*.gpol);
- ``plugin``: ``<plugin>.<filter>`` from a loaded plugin shared library;
- ``policy``: every policy loaded with ``guardpolicy.load`` in this process and still alive,
  by its name.

The registry itself is C++ (core/include/guardpolicy/registry.h), one per data directory.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .. import _core
from .data import DATA_DIR
from .errors import require_str
from .policy import Policy, PolicyOrigin


@dataclasses.dataclass(frozen=True)
class FilterParam:
    """A filter parameter: its name, type (``bool``, ``int``, ``string``) and default
    (``None`` when it must be given)."""

    name: str
    type: str
    default: Any
    has_default: bool


@dataclasses.dataclass(frozen=True)
class FilterInfo:
    """One registry entry. ``kind`` is ``builtin``, ``std``, ``plugin`` or ``policy``;
    ``origin`` is the plugin file, the policy file, or ``builtin``."""

    name: str
    kind: str
    doc: str
    params: tuple[FilterParam, ...]
    origin: str


@dataclasses.dataclass(frozen=True)
class PluginInfo:
    """A loaded plugin's declarations (see docs/plugins.md). ``fields``, ``functions`` and
    ``filters`` carry qualified names (``<plugin>.<name>``) and their types."""

    name: str
    version: str
    description: str
    path: str
    api_version: str
    fields: tuple[dict, ...]
    functions: tuple[dict, ...]
    filters: tuple[dict, ...]


def _data_dir() -> str:
    return str(DATA_DIR)


#: The example plugins shipped in the package (plugins/examples/): ``modinfo`` (fields read
#: from the Python value) and ``names`` (a function and a filter over guard names).
EXAMPLE_PLUGINS = ("modinfo", "names")


def example_plugin_path(name: str) -> str:
    """Path of an example plugin shared library shipped in the package, e.g.
    ``gp.load_plugin(gp.example_plugin_path("names"))``. Raises KeyError for other names."""
    require_str(name, "name")
    if name not in EXAMPLE_PLUGINS:
        raise KeyError(f"no example plugin {name!r}; known: {', '.join(EXAMPLE_PLUGINS)}")
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # guardpolicy/
    return os.path.join(package_dir, "plugins", f"libgp_{name}.so")


def load_plugin(path: str | os.PathLike, *, config: str = "") -> PluginInfo:
    """Loads a plugin shared library (``.so``) into this process.

    Every policy loaded afterwards may read its fields, call its functions and ``use`` its
    filters; ``filters()`` lists its filters. ``config`` is passed to the plugin's ``init``.
    Raises ``PluginError`` naming the file and the reason (not a shared library, no entry
    point, an ABI this guardpolicy does not support, an invalid or clashing declaration,
    ``init`` failed); nothing is loaded then and the process goes on.
    """
    require_str(config, "config")
    info = PluginInfo(**_plugin_fields(_core.load_plugin(os.fsencode(path), config, _data_dir())))
    _PLUGIN_CONFIGS[info.path] = config
    return info


_PLUGIN_CONFIGS: dict[str, str] = {}  # the config each plugin was loaded with, by path


def plugin_config(path: str) -> str:
    """The ``config`` the plugin at ``path`` (as ``PluginInfo.path``) was loaded with."""
    return _PLUGIN_CONFIGS.get(path, "")


def plugins() -> list[PluginInfo]:
    """The loaded plugins, the built-in filters (``builtin``) first."""
    return [PluginInfo(**_plugin_fields(p)) for p in _core.plugins(_data_dir())]


def _plugin_fields(d: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def filters() -> list[FilterInfo]:
    """Every filter by name: built-ins, std policies, plugin filters, then the policies
    loaded with ``guardpolicy.load`` in this process that are still alive."""
    return [
        FilterInfo(f["name"], f["kind"], f["doc"], tuple(FilterParam(*p) for p in f["params"]), f["origin"])
        for f in _core.filters(_data_dir())
    ]


def filter(name: str, **params: Any) -> Policy:  # noqa: A001 - guardpolicy.filter, as designed
    """The filter called ``name`` as a ``guard_filter_fn``, with ``params`` bound.

    ``builtin.*`` and plugin filters are compiled as a one-line policy ``use name(...)``, so
    ``explain`` names the filter. Raises ``PolicyError``: GP4001 for an unknown name (with
    the closest known name), GP4002 or GP2006 for a bad parameter, ``TypeError`` for a
    parameter value that is not bool, int or str.
    """
    require_str(name, "name")
    return Policy(_core.get_filter(name, params, _data_dir()),
                  PolicyOrigin(filter=name, params=tuple(sorted(params.items())), plugins=loaded_plugins()))


def loaded_plugins() -> tuple[tuple[str, str], ...]:
    """``(path, config)`` of every plugin loaded from a file (the built-ins have no path)."""
    return tuple((p["path"], plugin_config(p["path"])) for p in _core.plugins(_data_dir()) if p["path"])
