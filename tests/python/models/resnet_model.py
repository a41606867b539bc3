"""A small ResNet-like conv net, handed over in ``eval()``: a stem conv + ``BatchNorm2d``, two
residual blocks of conv–BN–ReLU (the second one strided, with a 1×1 projection), global
average pooling and a ``Linear`` head. Input: ``(2, 3, 32, 32)`` float32, NCHW."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + self.shortcut(x))


class ResNetLike(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = Block(8, 8)
        self.layer2 = Block(8, 16, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        h = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(h), 1))


def build():
    torch.manual_seed(0)
    model = ResNetLike()
    with torch.no_grad():  # running statistics that are not the identity, as after training
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval(), (torch.randn(2, 3, 32, 32),)
