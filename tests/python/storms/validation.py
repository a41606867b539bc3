"""A new options dict per call whose request id only a length check reads: no call of the
loop fails it, but dropping its guard would skip the check (the fix must keep it)."""

import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x, options):
        if len(options["request_id"]) > 64:  # validation: never true for a real id
            raise ValueError("request id too long")
        y = self.proj(x)
        if options.get("scale") is not None:
            y = y * options["scale"]
        return y


def build():
    return Block().eval(), (torch.randn(2, 8), {"request_id": "req-0", "scale": None})


def run(compiled, model):
    x = torch.randn(2, 8)
    for i in range(20):
        compiled(x, {"request_id": f"req-{i}", "scale": None})
