"""`vprom score`: anyone's predictions scored as `vprom evaluate` scores a run, refusals of an
incomplete or inconsistent file, and a metrics.json that `vprom report` reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from vprom.baselines.data import load_split
from vprom.baselines.evaluate import evaluate
from vprom.baselines.run_folder import load_checkpoint
from vprom.baselines.train import build_model, train

from tests.baselines.conftest import small_config
from vprom.app.answers import read_predictions
from vprom.app.api import score as score_predictions
from vprom.app.cli import main
from vprom.errors import VpromError
from vprom.tables import read_matrix_table

BREAKDOWNS = ("test", "by_relation", "by_element_type", "by_relation_element_type")


def write_csv(path, ids, choices, scores=None):
    head = "matrix_id,choice" + "".join(f",score_{k}" for k in range(8) if scores is not None)
    lines = [head] + [f"{i},{c}" + ("".join(f",{v}" for v in scores[n]) if scores is not None
                                    else "") for n, (i, c) in enumerate(zip(ids, choices))]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_score_agrees_with_evaluate_on_a_runs_own_predictions(tiny_pair, tmp_path):
    dataset, features = tiny_pair
    config = small_config(dataset, features, tmp_path / "run", epochs=2)
    run = train(config)
    evaluated = evaluate(run, device="cpu")
    # the run's own predictions, made from best.pt as `evaluate` makes them
    data = load_split(dataset, features, "neutral")
    model, _ = build_model(config, data.feature_dim)
    model.load_state_dict(load_checkpoint(run / "best.pt")["model"])
    model.eval()
    test = data.parts["test"]
    with torch.no_grad():
        scores = model(data.panels(test, torch.arange(len(test)))).scores
    (tmp_path / "mine").mkdir()
    predictions = write_csv(tmp_path / "mine" / "predictions.csv", test.ids,
                            scores.argmax(1).tolist(), scores.tolist())
    scored, ceiling = score_predictions(dataset, predictions, split="neutral")
    written = json.loads((tmp_path / "mine" / "metrics.json").read_text())
    on_disk = json.loads((run / "metrics.json").read_text())
    for key in BREAKDOWNS:
        assert written[key] == on_disk[key]  # to the last digit
    assert set(written) == set(on_disk)  # evaluate's schema
    assert written["model"] == "mine" and written["chance"] == evaluated["chance"]
    assert 0 <= ceiling["test"]["all"] <= 1

    # `vprom report` puts the outside model beside the baseline
    from vprom.baselines.report import report

    report([run, tmp_path / "mine"], tmp_path / "report")
    assert "mine" in (tmp_path / "report" / "splits.md").read_text()


@pytest.fixture
def problems(tiny_pair):
    dataset, _ = tiny_pair
    table = read_matrix_table(dataset)
    return dataset, table, np.sort(table.splits["neutral"]["test"])


def test_every_refusal_is_one_line_with_counts_examples_and_lines(problems, tmp_path):
    dataset, table, test = problems
    ids = list(test[3:]) + [int(test[5]), int(test[5]), int(test[6]), 99999, 88888]
    path = write_csv(tmp_path / "p.csv", ids, [0] * len(ids))
    with pytest.raises(VpromError) as e:
        score_predictions(dataset, path, out=tmp_path / "o")
    lines = str(e.value).splitlines()
    n = len(test) - 3  # test[3:] is on lines 2..n+1, under the header
    assert len(lines) == 2
    assert f"{path}: 2 matrix ids are listed more than once (e.g. {test[5]} (lines 4, " \
           f"{n + 2}, {n + 3}), {test[6]} (lines 5, {n + 4}))" in lines[0]
    assert "2 ids are not matrices of" in lines[1]
    assert f"(e.g. 88888 (line {n + 6}), 99999 (line {n + 5}))" in lines[1]
    assert not (tmp_path / "o" / "metrics.json").exists()
    train = table.splits["neutral"]["train"][:5]
    for only, text in (([*test, test[0]], "listed more than once"), ([*test, 12345],
                       "not matrices of"), (train, "none of its 5 predictions is one of the")):
        path = write_csv(tmp_path / "one.csv", only, [0] * len(only))
        with pytest.raises(VpromError, match=text) as e:
            score_predictions(dataset, path, out=tmp_path / "o")
        assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize("text, message", [
    ("matrix_id,choice\n1,8\n", "line 2: choice 8 is not a candidate"),
    ("matrix_id,choice\n1,x\n", "line 2: choice 'x' is not a number"),
    ("matrix_id,choice\n1\n", "line 2: 1 fields, the header has 2"),
    ("id,choice\n1,2\n", "starts with the header `matrix_id,choice`"),
    ('{"matrix_id": 1, "scores": [1, 2]}\n', "line 1: scores need 8 finite numbers"),
    ('{"matrix_id": 1}\n', "line 1: no choice and no scores"),
    ('{"matrix_id": 1, "choice": 2}\n[1, 2]\n', "line 2: not a JSON object"),
])
def test_malformed_lines_are_refused_naming_the_line(tmp_path, text, message):
    path = tmp_path / "p.txt"
    path.write_text(text)
    with pytest.raises(VpromError, match=message):
        read_predictions(path)


def test_json_lines_with_scores_only_take_the_best_candidate(problems, tmp_path):
    dataset, table, test = problems
    rows = np.searchsorted(table.id, test)
    answers = table.answer[rows]
    lines = []
    for i, a in zip(test, answers):
        scores = [0.0] * 8
        scores[int(a) if i % 2 else (int(a) + 1) % 8] = 1.0
        lines.append(json.dumps({"matrix_id": int(i), "scores": scores}))
    extra = [int(m) for m in table.splits["neutral"]["train"][:4]]  # allowed, not scored
    lines += [json.dumps({"matrix_id": m, "choice": 0}) for m in extra]
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n")
    metrics, _ = score_predictions(dataset, path, out=tmp_path / "o", model="odd-ones")
    assert metrics["test"]["correct"] == int(sum(test % 2 == 1))
    assert metrics["config"]["not_scored"] == 4 and metrics["model"] == "odd-ones"


def test_the_command_prints_evaluates_breakdown_beside_the_ceiling(problems, tmp_path, capsys):
    dataset, _, test = problems
    (tmp_path / "mine").mkdir()
    path = write_csv(tmp_path / "mine" / "p.csv", test, [0] * len(test))
    assert main(["score", str(dataset), str(path), "--split", "neutral"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert f"(choice; {len(test)} test problems scored; 0 other predictions" in lines[0]
    assert "test accuracy" in out
    assert "chance 12.5%, humans (paper) 77.8%, perception-only ceiling" in lines[1]
    assert lines[2].startswith(f"unparsed 0 of {len(test)} (0.0%, scored wrong); letters "
                               f"chosen A {len(test)}, B 0, C 0, D 0, E 0, F 0, G 0, H 0; "
                               "entropy 0.00 bits (at most 3)")
    assert "by relation:" in out and "by relation x element type:" in out
    assert "ceiling" in lines[4]
    assert (tmp_path / "mine" / "metrics.json").is_file()
    assert main(["score", str(dataset), str(path)]) == 0  # its own metrics.json: replaced


def test_a_metrics_json_of_evaluate_is_never_overwritten(problems, tmp_path, capsys):
    dataset, table, test = problems
    (tmp_path / "metrics.json").write_text(json.dumps({"model": "rn", "config": {}}))
    path = write_csv(tmp_path / "p.csv", test, [0] * len(test))
    assert main(["score", str(dataset), str(path)]) == 1
    assert "was not written by `vprom score`; pass --out" in capsys.readouterr().err
    assert json.loads((tmp_path / "metrics.json").read_text())["model"] == "rn"


@pytest.mark.parametrize("text, line", [
    ("matrix_id,choice\n1," + "9" * 200_000 + "\n", 2),  # a 200 KB line
    ("matrix_id,choice\n1,2\n" + "7" * 200_000 + ",1\n", 3),
    (f"matrix_id,choice\n{2 ** 80},1\n", 2),  # beyond any matrix id
    ("matrix_id,choice\n-1,1\n", 2),
    (f'{{"matrix_id": {2 ** 80}, "choice": 1}}\n', 1),
    ('{"matrix_id": 1, "choice": 1}\n{"matrix_id": ' + "9" * 5_000 + ', "choice": 1}\n', 2),
    ('{"matrix_id": 1, "choice": 1}\n' + "[" * 60_000 + "\n", 2),
])
def test_huge_lines_and_ids_are_one_line_naming_the_line(problems, tmp_path, capsys, text, line):
    dataset, _, _ = problems
    path = tmp_path / "p.txt"
    path.write_text(text)
    assert main(["score", str(dataset), str(path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}, line {line}: " in err and "each line needs a matrix id" in err


def test_a_matrix_id_is_read_exactly(tmp_path):
    path = write_csv(tmp_path / "p.csv", ["9007199254740993", "12.0"], [1, 2])
    assert read_predictions(path).matrix_id.tolist() == [9007199254740993, 12]


def test_metrics_json_names_its_inputs_relative_to_itself(problems, tmp_path):
    dataset, _, test = problems
    (tmp_path / "in").mkdir()
    predictions = write_csv(tmp_path / "in" / "p.csv", test, [0] * len(test))
    score_predictions(dataset.resolve(), predictions.resolve(), out=tmp_path / "scored")
    text = (tmp_path / "scored" / "metrics.json").read_text()
    assert str(tmp_path) not in text and str(dataset.resolve().parent) not in text
    written = json.loads(text)
    folder = tmp_path / "scored"
    assert (folder / written["dataset"]).resolve() == dataset.resolve()
    assert (folder / written["config"]["predictions"]).resolve() == predictions.resolve()
    assert written["run"] == "."


def test_a_csv_or_json_lines_with_a_byte_order_mark_is_read(problems, tmp_path):
    test = problems[2]
    plain = write_csv(tmp_path / "plain.csv", test, [3] * len(test))
    for name, text in (("bom.csv", plain.read_text()),
                       ("bom.jsonl", "".join(json.dumps({"matrix_id": int(i), "choice": 3}) + "\n"
                                             for i in test))):
        (tmp_path / name).write_text(text, encoding="utf-8-sig")  # Excel's "CSV UTF-8"
        found = read_predictions(tmp_path / name)
        assert found.matrix_id.tolist() == [int(i) for i in test]
        assert found.choice.tolist() == [3] * len(test)
