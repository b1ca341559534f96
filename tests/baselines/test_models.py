"""Every registered baseline, one parametrised test each (torchvision's test_models.py style)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
from torch import nn

from vprom.baselines import registry
from vprom.baselines.parts import (
    ELEMENT_TYPE_CLASSES,
    RELATION_CLASSES,
    ModelConfig,
    candidate_sets,
    element_type_class,
    relation_class,
    with_panel_ids,
)
from vprom.baselines.registry import get_model, input_kind, list_models, register_model
from vprom.errors import VpromError

#: a tiny config of each input kind: 32-d vectors, 8 x 2 x 2 maps, 16 x 16 RGB pixels
TINY = {"vectors": ModelConfig(feature_dim=32, hidden=16),
        "maps": ModelConfig(feature_dim=8, hidden=16, side=2),
        "pixels": ModelConfig(feature_dim=3, hidden=16, side=16)}
MODELS = list_models()
# gru reads all 16 panels in order and outputs one 8-way vector, as in the paper.
EQUIVARIANT = [name for name in MODELS if name != "gru"]
CONTROLS = ["context-blind", "context-blind-pixels"]
PERMUTATION = torch.tensor([3, 0, 7, 5, 1, 6, 2, 4])


def panel_shape(kind: str) -> tuple[int, ...]:
    config = TINY[kind]
    return (config.feature_dim,) if kind == "vectors" else (
        config.feature_dim, config.side, config.side)


def panels(batch: int = 4, seed: int = 0, dtype=torch.float64,
           kind: str = "vectors") -> torch.Tensor:
    """Random panels of `kind`: unit vectors, maps, or pixels in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    shape = (batch, 16, *panel_shape(kind))
    if kind == "pixels":
        return torch.rand(shape, generator=generator, dtype=dtype)
    x = torch.randn(shape, generator=generator, dtype=dtype)
    return nn.functional.normalize(x, dim=-1) if kind == "vectors" else x


def inputs(name: str, **options) -> torch.Tensor:
    return panels(kind=input_kind(name), **options)


def build(name: str, seed: int = 0, **overrides) -> nn.Module:
    torch.manual_seed(seed)
    return get_model(name, TINY[input_kind(name)], **overrides).double()


def test_registry_lists_the_papers_models_the_later_solvers_and_the_controls():
    expected = {f"mlp-{c}-{k}" for c in ("cat", "sum") for k in (2, 4, 6)}
    expected |= {"gru", "gru-shared", "vqa", "rn", "rn-no-ids", "rn-direct", "context-blind"}
    expected |= {"wren", "scl", "predrnet", "predrnet-maps", "panel-transformer",
                 "panel-transformer-pooled", "context-blind-pixels"}
    assert set(MODELS) == expected
    assert MODELS == sorted(MODELS)
    kinds = {name: input_kind(name) for name in MODELS}
    assert {n for n, k in kinds.items() if k == "maps"} == {"predrnet-maps", "panel-transformer"}
    assert {n for n, k in kinds.items() if k == "pixels"} == {"predrnet", "context-blind-pixels"}


def test_an_unknown_input_kind_is_refused():
    with pytest.raises(VpromError, match="input kind 'images' is none of vectors, maps, pixels"):
        register_model("my-model", kind="images")


@pytest.mark.parametrize("aux", [False, True])
@pytest.mark.parametrize("name", MODELS)
def test_output_shapes(name, aux):
    out = build(name, aux=aux)(inputs(name, batch=3))
    assert out.scores.shape == (3, 8)
    if aux:
        assert out.relation_logits.shape == (3, len(RELATION_CLASSES))
        assert out.element_type_logits.shape == (3, len(ELEMENT_TYPE_CLASSES))
    else:
        assert out.relation_logits is None and out.element_type_logits is None


@pytest.mark.parametrize("name", MODELS)
def test_backward_reaches_every_parameter(name):
    # What is guaranteed: every parameter is in the graph and gets a finite gradient tensor
    # (DDP without find_unused_parameters needs that). Whether it is non-zero is the next test.
    model = build(name, aux=True)
    out = model(inputs(name))
    loss = (
        nn.functional.cross_entropy(out.scores, torch.tensor([0, 1, 2, 3]))
        + nn.functional.cross_entropy(out.relation_logits, torch.tensor([0, 1, 2, 3]))
        + nn.functional.cross_entropy(out.element_type_logits, torch.tensor([0, 1, 2, 0]))
    )
    loss.backward()
    for parameter_name, parameter in model.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert torch.isfinite(parameter.grad).all(), parameter_name


