"""The demo's GPT-2 (guardpolicy.tools.common.models.build_gpt2) with a storm injected: a
serving wrapper takes a new options dict per request whose request id only a deny-list
lookup reads (the list is empty; bench/bench_recompiles.py)."""

import torch

from guardpolicy.tools.common.models import build_gpt2


class Served(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm
        self.blocked = frozenset()  # request ids refused; none in practice

    def forward(self, input_ids, options):
        if options["request_id"] in self.blocked:
            raise PermissionError(options["request_id"])
        return self.lm(input_ids).logits


def build():
    lm, (input_ids,) = build_gpt2()
    return Served(lm).eval(), (input_ids, {"request_id": "req-0"})


def run(compiled, model):
    _, (input_ids, _) = build()
    for i in range(20):
        compiled(input_ids, {"request_id": f"req-{i}"})
