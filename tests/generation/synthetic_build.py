"""A real data set for the export tests: the synthetic corpus, mined and generated.

1,000 images at scale 0.003 give 705 matrices whose seven splits all have train, val and
test problems, in a few seconds (400 images were enough before the strict held-out splits
and the known-value rule of human matrices, which need a few hundred people in the
thinnest ninth of the images: docs/soundness.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

IMAGES, SCALE, SEED = 1000, 0.003, 0


@pytest.fixture(scope="session")
def synthetic_build(tmp_path_factory) -> tuple[Path, Path]:
    """(DATASET.h5, the VG folder holding its images)."""
    from vprom.generation.generate import generate
    from vprom.mining.pools import mine
    from vprom.mining.synth import write_corpus
    from vprom.splits import load_rules

    root = tmp_path_factory.mktemp("synthetic_build")
    write_corpus(root / "vg", images=IMAGES, seed=SEED)
    mine(root / "vg", root / "pools.h5", workers=1)
    generate(root / "pools.h5", root / "dataset.h5", load_rules(), scale=SCALE, seed=SEED)
    return root / "dataset.h5", root / "vg"
