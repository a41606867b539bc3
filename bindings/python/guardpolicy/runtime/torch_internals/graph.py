"""What the graph Dynamo hands a backend (a ``torch.fx.GraphModule``) runs per call in Python.

A graph reads each installed free tensor (``install_free_tensors``) as ``self.<name>`` in its
generated ``forward``. The GraphModule registers an ``nn.Parameter`` in its ``_parameters``, so
every such read misses the instance ``__dict__``, searches the class, raises AttributeError and
falls back to ``nn.Module.__getattr__``: about 1 µs a read on this project's machine, on every
call of a backend that runs ``gm.forward`` (``eager``, a user's Python backend). Inductor
reads them once, at compile time. ``AttributeReads`` hands the backend the graph with its
parameters also in the instance ``__dict__``, where the same read is one dict lookup.
"""

from __future__ import annotations

from typing import Any


class AttributeReads:
    """A ``torch.compile`` backend: ``backend`` (a registered name such as ``"eager"``, or a
    backend function) called on each GraphModule; where what it returns runs the graph's
    ``forward`` (``gm.forward`` or ``gm`` itself), the graph's parameters (``gm._parameters``,
    the same objects) are then set in its instance ``__dict__`` too. Not before: a backend
    that traces the graph (AOTAutograd, under Inductor or ``aot_eager``) swaps fake tensors
    into ``_parameters`` while it traces, and the reads must find them there. Nothing changes
    them later: a replaced tensor fails a guard and compiles a new graph.

    Equal to another ``AttributeReads`` of an equal backend, and hashed alike: Dynamo's cache
    lookup serves an entry only to a compile of an equal backend (``backend_match`` in
    torch/csrc/dynamo/extra_state.cpp), so objects compiled one by one share their code's
    cache entries as under ``torch.compile``. Any other attribute (``__name__``, which names
    the backend in torch's logs; ``reset``) is the backend's own."""

    def __init__(self, backend: Any) -> None:
        import torch._dynamo

        self.backend = torch._dynamo.lookup_backend(backend)

    def __call__(self, gm: Any, example_inputs: list, **kwargs: Any) -> Any:
        compiled = self.backend(gm, example_inputs, **kwargs)
        if compiled is gm or getattr(compiled, "__self__", None) is gm:  # it runs gm.forward per call
            vars(gm).update(gm._parameters)
        return compiled

    def __eq__(self, other: object) -> bool:
        return type(other) is AttributeReads and other.backend == self.backend

    def __hash__(self) -> int:
        return hash(self.backend)

    def __getattr__(self, name: str) -> Any:
        if name == "backend":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.backend, name)

    def __repr__(self) -> str:
        return f"AttributeReads({self.backend!r})"
