"""The human study: a stratified sample with no answer in sight, a server that records answers
safely and refuses everything else, and a scorer that counts exactly what was answered."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from vprom.app import cli
from vprom.app.api import human_score, human_study
from vprom.app.human.server import Study
from vprom.app.human.study import Cell, allocate, load_key
from vprom.errors import VpromError
from vprom.tables import read_matrix_table


def test_the_sample_is_even_across_relations_then_element_types():
    available = {Cell(r, t): 50 for r, t in [("and", "object"), ("and", "count"),
                                              ("or", "object"), ("or", "count"),
                                              ("union", "object"), ("union", "count"),
                                              ("progression", "count")]}
    quota = allocate(40, available, np.random.default_rng(0))
    per_relation = Counter()
    for cell, k in quota.items():
        per_relation[cell.relation] += k
    assert sum(quota.values()) == 40 and set(per_relation.values()) == {10}
    assert {quota[Cell("and", "object")], quota[Cell("and", "count")]} == {5}


def test_a_short_cell_hands_its_share_to_its_relation():
    available = {Cell("and", "object"): 1, Cell("and", "count"): 30, Cell("or", "count"): 30}
    quota = allocate(20, available, np.random.default_rng(0))
    assert quota == {Cell("and", "object"): 1, Cell("and", "count"): 9, Cell("or", "count"): 10}
    with pytest.raises(VpromError, match="at most that many"):
        allocate(62, available, np.random.default_rng(0))


def test_the_study_folder_hides_the_answer(study, built):
    key = load_key(study)
    table = read_matrix_table(built[0])
    problems = json.loads((study / "public" / "problems.json").read_text())["problems"]
    assert len(problems) == 13 and {p["key"] for p in problems} == set(key["problems"])
    relations = Counter(p["relation"] for p in key["problems"].values())
    test_ids = set(table.splits["neutral"]["test"].tolist())
    in_test = Counter(str(r) for r, i in zip(table.relation, table.id) if int(i) in test_ids)
    # 13 over 4 relations: 3 or 4 each, unless the test part holds fewer of a relation
    assert all(relations[r] in (3, 4) or relations[r] == in_test[r] for r in in_test)
    for p in problems:
        k = key["problems"][p["key"]]
        assert k["matrix_id"] in test_ids
        row = int(np.flatnonzero(table.id == k["matrix_id"])[0])
        # the candidate shown at the key's answer position is the dataset's answer
        assert k["candidate_order"][k["answer"]] == int(table.answer[row])
        assert len(p["context"]) == 8 and len(p["candidates"]) == 8
    public = sorted(p.relative_to(study / "public").as_posix()
                    for p in (study / "public").rglob("*") if p.is_file())
    text = " ".join(public) + (study / "public" / "problems.json").read_text()
    assert not any(word in text for word in ("answer", "relation", "matrix", "element"))
    images = [p for p in public if p.startswith("images/")]
    assert all(len(Path(p).stem) == 16 for p in images)
    # answers sit at no fixed position of the public list
    assert len({k["answer"] for k in key["problems"].values()}) > 1


def test_same_seed_same_study(built, tmp_path, study):
    dataset, vg = built
    summary = human_study(dataset, vg, tmp_path / "again", n=13, seed=1)
    for name in ("public/problems.json", "public/example.json"):
        assert (summary.out / name).read_bytes() == (study / name).read_bytes()
    # what the command prints: the problems per relation / element type add up to n
    text = str(summary)
    cells = re.search(r": 13 problems \((.*)\), (\d+) images", text)
    assert cells and sum(int(c.rsplit(" ", 1)[1]) for c in cells[1].split(", ")) == 13, text
    assert f"vprom human-serve {summary.out}" in text


def test_an_impossible_sample_is_refused(built, tmp_path):
    with pytest.raises(VpromError, match="at most that many"):
        human_study(*built, tmp_path / "s", n=10_000)
    with pytest.raises(VpromError, match="no split 'nope'"):
        human_study(*built, tmp_path / "s", split="nope")


def answer_body(session: dict, k: int, position, participant="p1") -> dict:
    p = session["problems"][k]
    return {"participant": participant, "problem": p["key"], "position": position,
            "skipped": position is None, "rt_ms": 1234.5, "order": p["order"]}


def get_session(s, participant="p1") -> dict:
    status, body = s.request("GET", f"/api/session?participant={participant}")
    assert status == 200
    return json.loads(body)


def test_answers_are_recorded_once_and_resume(served):
    s, folder = served
    session = get_session(s)
    assert session["answered"] == [] and len(session["problems"]) == 13
    assert s.request("POST", "/api/response", answer_body(session, 0, 3))[0] == 201
    assert s.request("POST", "/api/response", answer_body(session, 1, None))[0] == 201
    assert s.request("POST", "/api/response", answer_body(session, 0, 4))[0] == 409
    again = get_session(s)  # a reload: same order, two done
    assert [p["key"] for p in again["problems"]] == [p["key"] for p in session["problems"]]
    assert sorted(again["answered"]) == sorted(p["key"] for p in session["problems"][:2])
    lines = (folder / "responses" / "p1.jsonl").read_text().splitlines()
    first, second = map(json.loads, lines)
    assert first["position"] == 3 and first["candidate"] == session["problems"][0]["order"][3]
    assert second["skipped"] and second["choice"] is None
    # another participant sees another order
    other = get_session(s, "p2")
    assert [p["key"] for p in other["problems"]] != [p["key"] for p in session["problems"]]


@pytest.mark.parametrize("change, status", [
    ({"position": 8}, 400),
    ({"position": None}, 400),  # not a skip, yet no position
    ({"skipped": True}, 400),  # a skip with a position
    ({"participant": "../etc"}, 400),
    ({"rt_ms": "fast"}, 400),
    ({"order": [0, 0, 1, 2, 3, 4, 5, 6]}, 400),
    ({"order": "rotated"}, 400),  # a permutation, but not the order shown
    ({"problem": "0000000000000000"}, 404),
    ({"extra": 1}, 400),
])
def test_malformed_responses_are_refused(served, change, status):
    s, folder = served
    session = get_session(s)
    body = {**answer_body(session, 0, 2), **change}
    if body["order"] == "rotated":
        shown = session["problems"][0]["order"]
        body["order"] = shown[1:] + shown[:1]
    code, reply = s.request("POST", "/api/response", body)
    assert code == status and json.loads(reply)["error"]
    assert not (folder / "responses" / "p1.jsonl").exists()


@pytest.mark.parametrize("raw, status", [(b"not json", 400), (b"[1, 2]", 400),
                                         (b"x" * (64 * 1024 + 1), 413)])
def test_bodies_that_are_not_responses_are_refused(served, raw, status):
    s, _ = served
    assert s.request("POST", "/api/response", raw=raw)[0] == status


@pytest.mark.parametrize("path", ["/../study.json", "/%2e%2e/study.json", "/images/../../study.json",
                                  "/study.json", "/responses/p1.jsonl", "/..%2fstudy.json",
                                  "//etc/passwd", "/.hidden", "/images/", "/nope.html"])
def test_nothing_outside_the_public_folder_is_served(served, path):
    s, folder = served
    (folder / "public" / ".hidden").write_text("secret")
    status, body = s.request("GET", path)
    assert status == 404 and b"secret" not in body and b"answer" not in body


def test_the_page_and_its_images_are_served(served):
    s, folder = served
    assert s.request("GET", "/")[0] == 200
    name = next((folder / "public" / "images").iterdir()).name
    status, body = s.request("GET", f"/images/{name}")
    assert status == 200 and body[:2] == b"\xff\xd8"
    assert s.request("POST", "/elsewhere", {"a": 1})[0] == 404


def test_human_score_counts_exactly_what_was_answered(served, capsys):
    s, folder = served
    key = load_key(folder)["problems"]
    session = get_session(s)
    plan = ["right", "wrong", "right", "skip", "right", "wrong"]
    for k, what in enumerate(plan):
        p = session["problems"][k]
        answer_position = p["order"].index(key[p["key"]]["answer"])
        position = {"right": answer_position, "wrong": (answer_position + 1) % 8,
                    "skip": None}[what]
        assert s.request("POST", "/api/response", answer_body(session, k, position))[0] == 201
    metrics = human_score(folder)
    assert metrics["test"]["n"] == 5 and metrics["test"]["correct"] == 3
    assert metrics["skips"]["all"] == {**metrics["skips"]["all"], "n": 6, "skipped": 1}
    assert json.loads((folder / "metrics.json").read_text())["test"]["accuracy"] == 3 / 5
    assert cli.main(["human-score", str(folder)]) == 0
    assert "accuracy  60.0%" in capsys.readouterr().out


def test_human_score_refuses_bad_lines(study, tmp_path):
    import shutil

    folder = tmp_path / "s"
    shutil.copytree(study, folder)
    problem = next(iter(load_key(folder)["problems"]))
    line = {"participant": "a", "problem": problem, "skipped": False, "choice": 1}
    path = folder / "responses" / "a.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(VpromError, match="a.jsonl line 2: participant a answered"):
        human_score(folder)
    for broken in ("{broken", "[" * 60_000, '{"participant": ' + "9" * 5_000 + "}"):
        path.write_text(broken + "\n")
        with pytest.raises(VpromError, match="a.jsonl line 1: not a response"):
            human_score(folder)


def test_report_shows_humans_beside_the_models(served, tmp_path):
    from vprom.baselines.report import report

    s, folder = served
    session = get_session(s)
    for k in range(4):
        assert s.request("POST", "/api/response", answer_body(session, k, k))[0] == 201
    human_score(folder)
    report([folder], tmp_path / "report")
    assert "humans" in (tmp_path / "report" / "splits.md").read_text()


def test_a_study_needs_its_key(tmp_path):
    with pytest.raises(VpromError, match="no study.json"):
        Study(tmp_path)


def test_a_second_server_on_one_study_is_refused(study, tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    from vprom.app.api import human_serve

    folder = tmp_path / "s"
    shutil.copytree(study, folder)
    root = Path(__file__).resolve().parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; from vprom.claim import output_lock\n"
         f"with output_lock({str(folder / 'responses')!r}):\n    print('held', flush=True); "
         "time.sleep(60)"], env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(VpromError, match=str(holder.pid)):
            human_serve(folder, port=0)
    finally:
        holder.kill()
        holder.wait()
