"""`vprom build`: the one-shot pipeline, its self-describing folder, and resuming stages."""
import json
import re

import pytest

from vprom.app import cli
from vprom.app.api import build
from vprom.errors import VpromError
from vprom.tables import read_manifest, read_matrix_table


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    # 1,000 images: the strict held-out splits and the known-value rule need a few hundred
    # people in the thinnest ninth of the images (600-800 left Or matrices over actions short)
    return out, build(out, synthetic=True, images=1000, scale=0.01, seed=0)


def test_synthetic_build_gives_a_verified_described_dataset(built):
    out, result = built
    assert len(read_matrix_table(result.dataset)) == 2350  # Table 1 x 0.01
    assert "verdict: PASS" in (out / "verify.txt").read_text()
    stats = json.loads((out / "stats.json").read_text())
    assert stats  # Table 1 and split sizes written
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "build" and manifest["seed"] == 0
    assert {"dataset.h5", "pools.h5", "stats.json", "verify.txt"} <= set(manifest["outputs"])
    assert read_manifest(result.dataset)["config"]["scale"] == 0.01


def test_a_finished_build_is_not_redone_but_a_new_corpus_is_remined(built, capsys):
    out, result = built
    before = result.dataset.stat().st_mtime_ns
    build(out, synthetic=True, images=1000, scale=0.01, seed=0)
    log = capsys.readouterr().out
    for kept in ("[1/5] corpus: kept", "[2/5] pools: kept", "[3/5] dataset: kept"):
        assert kept in log  # a re-run says which stages it skips and why
    assert "mining" not in log and "generating" not in log
    assert result.dataset.stat().st_mtime_ns == before
    build(out, synthetic=True, images=1000, scale=0.01, seed=1)
    log = capsys.readouterr().out
    assert "[1/5]" in log and "[2/5]" in log and "[3/5]" in log


def test_build_needs_one_source(tmp_path, capsys):
    with pytest.raises(VpromError, match="exactly one source"):
        build(tmp_path, synthetic=False)
    assert cli.main(["build", "--vg", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 1
    assert "no such folder" in capsys.readouterr().err


@pytest.mark.parametrize("options, says", [
    (dict(synthetic=True, images=0), "--images must be a whole number of at least 1, got 0"),
    (dict(synthetic=True, images=-5), "at least 1, got -5"),
    (dict(synthetic=True, images=2.5), "whole number"),
    (dict(synthetic=True, images=True), "whole number"),
    (dict(synthetic=True, scale=0), "--scale must be a finite number above 0"),
    (dict(synthetic=True, scale=-0.1), "above 0"),
    (dict(synthetic=True, scale=float("inf")), "finite"),
    (dict(synthetic=True, scale=float("nan")), "finite"),
    (dict(synthetic=True, seed=1.5), "--seed must be a whole number"),
    (dict(synthetic=True, workers=0), "workers must be a whole number of at least 1"),
    (dict(vg="{tmp}/vg", images=100), "no use with --vg"),
    (dict(vg="{tmp}/nope"), "no such folder"),
    (dict(synthetic=True, out="{tmp}/a-file"), "is a file, but this output is a folder"),
])
def test_bad_options_are_refused_before_any_stage_runs(tmp_path, monkeypatch, options, says):
    (tmp_path / "a-file").write_text("in the way")
    ran = []
    for stage in ("write_corpus", "mine", "generate", "verify"):
        monkeypatch.setattr(f"vprom.app.build.{stage}", lambda *a, stage=stage, **k:
                            ran.append(stage))
    options = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in options.items()}
    options.setdefault("out", tmp_path / "out")
    with pytest.raises(VpromError, match=re.escape(says)):
        build(**options)
    assert not ran and not (tmp_path / "out").exists()


def _recorded_seed(out) -> int:
    """The seed of the build in `out` (other tests build it again with other seeds)."""
    return json.loads((out / "manifest.json").read_text())["seed"]


def test_a_data_set_generated_into_the_folder_with_other_settings_is_not_kept(built, capsys):
    """Audit item 7: after `vprom generate X/pools.h5 --out X/dataset.h5 --scale 0.005 --seed
    9` into a finished build, `vprom build` said "kept dataset.h5" and vouched for it."""
    out, result = built
    seed = _recorded_seed(out)
    assert cli.main(["generate", str(out / "pools.h5"), "--out", str(result.dataset),
                     "--scale", "0.005", "--seed", str(seed + 9), "--workers", "1"]) == 0
    build(out, synthetic=True, images=1000, scale=0.01, seed=seed)
    log = capsys.readouterr().out
    assert "[3/5] dataset: kept" not in log
    assert f"its settings changed: scale 0.005 vs 0.01, seed {seed + 9} vs {seed}" in log
    made = read_manifest(result.dataset)
    assert (made["config"]["scale"], made["seed"]) == (0.01, seed)
    assert len(read_matrix_table(result.dataset)) == 2350


def test_a_build_folder_holding_features_resumes_after_an_interrupt(built, capsys,
                                                                    monkeypatch):
    """Audit item 13: a build folder holding `features/` (the README's layout) could not be
    resumed after a SIGTERM: "already exists and is not written by vprom"."""
    out, result = built
    seed = _recorded_seed(out)
    features = out / "features" / "resnet101.h5"
    features.parent.mkdir(exist_ok=True)
    features.write_bytes(b"features extracted from this build")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # what a SIGTERM raises in the main thread

    monkeypatch.setattr("vprom.app.build.verify", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build(out, synthetic=True, images=1000, scale=0.01, seed=seed)
    monkeypatch.undo()
    build(out, synthetic=True, images=1000, scale=0.01, seed=seed)
    assert "[3/5] dataset: kept" in capsys.readouterr().out
    assert features.read_bytes() == b"features extracted from this build"
    assert "dataset.h5" in json.loads((out / "manifest.json").read_text())["outputs"]
