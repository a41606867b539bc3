"""The one ``--model`` convention of ``capture``, ``bench``, ``audit`` and ``suggest``.

A model spec is one of

* a built-in name (``mlp``, ``gpt2``, ... : ``guardpolicy.tools.common.models.MODEL_NAMES``);
* ``FILE.py`` or ``FILE.py:FUNC``: the Python file is imported as a fresh module (its
  directory first on ``sys.path`` while importing) and ``FUNC`` (default ``build``) called;
* ``package.module:FUNC``: the module is imported (the working directory first on
  ``sys.path``, as ``python -m`` does) and ``FUNC`` called.

``FUNC()`` returns ``(model_or_fn, example_args)`` or ``(model_or_fn, example_args,
example_kwargs)``: ``model_or_fn(*example_args, **example_kwargs)`` runs the model.
Every problem is a ``ModelSpecError`` saying what is wrong, with ``FILE:LINE`` (and column,
for a syntax error) where a file is at fault; no traceback is needed to read it.
Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
import traceback
from typing import Any, Callable

DEFAULT_FUNC = "build"


class ModelSpecError(ValueError):
    """A ``--model`` spec that cannot be resolved, imported, called or used."""


@dataclasses.dataclass(frozen=True)
class BuiltModel:
    """What a model spec's function returned: ``fn(*args, **kwargs)`` runs the model."""

    fn: Any
    args: tuple
    kwargs: dict

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A resolved spec: ``label`` (for tables), ``origin`` (what was given) and ``build()``."""

    label: str
    origin: str
    build: Callable[[], BuiltModel]


def _where(exc: BaseException, path: str | None) -> str:
    """``FILE:LINE`` of the innermost traceback frame in ``path`` (or the innermost frame
    at all when ``path`` is None or never appears); "" without a traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    if path is not None:
        real = os.path.realpath(path)
        mine = [f for f in frames if os.path.realpath(f.filename) == real]
        if mine:
            return f"{mine[-1].filename}:{mine[-1].lineno}"
    return f"{frames[-1].filename}:{frames[-1].lineno}"


def _import_error(exc: BaseException, what: str, path: str | None) -> ModelSpecError:
    if isinstance(exc, SyntaxError):
        loc = f"{exc.filename or what}:{exc.lineno or 0}:{exc.offset or 0}"
        return ModelSpecError(f"{loc}: SyntaxError: {exc.msg}")
    where = _where(exc, path) or what
    return ModelSpecError(f"{where}: importing {what} raised {type(exc).__name__}: {exc}")


def import_file(path: str) -> Any:
    if os.path.isdir(path):
        raise ModelSpecError(f"{path} is a directory: --model wants a Python file (FILE.py[:FUNC]) "
                             "or a module (package.module:FUNC)")
    if not os.path.isfile(path):
        raise ModelSpecError(f"no such file: {path}")
    name = "_guardpolicy_model_" + "".join(c if c.isalnum() else "_" for c in os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelSpecError(f"{path}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    old_path = list(sys.path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit of a script too: reported, not raised
        sys.modules.pop(name, None)
        raise _import_error(exc, path, path) from None
    finally:
        sys.path[:] = old_path
    return module


def _import_module(module_name: str) -> Any:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ModelSpecError(f"no module named {exc.name!r} (give FILE.py[:FUNC] or package.module:FUNC)") from None
        raise _import_error(exc, module_name, None) from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001
        raise _import_error(exc, module_name, None) from None


def _function(module: Any, func: str, where: str) -> Callable:
    obj = module
    for part in func.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if not callable(obj):
        raise ModelSpecError(f"{where}: defines no function `{func}()` returning "
                             f"(model_or_fn, example_args[, example_kwargs])")
    return obj


def _checked(result: Any, where: str, func: str) -> BuiltModel:
    if not (isinstance(result, tuple) and len(result) in (2, 3)):
        raise ModelSpecError(f"{where}: {func}() must return (model_or_fn, example_args[, example_kwargs]), "
                             f"not {type(result).__name__}")
    fn, args = result[0], result[1]
    kwargs = result[2] if len(result) == 3 else {}
    if not callable(fn):
        raise ModelSpecError(f"{where}: {func}() returned a {type(fn).__name__} as the model, which is not callable")
    if not isinstance(args, (tuple, list)):
        raise ModelSpecError(f"{where}: {func}() returned {type(args).__name__} as example_args; "
                             f"expected a tuple of positional inputs")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ModelSpecError(f"{where}: {func}() returned {type(kwargs).__name__} as example_kwargs; "
                             f"expected a dict of keyword inputs")
    return BuiltModel(fn, tuple(args), dict(kwargs))


def _caller(func_obj: Callable, where: str, func: str, path: str | None) -> Callable[[], BuiltModel]:
    def build() -> BuiltModel:
        try:
            result = func_obj()
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code: reported with its file:line
            raise ModelSpecError(f"{_where(exc, path) or where}: {func}() raised {type(exc).__name__}: {exc}") from None
        return _checked(result, where, func)

    return build


def split_spec(spec: str) -> tuple[str, str | None]:
    """``(target, FUNC or None)``: ``FILE.py:FUNC`` and ``module:FUNC`` split at the last
    colon, unless the whole spec names an existing file."""
    if os.path.exists(spec) or ":" not in spec:
        return spec, None
    target, func = spec.rsplit(":", 1)
    return target, (func or None)


def is_file_spec(spec: str) -> bool:
    """Whether ``spec`` names a Python file (``FILE.py[:FUNC]``, or an existing path)."""
    target, _ = split_spec(spec)
    return target.endswith(".py") or os.sep in target or os.path.exists(target)


def resolve(spec: str) -> ModelSpec:
    """The ``ModelSpec`` for ``spec`` (see the module docstring). Files and modules are
    imported here, so a bad file fails now; ``FUNC`` is called by ``build()``. Raises
    ``ModelSpecError``."""
    from .models import MODEL_NAMES, build as build_builtin

    if spec in MODEL_NAMES and not os.path.exists(spec):
        def builtin() -> BuiltModel:
            model, inputs = build_builtin(spec)
            return BuiltModel(model, tuple(inputs), {})

        return ModelSpec(spec, spec, builtin)
    target, func = split_spec(spec)
    if is_file_spec(spec):
        module = import_file(target)
        name = func or DEFAULT_FUNC
        fn = _function(module, name, target)
        label = os.path.basename(target) + (f":{func}" if func else "")
        return ModelSpec(label, spec, _caller(fn, target, name, target))
    if func is None:
        raise ModelSpecError(f"unknown model {spec!r}; give a built-in name ({', '.join(MODEL_NAMES)}), "
                             f"FILE.py[:FUNC] or package.module:FUNC")
    module = _import_module(target)
    fn = _function(module, func, target)
    return ModelSpec(spec, spec, _caller(fn, spec, func, getattr(module, "__file__", None)))


MODEL_HELP = ("a built-in model (mlp, gpt2, bert, llama), FILE.py[:FUNC] or package.module:FUNC; "
              f"FUNC (default {DEFAULT_FUNC}) returns (model_or_fn, example_args[, example_kwargs])")
