"""``python -m guardpolicy bench``: per-call guard overhead of a model under every way of
cutting it that torch and guardpolicy offer, measured in one interleaved run.

    python -m guardpolicy bench [--model mlp|gpt2|bert|llama|SCRIPT.py ...]
                                [--policy FILE[:NAME] ...] [--calls N] [--json OUT] [--plot OUT.png]

``make demo`` runs this through ``python -m guardpolicy demo`` (``guardpolicy.tools.demo``).

Variants (one table row each; ``via`` says how the model was compiled)
-----------------------------------------------------------------------
* ``eager``: the model itself, no ``torch.compile``.
* ``no filter`` (``torch.compile``, no ``guard_filter_fn``): the baseline of every ratio.
* ``no filter +ift``: ``guardpolicy.compile`` with a keep-everything policy carrying
  ``config install_free_tensors = true`` (recipe 1 of "Reducing Guard Overhead");
  ``no filter +ift (torch)``: the same knob set the torch way, Dynamo's config patch
  (``install_free_tensors=True``, ``torch_internals.config_patch``) around compilation and around each block of timed calls
  (entering it is not timed), i.e. what a global setting costs.
* ``stance after N``: ``guardpolicy.compile`` with a keep-everything policy carrying
  ``stance skip_guard_eval_unsafe after N calls`` (recipe 4; N = ``--stance-after``);
  ``set_stance (torch)``: ``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``
  entered around each block of timed calls after warm-up (entering it is not timed).
* per ``guardpolicy.STD_POLICIES`` name (recipe 2 and the other built-ins):
  ``NAME``: ``guardpolicy.load_std(NAME)`` as ``guard_filter_fn`` of ``torch.compile``;
  ``torch.NAME_unsafe``: torch's own function as ``guard_filter_fn``;
  ``NAME +ift``: ``guardpolicy.compile`` with a policy written on the fly (``use NAME``, the
  std policy's ``default``, ``config install_free_tensors = true``);
  ``torch.NAME_unsafe +ift``: torch's function with the config patched as above.
* per ``--policy FILE``: ``POLICY``, ``guardpolicy.compile(model, policy)`` (its own
  ``config`` and ``stance`` lines apply); for a policy with ``config`` or ``stance`` lines,
  ``POLICY (torch)``: the policy as ``guard_filter_fn`` of ``torch.compile`` with its config
  patched and its stance entered the torch way (as above); and, unless the policy already
  sets it, ``POLICY +ift`` with ``install_free_tensors`` added to its config lines.

The ``guardpolicy.compile`` rows pay what it adds per call: nothing for ``config`` lines
(they act inside this object's compiles only) and one per-call hook for a ``stance`` line;
the pairs with the ``(torch)`` rows show it. Every compiled variant uses ``--backend``
(default ``eager``; ``inductor`` is what users run, and compiles each variant).

Columns
-------
* ``offered``/``kept``: guards offered to the filter and kept, summed over the compiled
  frames (no filter: Dynamo's pre-filter ``CompilationMetrics.guard_count``, all kept).
* ``tree``: leaf guards (relational guards counted once) plus the root's epilogue lambda
  guards in the final guard-manager tree of every cache entry of the variant; for stance
  variants ``full>diff``, where ``diff`` is the tree that runs under
  ``skip_guard_eval_unsafe`` (``GuardManagerWrapper.diff_guard_root``).
* ``guard µs``: torch's own guard-evaluation figure,
  torch's guard-manager profiler (``torch_internals.guard_profiler()(root, f_locals, 1)``: µs for one check;
  torch 2.13 evicts the CPU caches before it, so this is a cold-cache figure: the "Guard
  eval latency" that ``TORCH_LOGS=guards`` prints after each compile), median of
  ``--guard-iters`` samples. ``warm µs``: ``root.check(f_locals)`` called back to back
  (best of 15 samples of about 1 ms each), the steady-state cost. Both are sampled
  round-robin over the variants, on the tree that runs per call (the diff tree for stance
  variants), with ``f_locals`` the frame's locals on entry (the forward's arguments bound
  by name, plus a decorated forward's closure variables). "-" where torch lacks the
  function, the variant has several cache entries or frames, or the bound locals do not
  pass the guards.
* ``median``/``p90``: per-call latency in µs of ``--calls`` individually timed calls
  (``time.perf_counter_ns``), all under ``torch.no_grad()``; ``vs base``/``vs eager``:
  median over the baseline's / eager's median.

How the run goes (per model)
----------------------------
One ``torch.compiler.reset()``; every variant is compiled in turn (first call, timed as
``compile_s``) and warmed up (``max(--warmup, --stance-after)`` calls); its guard trees are
counted and its guard evaluation profiled once all variants exist; then ``--calls`` timed
calls per variant, round-robin in blocks of ``--block`` calls, with the garbage collector
off, so that machine noise hits every variant alike. Afterwards each variant is checked:
no recompilation while timing, output equal to eager's, and each standard policy offered
and kept exactly what torch's own function did (with and without ``+ift``).

Two details of torch 2.13 shape the run. Variants of one model share one code object and
so one cache-entry list, and Dynamo matches a cache entry to a call by backend *equality*;
two ``backend="eager"`` wrappers compare equal whatever their ``guard_filter_fn``, so each
variant gets its own backend function that calls the registered ``"eager"`` backend (same
compiled code, distinct cache entries). The list is most-recently-used first and lookup
compares backends in order, so each block starts with one untimed call that brings the
variant's entry to the front; the timed calls then measure what a single compiled model
pays.

Modules: ``rows`` (``Row``, one per table row, around its ``guardpolicy.tools.common.timing.Variant``;
``make_rows``; the tagged backends), ``guards`` (guard trees, guard evaluation), ``run``
(``run_model``; the calls are timed by ``guardpolicy.tools.common.timing.time_blocks``), ``output``
(table, legend, JSON rows, plot) and ``command`` (the parser and ``main``).
"""

from __future__ import annotations

from .command import build_parser, main  # noqa: F401
from .guards import count_tree_guards, frame_locals  # noqa: F401
from .output import LEGEND, format_table, row_json, write_plot  # noqa: F401
from .rows import BASELINE, EAGER, IFT, VIA_EAGER, VIA_GP, VIA_TORCH, Row, make_rows, stance_policy_source  # noqa: F401
from .run import RunOptions, run_model, warmup_calls  # noqa: F401
