"""A graph compiled by ``guardpolicy.compile`` for a backend that runs it in Python (``eager``)
reads its installed parameters from its instance ``__dict__``
(``torch_internals.AttributeReads``): no ``nn.Module.__getattr__`` per read, the same
objects, outputs equal to eager's after a parameter is replaced, and a backend equal to
another of the same backend (Dynamo shares cache entries only between equal backends)."""

import torch

import guardpolicy as gp
from guardpolicy.runtime import torch_internals
from guardpolicy.tools.latency import own_class_copy


class Three(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        return self.layers(x)


X = torch.randn(2, 4)


def _warm(graphs):
    """A ``Three`` compiled under ``watch_state`` on ``eager`` through a backend recording the
    graphs it is handed in ``graphs``, after 12 calls: ``(model, compiled)``."""
    eager = torch_internals.lookup_backend("eager")

    def recording(gm, example_inputs):
        graphs.append(gm)
        return eager(gm, example_inputs)
    torch.manual_seed(0)
    model = own_class_copy(Three().eval())
    compiled = gp.compile(model, "watch_state", backend=recording)
    with torch.no_grad():
        for _ in range(12):
            compiled(X)
    return model, compiled


def test_installed_parameters_are_read_from_the_graphs_dict(monkeypatch):
    graphs = []
    model, compiled = _warm(graphs)
    with torch.no_grad():
        (gm,) = graphs
        assert len(gm._parameters) == 6  # three weights and three biases, installed free tensors
        assert all(vars(gm)[name] is p for name, p in gm._parameters.items())
        reads = []
        module_getattr = torch.nn.Module.__getattr__

        def counting(self, name):
            reads.append(name)
            return module_getattr(self, name)
        monkeypatch.setattr(torch.fx.GraphModule, "__getattr__", counting)
        for _ in range(5):
            assert torch.equal(compiled(X), model(X))
    assert reads == []


def test_a_replaced_parameter_is_read_anew():
    graphs = []
    model, compiled = _warm(graphs)
    with torch.no_grad():
        model.layers[1].weight = torch.nn.Parameter(torch.randn(4, 4))
        for _ in range(3):
            assert torch.equal(compiled(X), model(X))
    assert len(graphs) == 2  # the new weight: a graph of its own (as an input, since it moved)
    assert all(vars(gm)[name] is p for gm in graphs for name, p in gm._parameters.items())


def test_equal_backends_are_equal_and_named_as_torch_names_them():
    eager, again = torch_internals.AttributeReads("eager"), torch_internals.AttributeReads("eager")
    assert eager == again and hash(eager) == hash(again)
    assert eager != torch_internals.AttributeReads("aot_eager")
    assert eager.__name__ == "eager"
    assert eager.backend is torch_internals.lookup_backend("eager")


def test_a_backend_that_traces_the_graph_sees_its_fake_parameters():
    """aot_eager traces the graph with fake tensors swapped into ``_parameters``: the
    parameters are set in the dict only for a backend that runs ``gm.forward`` itself."""
    torch.manual_seed(0)
    model = own_class_copy(Three().eval())
    compiled = gp.compile(model, "watch_state", backend="aot_eager")
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(10):
            assert torch.equal(compiled(x), model(x))
