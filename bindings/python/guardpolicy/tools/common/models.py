"""Small CPU models with random weights, shared by the demo, the bench and other tools.

``build(name) -> (model, example_inputs)``: ``model`` is in eval mode on the CPU, and
``model(*example_inputs)`` runs it. Nothing is downloaded: GPT-2, BERT and Llama are built
from small configs with random weights. transformers is imported only when one of those is
built.
(A user's model: ``--model FILE.py[:FUNC]``, guardpolicy.tools.common.model_spec.)
"""

from __future__ import annotations

from typing import Any

from .extras import require

#: Names ``build`` accepts.
MODEL_NAMES = ("mlp", "gpt2", "bert", "llama")

#: The models ``make demo`` (and ``python -m guardpolicy bench`` by default) measures.
DEMO_MODELS = ("mlp", "gpt2")


def _torch():
    import torch

    return torch


_MLP_CLASS = None


def _mlp_class():
    """The MLP ``nn.Module`` class, defined on first use so that importing this module does
    not import torch."""
    global _MLP_CLASS
    if _MLP_CLASS is not None:
        return _MLP_CLASS
    torch = _torch()
    nn = torch.nn

    class MLP(nn.Module):
        """``depth`` blocks of Linear -> LayerNorm -> GELU with a residual add, then a
        LayerNorm and a Linear head. A user-defined module holding built-in ones, so the
        nn-module policies have both kinds to act on."""

        def __init__(self, width: int = 64, depth: int = 4, out_features: int = 16):
            super().__init__()
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.GELU())
                for _ in range(depth)
            )
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, out_features)

        def forward(self, x):
            for block in self.blocks:
                x = x + block(x)
            return self.head(self.norm(x))

    _MLP_CLASS = MLP
    return MLP


def build_mlp(batch: int = 4, width: int = 64, depth: int = 4, seed: int = 0) -> tuple[Any, tuple]:
    """A plain torch MLP (Linear + LayerNorm blocks) and one float32 input of shape
    ``(batch, width)``; weights from ``torch.manual_seed(seed)``."""
    torch = _torch()
    torch.manual_seed(seed)
    model = _mlp_class()(width=width, depth=depth).eval()
    x = torch.randn(batch, width)
    return model, (x,)


def _language_model(model_class: Any, config: Any, seq_len: int, seed: int) -> tuple[Any, tuple]:
    """``model_class(config)`` with weights from ``seed``, in eval mode, and random
    ``input_ids`` of shape ``(1, seq_len)`` below ``config.vocab_size``."""
    torch = _torch()
    torch.manual_seed(seed)
    model = model_class(config).eval()
    return model, (torch.randint(0, config.vocab_size, (1, seq_len)),)


def build_gpt2(seq_len: int = 16, seed: int = 0) -> tuple[Any, tuple]:
    """A transformers ``GPT2LMHeadModel`` from a small config (2 layers, width 64, 4 heads,
    vocabulary 256, 64 positions; random weights, ``use_cache=False``) and ``input_ids`` of
    shape ``(1, seq_len)``. Its output is a ModelOutput; compare ``.logits``."""
    transformers = require("transformers", "the demo models")  # lazy: heavy import
    GPT2Config, GPT2LMHeadModel = transformers.GPT2Config, transformers.GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=256,
        n_positions=64,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    return _language_model(GPT2LMHeadModel, config, seq_len, seed)


def build_bert(seq_len: int = 16, seed: int = 0) -> tuple[Any, tuple]:
    """A transformers ``BertModel`` from a small config (2 layers, width 64, 4 heads,
    intermediate 128, vocabulary 256, 64 positions; random weights) and ``input_ids`` of
    shape ``(1, seq_len)``. Its output is a ModelOutput; compare ``last_hidden_state``."""
    transformers = require("transformers", "the demo models")  # lazy: heavy import
    BertConfig, BertModel = transformers.BertConfig, transformers.BertModel

    config = BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=64,
    )
    return _language_model(BertModel, config, seq_len, seed)


def build_llama(seq_len: int = 16, seed: int = 0) -> tuple[Any, tuple]:
    """A transformers ``LlamaForCausalLM`` from a small config (2 layers, width 64, 4 heads,
    2 key/value heads, intermediate 128, vocabulary 256, 64 positions; random weights,
    ``use_cache=False``) and ``input_ids`` of shape ``(1, seq_len)``. Compare ``.logits``."""
    transformers = require("transformers", "the demo models")  # lazy: heavy import
    LlamaConfig, LlamaForCausalLM = transformers.LlamaConfig, transformers.LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )
    return _language_model(LlamaForCausalLM, config, seq_len, seed)


_BUILDERS = {"mlp": build_mlp, "gpt2": build_gpt2, "bert": build_bert, "llama": build_llama}


def build(name: str) -> tuple[Any, tuple]:
    """``(model, example_inputs)`` for ``name`` in ``MODEL_NAMES``; raises ``KeyError``
    naming the known models otherwise."""
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}") from None
    return builder()


def output_tensor(out: Any) -> Any:
    """The tensor to compare from a model output: ``.logits`` of a transformers
    ModelOutput, its first field otherwise (``last_hidden_state``), the first element of a
    tuple, or the tensor itself."""
    if hasattr(out, "logits"):
        return out.logits
    if hasattr(out, "to_tuple"):
        return out.to_tuple()[0]
    if isinstance(out, (tuple, list)):
        return out[0]
    return out
