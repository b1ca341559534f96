"""The fast relation network computes exactly Eq. 7-8; the no-ids ablation is what it claims."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vprom.baselines.parts import ModelConfig, with_panel_ids
from vprom.baselines.registry import get_model
from vprom.baselines.rn import RelationNetwork

TINY = ModelConfig(feature_dim=12, hidden=8, aux=True)


def panels(batch: int = 3, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 16, TINY.feature_dim, generator=generator, dtype=torch.float64)
    return nn.functional.normalize(x, dim=-1)


def fast_and_direct(layers: int, panel_ids: bool = True):
    config = ModelConfig(feature_dim=12, hidden=8, aux=True, layers=layers)
    torch.manual_seed(0)
    fast = RelationNetwork(config, panel_ids=panel_ids).double()
    direct = RelationNetwork(config, panel_ids=panel_ids, direct=True).double()
    direct.load_state_dict(fast.state_dict())  # same names: the weights transfer as they are
    return fast, direct


def test_registered_fast_and_direct_share_parameter_names():
    fast, direct = get_model("rn", TINY), get_model("rn-direct", TINY)
    assert list(fast.state_dict()) == list(direct.state_dict())
    assert not fast.direct and direct.direct


def test_direct_is_eq_7_written_as_loops():
    """rn-direct, the reference, against a literal double loop over the 81 ordered pairs."""
    _, direct = fast_and_direct(layers=4)
    x = with_panel_ids(panels(batch=1), candidates_share_id=True)[0]  # [16, W]
    for j in range(8):
        completed = [x[i] for i in range(8)] + [x[8 + j]]
        total = sum(
            direct.f1(torch.cat([completed[a], completed[b]])) for a in range(9) for b in range(9)
        )
        expected = direct.score(direct.f2(total))
        torch.testing.assert_close(direct.pair_sums_direct(x[None])[0, j], total)
        torch.testing.assert_close(direct(x[None, :, :12]).scores[0, j], expected[0])


@pytest.mark.parametrize("panel_ids", [True, False])
@pytest.mark.parametrize("layers", [2, 4, 6])
def test_fast_equals_direct_forward_and_gradients(layers, panel_ids):
    fast, direct = fast_and_direct(layers, panel_ids)
    x = panels()
    answers = torch.tensor([2, 7, 0])
    outputs = {}
    for name, model in (("fast", fast), ("direct", direct)):
        out = model(x)
        loss = (
            nn.functional.cross_entropy(out.scores, answers)
            + nn.functional.cross_entropy(out.relation_logits, torch.tensor([0, 3, 1]))
            + nn.functional.cross_entropy(out.element_type_logits, torch.tensor([2, 2, 0]))
        )
        loss.backward()
        outputs[name] = out
    for field in ("scores", "relation_logits", "element_type_logits"):
        torch.testing.assert_close(
            getattr(outputs["fast"], field),
            getattr(outputs["direct"], field),
            rtol=1e-10,
            atol=1e-12,
        )
    for (key, a), (_, b) in zip(fast.named_parameters(), direct.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-12, msg=key)


def test_fast_equals_direct_in_float32_at_paper_width():
    """The speed-up holds in the dtype used for training, at the paper's 2048+16 inputs."""
    config = ModelConfig(feature_dim=2048, hidden=64)
    torch.manual_seed(0)
    fast, direct = get_model("rn", config), get_model("rn-direct", config)
    direct.load_state_dict(fast.state_dict())
    generator = torch.Generator().manual_seed(0)
    x = nn.functional.normalize(torch.randn(2, 16, 2048, generator=generator), dim=-1)
    torch.testing.assert_close(fast(x).scores, direct(x).scores, rtol=1e-4, atol=1e-4)


def context_permuted(x: torch.Tensor) -> torch.Tensor:
    order = torch.tensor([5, 2, 7, 0, 1, 6, 4, 3])
    return torch.cat([x[:, :8][:, order], x[:, 8:]], dim=1)


def test_rn_no_ids_cannot_see_the_order_of_the_context():
    """Without ids the pair sum is symmetric in the context panels: rows and columns are lost."""
    model = get_model("rn-no-ids", TINY).double()
    x = panels()
    torch.testing.assert_close(model(context_permuted(x)).scores, model(x).scores)


def test_rn_with_ids_sees_the_order_of_the_context():
    model = get_model("rn", TINY).double()
    x = panels()
    assert not torch.allclose(model(context_permuted(x)).scores, model(x).scores)
