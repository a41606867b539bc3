"""Small models that read a config object, shared by the watch and audit tests: ``Scaled``
(a linear layer times ``config.scale``) and ``OwnGetattribute``, a config with its own
``__getattribute__`` as transformers' ``PretrainedConfig`` has (torch 2.11 reads its
attributes as ``object.__getattribute__(self.config, 'name')``, ``GenericAttrSource``; 2.13+
as ``self.config.name``), with a property computed from ``SOURCE``."""

import types

from torch import nn

#: What ``OwnGetattribute.offset`` computes its value from: an attribute of an object, not a
#: module global (a module's globals dict is watched whole: any change to it would be seen).
SOURCE = types.SimpleNamespace(offset=1.0)


class Config:
    def __init__(self, scale: float):
        self.scale = scale


class Scaled(nn.Module):
    """``lin(x) * config.scale``, ``x`` of shape ``(batch, 4)``."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * self.config.scale


class OwnGetattribute:
    def __init__(self):
        self.scale = 2.0

    def __getattribute__(self, key):
        return super().__getattribute__(key)

    @property
    def offset(self):
        return SOURCE.offset
