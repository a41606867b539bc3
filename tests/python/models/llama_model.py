"""A transformers ``LlamaForCausalLM`` from a small ``LlamaConfig`` (random weights, nothing
downloaded) at one greedy decode step: a ``StaticCache`` prefilled with a 3-token prompt,
the next token and its ``cache_position``. Each call writes the cache in place. The cache is
passed by the keyword the installed transformers' forward takes (``cache``, or
``past_key_values`` in transformers 5.17: ``guardpolicy.tools.decode.cache_keyword``)."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

from guardpolicy.tools.decode import cache_keyword

PROMPT = (1, 5, 7)


def config(layers: int = 2, width: int = 32) -> LlamaConfig:
    """``layers`` decoder layers of hidden size ``width`` (MLP ``2 * width``, 4 heads, 2 KV heads)."""
    return LlamaConfig(vocab_size=128, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def prefilled(model, max_cache_len: int = 16):
    """A StaticCache holding the prompt, and the greedy next token."""
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([PROMPT]), **{cache_keyword(model): cache},
                    cache_position=torch.arange(len(PROMPT)))
    return cache, out.logits[:, -1:].argmax(-1)


def build(layers: int = 2, width: int = 32):
    """The decode step: ``(model, (), kwargs)``; ``layers``/``width`` as ``config``'s
    (bench/bench_depth.py builds it at 2, 36 and 82 layers)."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(config(layers, width)).eval()
    cache, token = prefilled(model)
    return model, (), {"input_ids": token, cache_keyword(model): cache, "cache_position": torch.tensor([len(PROMPT)])}
