"""`vprom generate --workers N`: forked workers draw the matrices, and the file is the same
for any N (`generation.generate.draw_chunks`)."""

from __future__ import annotations

import os

import pytest

from vprom.errors import VpromError
from vprom.generation import generate as generate_module
from vprom.generation.generate import generate, generate_dataset
from vprom.splits import load_rules
from vprom.tables import content_hash, read_manifest

from .conftest import SMALL_SCALE, VOCABULARY

RULES = load_rules()


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 37 matrices, so that a few hundred give every worker several."""
    monkeypatch.setattr(generate_module, "CHUNK", 37)


def test_any_number_of_workers_writes_the_same_data_set(tmp_path, pools_file, small_chunks):
    hashes, counts = set(), []
    for workers in (1, 2, 3):
        out = tmp_path / f"w{workers}.h5"
        summary = generate(pools_file, out, RULES, scale=SMALL_SCALE, seed=5, workers=workers)
        hashes.add(content_hash(out))
        counts.append(read_manifest(out)["counts"])
        assert summary.counts == counts[-1]
    assert len(hashes) == 1
    assert counts[0] == counts[1] == counts[2]
    assert counts[0]["matrices"] > 8 * 37  # every worker had chunks to draw


def test_the_workers_draw_the_matrices_and_one_worker_draws_here(tmp_path, crops,
                                                                 small_chunks, monkeypatch):
    """The forked workers inherit the patched chunk function, so each leaves its pid."""
    draw = generate_module.draw_chunk

    def marked(job, indices):
        (tmp_path / f"{os.getpid()}-{indices[0]}").touch()
        return draw(job, indices)

    monkeypatch.setattr(generate_module, "draw_chunk", marked)

    def drawn_by(workers: int) -> set[int]:
        for f in tmp_path.iterdir():
            f.unlink()
        data = generate_dataset(crops, RULES, scale=SMALL_SCALE, seed=5,
                                vocabulary=VOCABULARY, workers=workers)
        chunks = sorted(int(f.name.split("-")[1]) for f in tmp_path.iterdir())
        assert chunks == list(range(0, len(data.matrices), 37))  # each chunk drawn once
        return {int(f.name.split("-")[0]) for f in tmp_path.iterdir()}

    assert drawn_by(1) == {os.getpid()}
    pids = drawn_by(2)
    assert len(pids) == 2 and os.getpid() not in pids


def test_a_worker_error_or_death_stops_the_run_with_a_message(crops, small_chunks,
                                                              monkeypatch):
    def failing(job, indices):
        raise VpromError(f"matrix {indices[0]}: the pool is too thin")

    monkeypatch.setattr(generate_module, "draw_chunk", failing)
    with pytest.raises(VpromError, match=r"matrix \d+: the pool is too thin"):
        generate_dataset(crops, RULES, scale=SMALL_SCALE, seed=5, vocabulary=VOCABULARY,
                         workers=2)

    def dying(job, indices):
        os._exit(3)

    monkeypatch.setattr(generate_module, "draw_chunk", dying)
    with pytest.raises(VpromError, match=r"vprom-generate-\d died \(exit code 3\)"):
        generate_dataset(crops, RULES, scale=SMALL_SCALE, seed=5, vocabulary=VOCABULARY,
                         workers=2)


def test_generate_refuses_zero_workers(tmp_path, pools_file):
    with pytest.raises(VpromError, match="--workers must be 1 or more"):
        generate(pools_file, tmp_path / "out.h5", RULES, scale=SMALL_SCALE, workers=0)
