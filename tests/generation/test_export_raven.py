"""`vprom export --format npz --style raven`, read and trained on the way RAVEN does.

RAVEN (WellyZhang/RAVEN) is GPL-3.0, so its code is re-stated, not copied: its loader in
`raven_loader.py`, its `Resnet18_MLP` (src/model/resnet18.py, fc_tree_net.py) and loss here,
its slot lists from src/dataset/const.py (META_TARGET_FORMAT, META_STRUCTURE_FORMAT) and the
structure of its center_single configuration as src/dataset/serialize.py writes it. The slow
tests run one training step of the model, and RAVEN's loader under Python 2.7 where one is
installed (numpy 1.16.6 and scipy 1.2.3, whose `misc.imresize` RAVEN calls, from PyPI).
"""

from __future__ import annotations

import glob
import itertools
import json
import pickletools
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from vprom.generation.export import export

from tests.generation.raven_loader import raven_items, summary
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.tables import SPLIT_PARTS, read_matrix_table

META_TARGET_FORMAT = ["Constant", "Progression", "Arithmetic", "Distribute_Three", "Number",
                      "Position", "Type", "Size", "Color"]
META_STRUCTURE_FORMAT = [
    "Singleton", "Left_Right", "Up_Down", "Out_In", "Left", "Right", "Up", "Down", "Out", "In",
    "Grid", "Center_Single", "Distribute_Four", "Distribute_Nine", "Left_Center_Single",
    "Right_Center_Single", "Up_Center_Single", "Down_Center_Single", "Out_Center_Single",
    "In_Center_Single", "In_Distribute_Four"]
CENTER_SINGLE = ["Scene", "Singleton", "Grid", "Center_Single", "/", "/", "/", "/"]
#: V-PROM's rules in RAVEN's words: an Or row repeats one of its first two panels, no RAVEN rule
RULE = {"and": "Constant", "union": "Distribute_Three", "progression": "Progression", "or": None}
ATTRIBUTE = {"count": "Number", "object": "Type", "shape": "Type", "color": "Color",
             "clothing color": "Color"}
SPLIT = "neutral"


@pytest.fixture(scope="module")
def exported(synthetic_build, tmp_path_factory):
    dataset, vg = synthetic_build
    out = tmp_path_factory.mktemp("raven") / "raven"
    summary_ = export(dataset, "npz", out, vg_dir=vg, split=SPLIT, style="raven")
    return out, dataset, summary_


def test_files_are_named_as_raven_names_them(exported):
    out, dataset, summary_ = exported
    m = read_matrix_table(dataset)
    for part in SPLIT_PARTS:
        names = sorted(Path(f).name for f in glob.glob(str(out / "*" / f"*_{part}.npz")))
        assert names == sorted(f"RAVEN_{i}_{part}.npz" for i in m.splits[SPLIT][part])
        assert len(names) == summary_.counts[part] > 0


