"""`vprom verify --learned`: the context-blind model trained on the candidates' labels passes
answer sets that say nothing, fails a planted answer-only label and the legacy count
candidates, and gives the same figures for any number of workers."""

from __future__ import annotations

import pytest

from tests.dataset_fixture import build_records, write_dataset
from tests.generation.test_count_candidates import legacy_and_current_reports
from vprom.domain import ElementType
from vprom.generation.verify import learned, verify
from vprom.splits import load_rules


def learned_report(tmp_path, bias, workers=1):
    crops, matrices = build_records(150, seed=3, bias=bias, element_types=(
        ElementType.COUNT, ElementType.OBJECT_ATTRIBUTE))
    path = write_dataset(tmp_path / f"{bias}.h5", crops, matrices)
    return verify(path, load_rules(), workers=workers, learned=True)


def learned_check(report):
    return next(c for c in report.checks if c.name == "bias:probe-learned")


def test_sound_records_pass_and_the_same_for_any_worker_count(tmp_path):
    one, two = (learned_check(learned_report(tmp_path, None, w)) for w in (1, 2))
    assert one.status == "pass", one.summary
    figures = one.figures
    assert {"count", "count x progression", "object_attribute x or"} <= set(figures)
    assert figures["count"]["judged"] and figures["count"]["test"] >= learned.MIN_PROBE_TEST
    assert one.figures == two.figures


def test_an_answer_only_label_fails(tmp_path):
    # only the answer's crop carries the labels "shiny" and "big"
    check = learned_check(learned_report(tmp_path, "labels"))
    assert check.status == "fail", check.summary
    judged = [g for g, f in check.figures.items() if f["judged"]]
    assert judged and all(check.figures[g]["failed"] for g in judged)
    assert all(check.figures[g]["accuracy"] > 0.9 for g in judged)


def test_verify_runs_the_learned_probe_only_when_asked(tmp_path):
    crops, matrices = build_records(2, seed=3)
    path = write_dataset(tmp_path / "d.h5", crops, matrices)
    report = verify(path, load_rules())
    assert "bias:probe-learned" not in {c.name for c in report.checks}


@pytest.mark.slow
def test_the_legacy_count_candidates_fail_at_full_scale_and_the_current_pass(
        pools_file, tmp_path, monkeypatch):
    """`generate` (with `--legacy-count-candidates` or not) at full scale, cut to its 25,000
    count x progression matrices (where the legacy candidates leak: the absent-values probe
    finds 20%), then `verify --learned`."""
    reports = legacy_and_current_reports(pools_file, tmp_path, monkeypatch, 1.0, workers=2,
                                         learned=True)
    old, new = (learned_check(reports[legacy]) for legacy in (True, False))
    assert old.status == "fail", old.summary
    assert old.figures["count x progression"]["failed"]
    assert new.status == "pass", new.summary
    assert new.figures["count x progression"]["ci95"][0] < 0.145


@pytest.mark.slow
def test_the_demo_build_passes_the_learned_probe(tmp_path):
    """`vprom build --synthetic --learned-probe` (the demo) passes."""
    from vprom.app.api import build
    from vprom.errors import VpromError

    try:
        build(tmp_path / "demo", synthetic=True, workers=2, learned_probe=True)
    except VpromError as e:
        assert "bias:probe-learned" not in str(e), str(e)
        raise
    assert "PASS bias:probe-learned" in (tmp_path / "demo" / "verify.txt").read_text()
