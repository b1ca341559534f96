"""The command line of the client exports (issue 23): `--help` names savir-t and hf with
their full-scale sizes, savir-t needs --features, and hf refuses a data set `vprom verify`
fails (an hf export is for sharing) before writing anything."""

from __future__ import annotations

import pytest

from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.app import cli


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("clients")
    crops, matrices = build_records(1, seed=4)
    return write_dataset(root / "d.h5", crops, matrices), write_images(root / "vg", crops)


def test_help_states_the_new_formats_and_sizes(capsys):
    with pytest.raises(SystemExit):
        cli.main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "savir-t:" in text and "hf:" in text and "--style {pgm,raven,color}" in text
    assert "6.4 MB a problem, ~1.5 TB at full scale" in text
    assert "--format npz --style color" in text


def test_savir_t_needs_the_maps(small, tmp_path, capsys):
    dataset, _ = small
    assert cli.main(["export", str(dataset), "--format", "savir-t", "--out",
                     str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass --features MAPS.h5" in err
    assert not (tmp_path / "s").exists()


def test_hf_refuses_an_unverified_data_set(small, tmp_path, capsys):
    """The fixture's hand-made splits do not follow the split rules: verify fails."""
    dataset, vg = small
    assert cli.main(["export", str(dataset), "--format", "hf", "--vg", str(vg), "--out",
                     str(tmp_path / "h")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "verification failed" in err
    assert "needs a verified data set" in err
    assert not (tmp_path / "h").exists() and not (tmp_path / "h.partial").exists()
