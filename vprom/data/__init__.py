"""The problems of a V-PROM build for anyone's PyTorch model.

    from vprom.data import VPROM
    train = VPROM("build/dataset.h5", split="neutral", part="train",
                  source="build/feats/resnet101.h5")      # or a maps file, or a crop store
    item = train[0]            # {"panels": [16, ...], "answer": 0..7, "id", "relation", ...}
    for batch in train.loader(64, shuffle=True, num_workers=2):
        batch["panels"]        # [64, 16, ...]

- `problems`: `VPROM`, the map-style dataset (one item a problem; whole batches by lists);
- `shipping`: `loader`, a DataLoader of whole batches whose workers hand them over through
  shared memory they reuse, instead of a fresh segment a batch.

Floor: this package imports torch, which the ground floor (the rest of `vprom/*.py`) may not;
tests/test_layers.py gives it a floor of its own beside `vprom.baselines`, importing the ground
floor, `vprom.features` and `vprom.splits` only.
"""

from vprom.data.problems import VPROM, source_kind
from vprom.data.shipping import loader

__all__ = ["VPROM", "loader", "source_kind"]