def dead_parameters(model: nn.Module, kind: str = "vectors") -> list[str]:
    """Parameters that no loss of ours can ever move, found by reasoning, not by sampling noise.

    Every loss is a softmax cross-entropy, which is unchanged when the same constant is added
    to all logits of one head. So the losses see each head's logits only through their
    centred values (logits minus their mean), and a parameter is dead exactly when the
    centred logits do not depend on it for any input. One input where they do is a witness
    that the parameter lives; the inputs below (several draws, at two scales, so ReLUs switch
    differently between candidates) give one for every parameter that is not dead by
    construction. Scale 100 is there for wren: at initialisation its four-layer g maps the 8
    candidates' pair sums so close together that inputs of unit scale switch no ReLU of f
    between them. In float64 the dependence is either of the order of the parameter's effect
    or of the order of rounding (1e-16), so a threshold of 1e-9 of the uncentred effect tells
    the two apart whatever the build's rounding does.
    """
    params = dict(model.named_parameters())
    alive: set[str] = set()
    for seed in range(4):
        for scale in (1.0, 100.0):
            out = model(scale * panels(batch=8, seed=seed, kind=kind))
            heads = [h for h in out if h is not None]
            generator = torch.Generator().manual_seed(seed)
            weights = [torch.randn(h.shape, generator=generator, dtype=h.dtype) for h in heads]
            centred = _gradients(params, weights, [h - h.mean(-1, keepdim=True) for h in heads])
            raw = _gradients(params, weights, heads)
            alive |= {k for k in params if 0 < 1e-9 * raw[k].norm() < centred[k].norm()}
    return sorted(set(params) - alive)


def _gradients(params, weights, heads) -> dict[str, torch.Tensor]:
    total = sum((w * h).sum() for w, h in zip(weights, heads))
    values = torch.autograd.grad(total, list(params.values()), retain_graph=True,
                                 allow_unused=True)
    return {k: torch.zeros_like(p) if g is None else g
            for (k, p), g in zip(params.items(), values)}


@pytest.mark.parametrize("name", MODELS)
def test_no_parameter_is_dead_by_construction(name):
    kind = input_kind(name)
    assert dead_parameters(build(name, aux=True), kind) == []
    assert dead_parameters(build(name, aux=False), kind) == []


def test_a_bias_added_to_every_score_is_found_dead():
    # A construction the detector must flag: one scalar bias shared by all 8 scores.
    model = build("rn", aux=True)
    model.score = nn.Linear(TINY["vectors"].hidden, 1).double()
    assert dead_parameters(model) == ["score.bias"]


@pytest.mark.parametrize("name", EQUIVARIANT)
def test_permuting_candidates_permutes_scores(name):
    model = build(name, aux=True)
    x = inputs(name)
    permuted = torch.cat([x[:, :8], x[:, 8:][:, PERMUTATION]], dim=1)
    out, out_permuted = model(x), model(permuted)
    torch.testing.assert_close(out_permuted.scores, out.scores[:, PERMUTATION])
    # The aux heads read a mean over candidates: their logits do not move.
    torch.testing.assert_close(out_permuted.relation_logits, out.relation_logits)


def test_gru_scores_depend_on_candidate_order():
    model = build("gru")
    x = panels()
    permuted = torch.cat([x[:, :8], x[:, 8:][:, PERMUTATION]], dim=1)
    assert not torch.allclose(model(permuted).scores, model(x).scores[:, PERMUTATION])


@pytest.mark.parametrize("name", [n for n in MODELS if n not in CONTROLS])
def test_scores_depend_on_the_context(name):
    model = build(name)
    x = inputs(name)
    changed = x.clone()
    changed[:, :8] = inputs(name, seed=1)[:, :8]
    assert not torch.allclose(model(changed).scores, model(x).scores)


@pytest.mark.parametrize("name", CONTROLS)
def test_the_controls_ignore_the_context(name):
    model = build(name, aux=True)
    x = inputs(name)
    changed = x.clone()
    changed[:, :8] = inputs(name, seed=1)[:, :8]
    out, out_changed = model(x), model(changed)
    assert torch.equal(out.scores, out_changed.scores)
    assert torch.equal(out.relation_logits, out_changed.relation_logits)


