"""The later solvers learn the learnable task at their defaults (`baselines/defaults.json`).

Each is trained by the real loop (`train_one_epoch`, `evaluate`) on the task of its input
kind (`conftest.learnable_task`: the standard 2,400 matrices of 256-d vectors; 800 matrices
of 16 x 3 x 3 maps or 16 x 16 crops for the costlier map and pixel models; the answer crop
marked for the context-blind control, which cannot see the context) and must reach 95%
validation accuracy (chance 12.5%) within 8 epochs, on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from tests.baselines.conftest import fit, learnable_task
from vprom.baselines.config import load_defaults
from vprom.baselines.paper import LATER_SOLVERS

ZOO = [*LATER_SOLVERS, "context-blind-pixels"]


def test_every_later_solver_has_its_own_defaults():
    assert set(ZOO) <= set(load_defaults()["models"])


@pytest.mark.slow
@pytest.mark.parametrize("model", ZOO)
def test_every_later_solver_learns_the_learnable_task_at_its_defaults(model):
    torch.set_num_threads(1)
    history = fit(model, learnable_task(model), epochs=8, target=0.95)
    assert max(history) >= 0.95, f"{model}: validation accuracy {history}"
