"""A storm of the ComfyUI kind: a new options dict per call whose request id only a deny-list
lookup reads (the list is empty); every call compiles anew under plain torch.compile."""

import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.blocked = frozenset()  # request ids refused; none in practice

    def forward(self, x, options):
        if options["request_id"] in self.blocked:
            raise PermissionError(options["request_id"])
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
