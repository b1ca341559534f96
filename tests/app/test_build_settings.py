"""`build` keeps a stage's output only when its manifest matches the stage's inputs and
settings: the pools are mined again when the vocabulary changed."""

from __future__ import annotations

import dataclasses

from vprom.mining import vocab as vocab_module
from vprom.mining.pools import vocabulary_digest

from vprom.app.api import build
from vprom.tables import read_manifest


def test_pools_mined_with_another_vocabulary_are_mined_again(tmp_path, monkeypatch, capsys):
    options = {"synthetic": True, "images": 1000, "scale": 0.01, "seed": 0}
    build(tmp_path, **options)
    capsys.readouterr()
    default = vocab_module.load_vocabulary()
    changed = dataclasses.replace(default, excluded_attributes=default.excluded_attributes
                                  | {"wooden"})
    monkeypatch.setattr(vocab_module, "load_vocabulary", lambda folder=None: changed)
    build(tmp_path, **options)
    log = capsys.readouterr().out
    assert "[1/5] corpus: kept" in log
    assert "[2/5] pools: its settings changed: vocabulary_sha256" in log, log
    assert "[2/5] mining" in log and "[3/5] generating" in log
    recorded = read_manifest(tmp_path / "pools.h5")["config"]["vocabulary_sha256"]
    assert recorded == vocabulary_digest(changed) != vocabulary_digest(default)
