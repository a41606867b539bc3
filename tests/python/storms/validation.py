"""The options storm of options_dict.py behind a length check of the request id: no call of
the loop fails it, but dropping the id's guard would skip the check (the fix must keep it)."""

import torch
from options_dict import Block, run  # noqa: F401 - run: the same loop


class Checked(Block):
    def forward(self, x, options):
        if len(options["request_id"]) > 64:  # validation: never true for the loop's ids
            raise ValueError("request id too long")
        return super().forward(x, options)


def build():
    return Checked().eval(), (torch.randn(2, 8), {"request_id": "req-0", "scale": None})
