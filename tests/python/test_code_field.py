"""The schema field ``code``: what a guard checks, as torch wrote it, on every supported torch
(``entry.code_parts`` on 2.15; ``orig_guard.code_list`` read while the filter runs before)."""

from __future__ import annotations

import torch

import guardpolicy as gp


class Skipping(torch.nn.Module):
    """Layer skipping by an int attribute, as decoders with early exit do."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.n_active = 3

    def forward(self, x):
        for layer in self.layers[: self.n_active]:
            x = torch.relu(layer(x))
        return x


DROP_MODULE_STATE = """guardpolicy 1
unsafe policy p {{
  {extra}
  drop when guard_source.is_unspecialized_nn_module
  default keep
}}
"""


def _policy(tmp_path, extra: str) -> str:
    path = tmp_path / "p.gpol"
    path.write_text(DROP_MODULE_STATE.format(extra=extra))
    return str(path)


def test_explain_shows_what_each_guard_checks(tmp_path):
    model, x = Skipping(), torch.randn(2, 8)
    opt = gp.compile(model, _policy(tmp_path, ""), backend="eager")
    opt(x)
    (frame,) = gp.explain(opt)
    codes = {e.code for e in frame if e.name == "self.n_active"}
    assert codes == {"L['self'].n_active == 3"}
    grad = [e for e in frame if e.guard_type == "GRAD_MODE"]
    assert grad and all(e.code == "" for e in grad)


def test_a_rule_on_code_keeps_the_guard_a_change_needs(tmp_path):
    model, x = Skipping(), torch.randn(2, 8)
    keeps = gp.compile(model, _policy(tmp_path, 'keep when code contains ".n_active =="'), backend="eager")
    torch.testing.assert_close(keeps(x), model(x))
    dropped = {e.name for e in gp.explain(keeps)[0] if not e.keep}
    assert "self.n_active" not in dropped and dropped  # the rest of the module state is dropped
    for n in (1, 0, 2, 3):
        model.n_active = n
        torch.testing.assert_close(keeps(x), model(x))
    assert gp.stats(keeps).compiles == 4  # n_active 3, 1, 0, 2; back at 3 reuses the first


def test_without_the_rule_the_same_change_is_served_stale(tmp_path):
    """The control: the same policy without the `code` rule drops the n_active guards, and
    the first call after the change returns the 3-layer result."""
    torch.compiler.reset()
    model, x = Skipping(), torch.randn(2, 8)
    blind = gp.compile(model, _policy(tmp_path, ""), backend="eager")
    three = blind(x)
    assert "self.n_active" in {e.name for e in gp.explain(blind)[0] if not e.keep}
    model.n_active = 1
    torch.testing.assert_close(blind(x), three)
    assert not torch.allclose(model(x), three)


def test_code_is_read_while_the_filter_runs():
    """On 2.14 torch resets ``orig_guard.code_list`` when it rebuilds the kept guards; the
    field is what the filter saw, on 2.15 exactly ``code_parts``."""
    seen = []

    def record(entries):
        seen.extend((e, gp.api.entry_code.guard_code(e)) for e in entries)
        return [True] * len(entries)

    model = Skipping()
    torch.compile(model, backend="eager", options={"guard_filter_fn": record})(torch.randn(2, 8))
    for entry, code in seen:
        if hasattr(entry, "code_parts"):
            assert code == "\n".join(dict.fromkeys(entry.code_parts))
    assert ("self.n_active", "L['self'].n_active == 3") in {(e.name, c) for e, c in seen}
