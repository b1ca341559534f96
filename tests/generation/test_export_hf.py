"""`vprom export --format hf`, loaded with the real `datasets` library (a test extra): the
folder as a Hub data set (`load_dataset(OUT, config)`, configs from the card's YAML) and as
plain Parquet (`load_dataset("parquet", data_files=...)`), every split and part, each row
compared with DATASET.h5 and each crop image with the VG crop."""

from __future__ import annotations


import numpy as np
import pytest

from vprom.generation.export import hf as export_hf
from vprom.generation.export import export
from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.errors import VpromError
from vprom.images import ImageIndex, load_crop
from vprom.domain import SPLITS
from vprom.tables import SPLIT_PARTS, read_crop_table, read_matrix_table

datasets = pytest.importorskip("datasets", reason="datasets is in the test extra")


@pytest.fixture(autouse=True)
def offline_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def load(tmp_path, *args, **kwargs):
    """`datasets.load_dataset` with a cache of this test's own: `datasets` reads
    HF_DATASETS_CACHE once, at import, and a shared cache keyed by the folder's path can hand
    back an earlier export written to a recycled temporary folder."""
    return datasets.load_dataset(*args, cache_dir=str(tmp_path / "hf-cache"), **kwargs)


@pytest.fixture(scope="module")
def exported(synthetic_build, tmp_path_factory):
    dataset, vg = synthetic_build
    out = tmp_path_factory.mktemp("hf") / "vprom-hf"
    summary = export(dataset, "hf", out, vg_dir=vg, verify_text="verdict: PASS (test)")
    return out, dataset, vg, summary


def test_card_metadata(exported):
    out, *_ = exported
    text = (out / "README.md").read_text()
    head = text.split("---")[1]
    assert "license: cc-by-4.0" in head
    for split in SPLITS:
        assert f"- config_name: {split}" in head
        for part in SPLIT_PARTS:
            assert f"path: data/{split}/{part}-*.parquet" in head
    assert "- config_name: crops" in head and head.count("default: true") == 1
    assert "verdict: PASS (test)" in text and "teney2020vprom" in text
    assert "krishna2017visualgenome" in text


def test_load_dataset_reads_every_split_and_part(exported, tmp_path):
    out, dataset, _, summary = exported
    m = read_matrix_table(dataset)
    crops = read_crop_table(dataset)
    row_of = {int(c): r for r, c in enumerate(crops.crop_id)}
    for split in SPLITS:
        loaded = load(tmp_path, str(out), split)
        assert set(loaded) == set(SPLIT_PARTS)
        for part in SPLIT_PARTS:
            rows = loaded[part]
            assert sorted(rows["id"]) == sorted(int(i) for i in m.splits[split][part])
            assert len(rows) == summary.counts["splits"][split][part] > 0
        first = loaded["train"][0]
        i = int(np.flatnonzero(m.id == first["id"])[0])
        assert first["answer"] == int(m.answer[i]) and first["relation"] == m.relation[i]
        assert first["panels"] == m.panels[i].tolist()
        assert first["elements"] == [str(e) for e in m.elements[i]]
        assert first["answer_element"] == m.elements[i, 8 + int(m.answer[i])]
        r = row_of[first["panels"][0]]
        assert first["image_ids"][0] == int(crops.image_id[r])
        assert first["boxes"][0] == [int(crops.x[r]), int(crops.y[r]), int(crops.w[r]),
                                     int(crops.h[r])]
    default = load(tmp_path, str(out))
    assert len(default["train"]) == summary.counts["splits"]["neutral"]["train"]


def test_crops_decode_as_images(exported, tmp_path):
    out, dataset, vg, summary = exported
    crops = read_crop_table(dataset)
    row_of = {int(c): r for r, c in enumerate(crops.crop_id)}
    table = load(tmp_path, str(out), "crops", split="train")
    assert len(table) == summary.counts["crops"]
    index = ImageIndex(vg)
    for k in (0, len(table) - 1):
        row = table[k]
        r = row_of[row["crop_id"]]
        crop = load_crop(index.path(crops.image_id[r]),
                         (crops.x[r], crops.y[r], crops.w[r], crops.h[r]))
        assert row["image"].size == crop.size  # a decoded PIL image, the crop's size
        diff = np.abs(np.asarray(row["image"].convert("RGB"), np.int16)
                      - np.asarray(crop.convert("RGB"), np.int16))
        assert diff.mean() < 4  # JPEG quality 95


