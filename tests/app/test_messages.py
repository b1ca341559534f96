"""Every error names its file and says what it is, in one line."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from tests.dataset_fixture import make_dataset, write_pools
from vprom.app.cli import main


def one_line(argv: list[str], capsys) -> str:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_verify_a_damaged_dataset_names_it(tmp_path, capsys):
    good = make_dataset(tmp_path / "good.h5")
    data = bytearray(good.read_bytes())
    for k in range(3000, len(data), 997):
        data[k] ^= 0xFF
    bad = tmp_path / "bad.h5"
    bad.write_bytes(bytes(data))
    err = one_line(["verify", str(bad)], capsys)
    assert f"{bad}: cannot be read" in err and "a file" not in err, err


def test_verify_a_folder_says_it_is_a_folder(tmp_path, capsys):
    err = one_line(["verify", str(tmp_path)], capsys)
    assert f"{tmp_path}: is a folder" in err, err


def test_stats_on_pools_says_it_takes_a_dataset(tmp_path, capsys):
    pools = write_pools(tmp_path / "p.h5", images=10)
    err = one_line(["stats", str(pools)], capsys)
    assert "is a POOLS.h5" in err and "takes a DATASET.h5" in err, err


class Payload:
    def __reduce__(self):
        return (print, ("pwned",))


@pytest.mark.parametrize("content, why", [
    (lambda: pickle.dumps(Payload()), "contains code objects"),
    (lambda: b"hello, not a checkpoint", "not a vprom checkpoint"),
])
def test_a_refused_checkpoint_is_one_line(tmp_path, capsys, content, why):
    """A checkpoint that is not vprom's, or carries code, is refused in one line of ours."""
    import torch

    from vprom.baselines.run_folder import load_checkpoint
    from vprom.errors import VpromError

    path = tmp_path / "best.pt"
    if why == "contains code objects":
        torch.save({"model": Payload()}, path)
    else:
        path.write_bytes(content())
    with pytest.raises(VpromError) as caught:
        load_checkpoint(path)
    text = str(caught.value)
    assert "\n" not in text and why in text and str(path) in text, text
    assert "pwned" not in capsys.readouterr().out


def test_evaluate_refuses_a_malicious_checkpoint_in_one_line(tmp_path, capsys):
    import torch

    from tests.baselines.conftest import small_config, write_pair
    from vprom.baselines.train import train

    dataset, features = write_pair(tmp_path / "pair")
    run = train(small_config(dataset, features, tmp_path / "run", epochs=1))
    torch.save({"model": Payload()}, Path(run) / "best.pt")
    err = one_line(["evaluate", str(run), "--device", "cpu"], capsys)
    assert "best.pt: refused, it contains code objects" in err, err