@pytest.mark.parametrize("name", MODELS)
def test_overfits_sixteen_matrices(name):
    """Each model can fit a tiny training set: its gradients and capacity work end to end."""
    torch.manual_seed(0)
    model = get_model(name, TINY[input_kind(name)], hidden=32)
    x = inputs(name, batch=16, dtype=torch.float32)
    answers = torch.randint(0, 8, (16,), generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    accuracy = 0.0
    for step in range(400):
        optimizer.zero_grad()
        scores = model(x).scores
        if step % 10 == 0:
            accuracy = (scores.argmax(1) == answers).float().mean().item()
            if accuracy == 1.0:
                break
        nn.functional.cross_entropy(scores, answers).backward()
        optimizer.step()
    assert accuracy == 1.0


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_same_model_and_scores(name):
    first, second = build(name, seed=7, aux=True), build(name, seed=7, aux=True)
    for (key, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(a, b), key
    x = inputs(name)
    assert torch.equal(first(x).scores, second(x).scores)
    assert not torch.equal(build(name, seed=8)(x).scores, first(x).scores)


def test_gru_shared_equals_eight_sequences_of_nine():
    model = build("gru-shared")
    x = panels()
    embedded = model.f1(with_panel_ids(x, candidates_share_id=True))
    sequences = candidate_sets(embedded)  # [B, 8, 9, H]
    expected = []
    for j in range(8):
        _, last = model.gru(sequences[:, j])
        expected.append(model.score(last.squeeze(0)).squeeze(-1))
    torch.testing.assert_close(model(x).scores, torch.stack(expected, dim=1))


@pytest.mark.parametrize("k", [2, 4, 6])
def test_mlp_depth_comes_from_the_name(k):
    for combine in ("cat", "sum"):
        model = get_model(f"mlp-{combine}-{k}", TINY["vectors"], layers=2)
        assert sum(isinstance(m, nn.Linear) for m in model.f1) == k // 2
        assert sum(isinstance(m, nn.Linear) for m in model.f2) == k // 2


def test_with_panel_ids():
    x = panels(batch=2)
    tagged = with_panel_ids(x)
    dim = TINY["vectors"].feature_dim
    assert tagged.shape == (2, 16, dim + 16)
    assert torch.equal(tagged[:, :, :dim], x)
    assert torch.equal(tagged[0, :, dim:], torch.eye(16, dtype=x.dtype))
    shared = with_panel_ids(x, candidates_share_id=True)[1, :, dim:]
    assert torch.equal(shared[:8], torch.eye(16, dtype=x.dtype)[:8])
    assert (shared[8:].argmax(1) == 8).all() and (shared[8:].sum(1) == 1).all()


def test_aux_targets():
    assert [relation_class(r) for r in ("and", "or", "union", "progression")] == [0, 1, 2, 3]
    assert element_type_class("object_attribute") == element_type_class("human_attribute") == 0
    assert element_type_class("object") == 1 and element_type_class("count") == 2


def test_unknown_model_raises_and_lists_the_known_ones():
    with pytest.raises(VpromError, match="unknown model 'resnet'.*rn-no-ids"):
        get_model("resnet")


def test_unknown_config_field_raises():
    with pytest.raises(VpromError, match="unknown model config field.*hiden"):
        get_model("rn", hiden=3)


def test_odd_depth_raises():
    with pytest.raises(VpromError, match="layers=3"):
        get_model("rn", TINY["vectors"], layers=3)


def test_duplicate_name_raises(monkeypatch):
    list_models()  # the built-ins are in
    for attr in ("_items", "_origin"):
        monkeypatch.setattr(registry.MODELS, attr, dict(getattr(registry.MODELS, attr)))
    with pytest.raises(VpromError, match="'rn' is already registered"):
        register_model("rn")(lambda config: nn.Identity())
    register_model("my-model")(lambda config: nn.Identity())
    assert "my-model" in list_models()
    with pytest.raises(VpromError, match="'my-model' is already registered"):
        register_model("my-model")(lambda config: nn.Identity())


def test_config_round_trips_through_json():
    config = ModelConfig(feature_dim=64, hidden=8, aux=True, layers=4)
    assert ModelConfig(**json.loads(json.dumps(dataclasses.asdict(config)))) == config


@pytest.mark.parametrize("name", MODELS)
def test_input_of_another_size_or_kind_is_refused(name):
    shape = panel_shape(input_kind(name))
    expected = re.escape(f"expected [batch, {', '.join(map(str, (16, *shape)))}]")
    model = build(name)
    with pytest.raises(VpromError, match=expected):
        model(torch.zeros(2, 16, shape[0] - 1, *shape[1:], dtype=torch.float64))
    other = (32, 3, 3) if len(shape) == 1 else (shape[0] * shape[-1] ** 2,)
    with pytest.raises(VpromError, match=expected):  # e.g. pooled vectors for a map model
        model(torch.zeros(2, 16, *other, dtype=torch.float64))