def test_plain_parquet_loading(exported, tmp_path):
    out, dataset, _, summary = exported
    files = {part: str(out / "data" / "held_out_objects" / f"{part}-*.parquet")
             for part in SPLIT_PARTS}
    loaded = load(tmp_path, "parquet", data_files=files)
    for part in SPLIT_PARTS:
        assert len(loaded[part]) == summary.counts["splits"]["held_out_objects"][part]
    crops = load(tmp_path, "parquet", data_files=str(out / "data/crops/*.parquet"),
                                  split="train")
    assert crops.features["image"].__class__.__name__ == "Image"


def card_snippet(out) -> str:
    """The card's Python block, pointed at the export."""
    text = (out / "README.md").read_text(encoding="utf-8")
    return text.split("```python\n")[1].split("```")[0].replace("PATH", str(out))


def test_card_states_and_checks_its_minimum_datasets(exported, tmp_path, monkeypatch):
    """`configs:` is read from datasets 2.14.0 on; 2.13 mixes every split into one table."""
    out, *_ = exported
    assert "needs `datasets` 2.14 or later" in (out / "README.md").read_text()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    real = datasets.__version__
    monkeypatch.setattr(datasets, "__version__", "2.13.0")
    with pytest.raises(SystemExit, match=r"^datasets 2.13.0 ignores .*'datasets>=2.14'"):
        exec(card_snippet(out), {})  # noqa: S102 (the card's snippet, as a user runs it)
    monkeypatch.setattr(datasets, "__version__", real)
    names = {}
    exec(card_snippet(out), names)  # noqa: S102
    assert len(names["images"]) == 16 and sorted(names["problems"]) == sorted(SPLIT_PARTS)


def test_resumes_after_an_interruption_and_never_replaces(synthetic_build, tmp_path,
                                                          monkeypatch):
    dataset, vg = synthetic_build
    out = tmp_path / "hf"
    monkeypatch.setattr(export_hf, "SHARD_BYTES", 200_000)  # several crop shards
    real, calls = export_hf.write_table, []

    def dies_on_third(path, columns, features):
        calls.append(path.name)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(path, columns, features)

    monkeypatch.setattr(export_hf, "write_table", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        export(dataset, "hf", out, vg_dir=vg)
    done = sorted(p.name for p in (tmp_path / "hf.partial" / "data" / "crops").iterdir())
    assert done == ["crops-00000.parquet", "crops-00001.parquet"] and not out.exists()
    monkeypatch.setattr(export_hf, "write_table", real)
    summary = export(dataset, "hf", out, vg_dir=vg)
    assert summary.counts["new_crop_shards"] == summary.counts["crop_shards"] - 2 > 0
    ids = load(tmp_path, str(out), "crops", split="train")["crop_id"]
    assert ids == sorted(set(ids)) and len(ids) == summary.counts["crops"]
    with pytest.raises(VpromError, match="already exists"):
        export(dataset, "hf", out, vg_dir=vg)


def test_without_pyarrow_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(VpromError, match=r"pip install 'vprom\[hf\]'"):
        export_hf.pyarrow_modules()


@pytest.mark.slow
def test_cli_runs_verify_and_the_card_quotes_it(synthetic_build, tmp_path, capsys):
    from vprom.app import cli

    dataset, vg = synthetic_build
    out = tmp_path / "hf"
    assert cli.main(["export", str(dataset), "--format", "hf", "--vg", str(vg), "--out",
                     str(out)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out}: a Hugging Face data set of ")
    card = (out / "README.md").read_text()
    assert f"vprom verify {dataset}" in card and "verdict: PASS" in card
