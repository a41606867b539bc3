"""The audit models: a core (the demo MLP, or a tiny transformers GPT-2) wrapped in
``AuditModel``, whose forward reads every piece of state a change of ``changes.CHANGES``
touches, so that each change shows in the output when nothing guards it.

The module-level ``AUDIT_SCALE`` and ``AUDIT_CONFIG`` are globals of THIS module: the
forward reads them here (Dynamo's ``G['AUDIT_SCALE']``), so the changes that rebind them
(``changes._set_global``) rebind them here. Importing this module does not import torch.
"""

from __future__ import annotations

from typing import Any

#: The audit models ``--model`` accepts.
MODEL_NAMES = ("mlp", "gpt2")

#: A module-level constant the audit model's forward reads (``G['AUDIT_SCALE']``).
AUDIT_SCALE = 1.0
#: A module-level config dict the audit model's forward reads (``G['AUDIT_CONFIG']['bias']``).
AUDIT_CONFIG = {"bias": 0.0}


def _make_closure(factor: float):
    """``(post_fn, set_factor)``: ``post_fn(h) = h * factor`` reads the closure cell
    ``factor``; ``set_factor(v)`` rebinds it (what a change to a closure variable is)."""

    def post_fn(h):
        return h * factor

    def set_factor(value):
        nonlocal factor
        factor = value

    return post_fn, set_factor


_CLASSES: dict[str, type] = {}


def _classes() -> dict[str, type]:
    """The audit ``nn.Module`` classes, defined on first use (importing this module does not
    import torch)."""
    if _CLASSES:
        return _CLASSES
    import torch
    from torch import nn

    class AuditModel(nn.Module):
        """``core`` followed by a head that reads every piece of state the audit changes.

        ``post`` (built-in Linear; forward-hook target, swapped for a new Linear), ``act``
        (Tanh, swapped for Sigmoid), ``drop`` (Dropout(p=1): ``+1`` in eval, ``+0`` in train),
        ``gain`` (a Parameter, replaced), ``offset`` (a buffer, changed in place), ``scale``
        (float attribute), ``shift`` (int attribute), ``post_fn`` (a closure), the globals
        ``AUDIT_SCALE`` and ``AUDIT_CONFIG['bias']``, grad mode (``torch.is_grad_enabled()``),
        the input's dtype, batch size and ``requires_grad``, and a tensor created in forward
        with ``torch.get_default_dtype()``.

        With ``backend="eager"`` the compiled FX graph runs real torch ops in the caller's
        state, so grad mode, ``requires_grad`` and the default dtype only go stale where the
        forward reads them in Python (the branches and the ``dtype=`` below): Dynamo then
        bakes the value read at trace time into the graph, as real models do.
        """

        def __init__(self, core: nn.Module, width: int):
            super().__init__()
            self.core = core
            self.post = nn.Linear(width, width)
            self.act = nn.Tanh()
            self.drop = nn.Dropout(p=1.0)
            self.gain = nn.Parameter(torch.ones(width))
            self.register_buffer("offset", torch.zeros(width))
            self.scale = 1.0
            self.shift = 0
            self.post_fn, self.set_factor = _make_closure(1.0)

        def forward(self, x):
            h = self.core(x.to(torch.float32))
            h = self.act(self.post(h)) * self.gain + self.offset
            h = h * self.scale + self.shift
            h = h + self.drop(torch.ones_like(h))  # eval: +1; train: Dropout(p=1) zeroes it
            h = h * AUDIT_SCALE + AUDIT_CONFIG["bias"]
            h = self.post_fn(h)
            if torch.is_grad_enabled():  # a term only while gradients are recorded
                h = h + 0.125
            if x.requires_grad:  # a path taken only when gradients flow to the input
                h = h * 0.5
            out = h.to(x.dtype).reshape(x.shape[0], -1)  # the input's dtype, one row per sample
            return out + torch.zeros(out.shape[-1], dtype=torch.get_default_dtype())  # default dtype

    class GPT2Core(nn.Module):
        """A tiny transformers GPT-2 LM fed ``inputs_embeds`` (a float input, so that dtype
        and ``requires_grad`` changes apply); returns the logits."""

        def __init__(self):
            super().__init__()
            from transformers import GPT2Config, GPT2LMHeadModel
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            config = GPT2Config(
                n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64, use_cache=False,
                bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            )
            self.lm = GPT2LMHeadModel(config)

        def forward(self, x):
            return self.lm(inputs_embeds=x).logits

    _CLASSES.update(AuditModel=AuditModel, GPT2Core=GPT2Core)
    return _CLASSES


def build_audit_model(name: str, seed: int = 0) -> tuple[Any, tuple]:
    """``(model, example_inputs)`` for ``name`` in ``MODEL_NAMES``: an ``AuditModel`` in eval
    mode around the demo MLP (input ``(4, 64)``) or a tiny GPT-2 (input embeddings
    ``(1, 16, 64)``). Same seed, same weights and input."""
    import torch

    cls = _classes()
    if name == "mlp":
        from ..common.models import build_mlp

        core, (x,) = build_mlp(seed=seed)
        width = 16
    elif name == "gpt2":
        torch.manual_seed(seed)
        core = cls["GPT2Core"]()
        x = torch.randn(1, 16, 64)
        width = 256
    else:
        raise KeyError(f"unknown audit model {name!r}; known: {', '.join(MODEL_NAMES)}")
    torch.manual_seed(seed + 1)
    model = cls["AuditModel"](core, width).eval()
    return model, (x,)
