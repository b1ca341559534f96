"""The problems of a V-PROM build for anyone's PyTorch model.

    from vprom.data import VPROM
    train = VPROM("build/dataset.h5", split="neutral", part="train",
                  source="build/feats/resnet101.h5")      # or a maps file, or a crop store
    item = train[0]            # {"panels": [16, ...], "answer": 0..7, "id", "relation", ...}
    for batch in train.loader(64, shuffle=True, num_workers=2):
        batch["panels"]        # [64, 16, ...]

This package imports torch, which the ground floor may not: tests/test_layers.py gives it a
floor of its own beside `vprom.baselines`.
"""

from vprom.data.problems import VPROM, loader

__all__ = ["VPROM", "loader"]
