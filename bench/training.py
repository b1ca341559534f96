"""Training-side figures: data loading, batch gather vs per-matrix HDF5 reads, model throughput."""
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import torch

sys.path.insert(0, ".")
import torch.nn.functional as F

from baselines.common import ModelConfig
from baselines.data import load_split
from baselines.registry import get_model
from tests.baselines.conftest import write_pair

N, D, B = int(sys.argv[1]), 2048, 64
folder = Path(sys.argv[2])
dataset, feats = folder / "dataset.h5", folder / "feats.h5"
if not feats.is_file():
    write_pair(folder, n=N, dim=D)
print(f"{N} matrices x 16 crops, D={D}, load average {open('/proc/loadavg').read().split()[0]}")
t = time.perf_counter(); data = load_split(dataset, feats, "neutral"); load = time.perf_counter() - t
print(f"load_split (features once into memory + [n,16] row index): {load:.2f} s")
train = data.parts["train"]
rng = np.random.default_rng(0)
batches = [rng.choice(len(train), B, replace=False) for _ in range(20)]
t = time.perf_counter()
for b in batches:
    x = data.panels(train, torch.from_numpy(b))
gather = (time.perf_counter() - t) / len(batches)
with h5py.File(feats) as h5, h5py.File(dataset) as ds:
    ids = h5["crop_id"][()]
    panels = ds["matrices/panels"]
    t = time.perf_counter()
    for b in batches[:5]:
        x = np.stack([h5["features"][np.searchsorted(ids, np.sort(panels[int(train.ids[i])]))] for i in b])
    per_matrix = (time.perf_counter() - t) / 5
print(f"one batch of {B}: in-memory gather {1e3*gather:.2f} ms, per-matrix HDF5 reads {1e3*per_matrix:.1f} ms ({per_matrix/gather:.0f}x)")
torch.manual_seed(0)
for name in ("mlp-sum-6", "gru-shared", "vqa", "rn"):
    for aux in (False, True):
        model = get_model(name, ModelConfig(feature_dim=D, hidden=512, aux=aux))
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
        def step(b):
            index = torch.from_numpy(b)
            out = model(data.panels(train, index))
            loss = F.cross_entropy(out.scores, train.answer[index])
            if aux:
                loss = loss + F.cross_entropy(out.relation_logits, train.relation[index]) + F.cross_entropy(out.element_type_logits, train.element_class[index])
            opt.zero_grad(); loss.backward(); opt.step()
        step(batches[0])
        t = time.perf_counter()
        for b in batches[1:6]:
            step(b)
        rate = 5 * B / (time.perf_counter() - t)
        print(f"train {name:10s} aux={aux!s:5s}: {rate:7.0f} matrices/s (CPU, {torch.get_num_threads()} threads, hidden 512, batch {B})")
