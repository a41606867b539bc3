"""``Linear`` + ``BatchNorm1d`` + ``Dropout``, handed over in ``eval()``: in ``train()`` the
BatchNorm updates its running statistics in place and the dropout draws a mask, both changed
by the model itself on every call. Input: ``(8, 16)`` float32."""

import torch
from torch import nn


class BNDropout(nn.Module):
    def __init__(self, width: int = 16, classes: int = 4):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.bn = nn.BatchNorm1d(width)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.drop(torch.relu(self.bn(self.fc(x)))))


def build():
    torch.manual_seed(0)
    return BNDropout().eval(), (torch.randn(8, 16),)