def test_embedding_is_a_protocol_2_pickle(exported):
    """Python 2.7 reads pickles of protocol 2 at most."""
    with open(exported[0] / "embedding.npy", "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        data = f.read()
    assert data[:2] == b"\x80\x02"
    assert max(op.proto for op, _, _ in pickletools.genops(data)) <= 2


def test_meta_vectors_in_ravens_slots(exported):
    out, dataset, _ = exported
    m = read_matrix_table(dataset)
    seen = set()
    for path in out.glob("*/*.npz"):
        with np.load(path) as data:
            i = int(np.flatnonzero(m.id == int(data["id"]))[0])
            relation, etype, superattr = m.relation[i], m.element_type[i], m.super_attribute[i]
            seen.add(relation)
            assert data["meta_target_names"].tolist() == META_TARGET_FORMAT
            assert data["meta_structure_names"].tolist() == META_STRUCTURE_FORMAT
            matrix = data["meta_matrix"]
            assert matrix.shape == (8, 9) and not matrix[1:].any()
            assert np.array_equal(data["meta_target"], np.bitwise_or.reduce(matrix))
            on = {META_TARGET_FORMAT[k] for k in np.flatnonzero(data["meta_target"])}
            expected = {RULE[relation], ATTRIBUTE.get(etype, ATTRIBUTE.get(superattr))}
            assert on == expected - {None}
            assert data["structure"].tolist() == CENTER_SINGLE
            assert data["meta_structure"].shape == (21,)
            assert {META_STRUCTURE_FORMAT[k] for k in np.flatnonzero(data["meta_structure"])} \
                == {"Singleton", "Grid", "Center_Single"}
    assert seen == set(RULE)


def test_ravens_loader_reads_every_part(exported, monkeypatch):
    """It matches the part's name anywhere in the path: read from `.`, as pytest's own
    folders hold 'test'."""
    out, dataset, summary_ = exported
    m = read_matrix_table(dataset)
    answer = dict(zip(m.id.tolist(), m.answer.tolist()))
    monkeypatch.chdir(out)
    for part in SPLIT_PARTS:
        items = list(raven_items(".", part, img_size=32))
        assert len(items) == summary_.counts[part]
        for path, image, target, meta_target, meta_structure, embedding, indicator in items:
            assert target == answer[int(Path(path).name.split("_")[1])]
            assert image.shape == (16, 32, 32) and meta_target.shape == (9,)
            assert meta_structure.shape == (21,) and indicator.tolist() == [0.0]
            assert embedding.sum(axis=1).tolist() == [1.0] * 4 + [0.0] * 2  # 4 words found


# --- RAVEN's Resnet18_MLP, re-stated ------------------------------------------------------
class FCTreeNet(nn.Module):
    """fc_tree_net.py: the 6 structure words fused with the image feature as a tree."""

    def __init__(self, in_dim=300, img_dim=512):
        super().__init__()
        self.fc = nn.Linear(in_dim, in_dim)
        self.leaf, self.middle, self.merge, self.root = (
            nn.Linear(in_dim + img_dim, img_dim) for _ in range(4))

    def forward(self, image_feature, words, indicator):
        words = self.fc(words.view(-1, words.size(-1))).view(-1, 6, words.size(-1))
        words = words.unsqueeze(1).repeat(1, image_feature.size(1), 1, 1)
        indicator = indicator.unsqueeze(1).repeat(1, image_feature.size(1), 1).view(-1, 1)
        word = [words[:, :, k, :].reshape(-1, words.size(-1)) for k in range(6)]
        feature = image_feature.view(-1, image_feature.size(-1))
        left = F.relu(self.leaf(torch.cat((word[3], feature), dim=-1)))
        right = F.relu(self.leaf(torch.cat((word[5], feature), dim=-1)))
        left = F.relu(self.middle(torch.cat((word[2], left), dim=-1)))
        right = F.relu(self.middle(torch.cat((word[4], right), dim=-1))) * indicator
        merged = F.relu(self.merge(torch.cat((word[1], left + right), dim=-1)))
        return F.relu(self.root(torch.cat((word[0], merged), dim=-1)))


class Resnet18MLP(nn.Module):
    """resnet18.py: a 16-channel ResNet-18, the tree net added, one MLP to 8 + 9 + 21."""

    def __init__(self, meta_alpha=1.0, meta_beta=1.0):
        super().__init__()
        self.resnet18 = torchvision.models.resnet18(weights=None)
        self.resnet18.conv1 = nn.Conv2d(16, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.resnet18.fc = nn.Identity()
        self.fc_tree_net = FCTreeNet()
        self.mlp = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Dropout(0.5),
                                 nn.Linear(512, 8 + 9 + 21))
        self.meta_alpha, self.meta_beta = meta_alpha, meta_beta

    def forward(self, x, embedding, indicator):
        features = self.resnet18(x.view(-1, 16, x.size(-1), x.size(-1)))
        tree = self.fc_tree_net(features.view(-1, 1, 512), embedding, indicator)
        output = self.mlp(features + tree)
        return output[:, 0:8], output[:, 8:17], output[:, 17:38]

    def compute_loss(self, output, target, meta_target, meta_structure):
        pred, meta_target_pred, meta_struct_pred = output
        meta_target_loss = sum(
            F.binary_cross_entropy(torch.sigmoid(p), t) for p, t in
            zip(torch.chunk(meta_target_pred, 9, dim=1), torch.chunk(meta_target, 9, dim=1)))
        meta_struct_loss = sum(
            F.binary_cross_entropy(torch.sigmoid(p), t) for p, t in zip(
                torch.chunk(meta_struct_pred, 21, dim=1), torch.chunk(meta_structure, 21, dim=1)))
        return (F.cross_entropy(pred, target) + self.meta_alpha * meta_struct_loss / 21.0
                + self.meta_beta * meta_target_loss / 9.0)


@pytest.mark.slow
def test_resnet18_mlp_trains_a_step(exported, monkeypatch):
    """RAVEN's default model and its loss with both meta terms on, at RAVEN's 224 px."""
    monkeypatch.chdir(exported[0])
    items = list(itertools.islice(raven_items(".", "train", img_size=224), 4))
    image, target, meta_target, meta_structure, embedding, indicator = (
        torch.tensor(np.stack(column)) for column in list(zip(*items))[1:])
    torch.manual_seed(0)
    model = Resnet18MLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    before = [p.detach().clone() for p in model.parameters()]
    loss = model.compute_loss(model(image, embedding, indicator), target.long(), meta_target,
                              meta_structure)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters())
               if p.grad is not None and p.grad.any())


def python27() -> str | None:
    """A Python 2.7 that runs (a pyenv shim answers for versions it does not select)."""
    pyenv = sorted(Path.home().glob(".pyenv/versions/2.7*/bin/python2.7"))
    for python in [shutil.which("python2.7"), *map(str, pyenv)]:
        if python and subprocess.run([python, "-c", ""], capture_output=True,
                                     check=False).returncode == 0:
            return python
    return None


@pytest.mark.slow
def test_python27_reads_the_export(exported, tmp_path, monkeypatch):
    """RAVEN's loader on RAVEN's Python gives what it gives on Python 3 (at 160 px, the
    panels unresized: resampling differs between Pillow versions)."""
    python = python27()
    if python is None:
        pytest.skip("no Python 2.7 here (RAVEN's Python)")
    site = tmp_path / "site"
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--target", str(site),
                          "numpy==1.16.6", "scipy==1.2.3", "Pillow==6.2.2"],
                         capture_output=True, text=True, timeout=600, check=False)
    if pip.returncode != 0:
        pytest.skip("numpy 1.16 / scipy 1.2 for Python 2.7 cannot be installed here: "
                    + pip.stderr.strip().splitlines()[-1])
    monkeypatch.chdir(exported[0])
    run = subprocess.run([python, str(Path(__file__).with_name("raven_loader.py")), ".", "160"],
                         capture_output=True, text=True, timeout=600, check=False,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    on_27 = [json.loads(line) for line in run.stdout.splitlines()]
    on_3 = [dict(summary(item), part=part) for part in SPLIT_PARTS
            for item in raven_items(".", part, img_size=160)]
    assert on_27 == on_3 and len(on_3) == exported[2].counts["problems"]
    assert sys.version_info >= (3,)
