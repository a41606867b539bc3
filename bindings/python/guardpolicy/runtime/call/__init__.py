"""The per-call runtime: what runs on the calls of a ``guardpolicy.compile`` result, apart
from what runs when a frame compiles. The per-call path with its C half (``call_path``, the
``CallLayer`` of bindings/runtime/call_layer.h), the frame locals it and direct dispatch bind
(``frame_locals``), direct dispatch (``dispatch``, and ``capture``, what it captures after
warm-up), the stance machine and the call count it runs on (``stance``), the stance's
recovery (``recovery``), and verify's comparison with eager of a sampled call on which only
dropped value guards failed (``compared``, with the state it records, ``written_state``, and
the dispatch mode its eager run runs under, ``write_guard``).

Below the compile-time glue (``compiled``, ``stats``, ``guard_filter``, ``dry_run``): a module
here imports none of it, nor the tools (tests/python/test_layers.py); it may import the
runtime's shared modules (``torch_internals``, ``verify``, ``frames``, ``logs``) and ``watch``.
"""
