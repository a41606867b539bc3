"""Writes ``bench/data/entries.json``: guard-entry rows captured from real models, for the
C++ benchmark (which replays them through the VM without torch).

Every row is one ``GuardFilterEntry`` as ``guardpolicy.tools.capture.entry_row`` reads it (every
schema field, plain JSON values, read by the C++ extractor itself: ``_core.entry_rows``). Models, all
CPU, random weights, nothing downloaded, each compiled once with ``backend="eager"`` under
``torch.no_grad()`` and a recording filter that keeps every guard:

* transformers GPT-2 (``GPT2LMHeadModel``) with n_layer in 1, 2, 4, 6, 8, 12 (width 64);
* transformers BERT (``BertModel``) from a small ``BertConfig`` with 1, 2, 4 and 6 layers;
* the demo MLP (``guardpolicy.tools.common.models.build_mlp``) with depth 2, 4 and 8;
* a function reading module-level globals (int, float, dict, tensor, nn.Module).

Format: ``{"torch": version, "schema_version": 1, "models": [{"model", "frames",
"entries"}, ...], "rows": [{field: value, ...}, ...]}``. Rows are in capture order (model
by model, frame by frame, torch's guard order within a frame). Written compact; if the JSON
would exceed 8 MB it is written gzip-compressed as ``entries.json.gz`` instead.

    .venv/bin/python bench/capture_entries.py [--out bench/data/entries.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
import warnings

import torch

from guardpolicy.tools.common.models import build_mlp
from guardpolicy.tools.capture import capture, schema_version

MAX_PLAIN_BYTES = 8 * 1000 * 1000

# --------------------------------------------------------------------------- models

GLOBAL_SCALE = 3
GLOBAL_SHIFT = 0.25
GLOBAL_CONFIG = {"gain": 2.0, "use_bias": True, "mode": "fast"}
GLOBAL_TABLE = torch.linspace(0.0, 1.0, 16)
GLOBAL_LAYER = None  # a torch.nn.Linear, built in main()


def read_globals(x):
    """A plain function reading module-level globals of several kinds."""
    y = x * GLOBAL_SCALE + GLOBAL_SHIFT
    if GLOBAL_CONFIG["use_bias"]:
        y = y + GLOBAL_TABLE
    if GLOBAL_CONFIG["mode"] == "fast":
        y = y * GLOBAL_CONFIG["gain"]
    return GLOBAL_LAYER(y).relu()


def gpt2(n_layer: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=n_layer, n_embd=64, n_head=4, vocab_size=256, n_positions=64,
                        use_cache=False, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    return model, (torch.randint(0, 256, (1, 16)),), {}


def bert(n_layer: int):
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=64, num_hidden_layers=n_layer, num_attention_heads=4,
                        intermediate_size=128, vocab_size=256, max_position_embeddings=64)
    torch.manual_seed(0)
    model = BertModel(config).eval()
    ids = torch.randint(0, 256, (1, 16))
    return model, (ids,), {"attention_mask": torch.ones_like(ids)}


def mlp(depth: int):
    model, args = build_mlp(depth=depth)
    return model, args, {}


def globals_fn(_: int):
    global GLOBAL_LAYER
    torch.manual_seed(0)
    GLOBAL_LAYER = torch.nn.Linear(16, 16)
    return read_globals, (torch.randn(4, 16),), {}


MODELS = (
    [(f"gpt2-{n}l", gpt2, n) for n in (1, 2, 4, 6, 8, 12)]
    + [(f"bert-{n}l", bert, n) for n in (1, 2, 4, 6)]
    + [(f"mlp-{n}", mlp, n) for n in (2, 4, 8)]
    + [("globals_fn", globals_fn, 0)]
)


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "data", "entries.json"))
    args = parser.parse_args(argv)

    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    rows: list[dict] = []
    models = []
    t0 = time.perf_counter()
    for label, factory, n in MODELS:
        fn, fargs, fkwargs = factory(n)
        t = time.perf_counter()
        with torch.no_grad():
            snap = capture(fn, *fargs, **fkwargs)
        models.append({"model": label, "frames": len(snap.frames), "entries": snap.entry_count})
        rows.extend(snap.rows())
        print(f"{label:12s} {len(snap.frames):2d} frames {snap.entry_count:6d} entries "
              f"({time.perf_counter() - t:.1f} s)", flush=True)
    doc = {"torch": str(torch.__version__), "schema_version": schema_version(), "models": models, "rows": rows}
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    out = args.out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    data = text.encode("utf-8")
    if len(data) > MAX_PLAIN_BYTES and not out.endswith(".gz"):
        out += ".gz"
        print(f"JSON is {len(data)} bytes (> {MAX_PLAIN_BYTES}): writing gzip-compressed", file=sys.stderr)
    if out.endswith(".gz"):
        with gzip.open(out, "wb", compresslevel=9) as f:
            f.write(data)
    else:
        with open(out, "wb") as f:
            f.write(data)
    print(f"wrote {out}: {len(rows)} rows from {len(models)} models, {os.path.getsize(out)} bytes "
          f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
