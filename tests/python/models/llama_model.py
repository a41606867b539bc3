"""A transformers ``LlamaForCausalLM`` from a small ``LlamaConfig`` (random weights, nothing
downloaded) at one greedy decode step: a ``StaticCache`` prefilled with a 3-token prompt,
the next token and its ``cache_position``. Each call writes the cache in place."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

PROMPT = (1, 5, 7)


def config() -> LlamaConfig:
    return LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def prefilled(model, max_cache_len: int = 16):
    """A StaticCache holding the prompt, and the greedy next token."""
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([PROMPT]), cache=cache, cache_position=torch.arange(len(PROMPT)))
    return cache, out.logits[:, -1:].argmax(-1)


def build():
    torch.manual_seed(0)
    model = LlamaForCausalLM(config()).eval()
    cache, token = prefilled(model)
    return model, (), {"input_ids": token, "cache": cache, "cache_position": torch.tensor([len(PROMPT)])}
