"""The bias audit: its statistics are right, it passes sound data and fails biased data."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from vprom.generation.verify import audit
from vprom.generation.verify import verify
from vprom.generation.verify.minimise import minimise
from vprom.splits import load_rules
from tests.dataset_fixture import build_records, fixture_assign, write_dataset


def test_heuristics_score_exactly_chance_on_distinct_candidates():
    rng = np.random.default_rng(0)
    codes = np.array([rng.permutation(20)[:8] for _ in range(50)])
    answers = rng.integers(0, 8, 50)
    for kind in ("mode", "odd"):
        assert np.allclose(audit.heuristic_hits(codes, answers, kind), 1 / 8)


def test_heuristic_hits_by_hand():
    codes = np.array([[0, 0, 0, 1, 2, 3, 4, 5],      # mode = the three 0s
                      [0, 0, 1, 1, 2, 2, 3, 4]])     # odd ones: 3 and 4
    answers = np.array([1, 7])
    # row 1: the answer (a 0) is one of 3 modes; row 2: the answer (4) is no mode
    assert audit.heuristic_hits(codes, answers, "mode").tolist() == [pytest.approx(1 / 3), 0.0]
    # row 1: the answer repeats, so it is no odd one; row 2: one of the 2 odd ones
    assert audit.heuristic_hits(codes, answers, "odd").tolist() == [0.0, 0.5]


def test_small_samples_are_not_flagged_by_noise():
    # 3 hits in 8 is 37.5%, but 8 matrices prove nothing
    hits = np.array([1, 1, 1, 0, 0, 0, 0, 0], dtype=float)
    assert audit.shortcut_check("x", "x", hits).status == "pass"
    assert audit.shortcut_check("x", "x", np.r_[hits, hits, hits, hits, hits, hits,
                                                hits, hits, hits, hits]).status == "fail"


# ---------------------------------------------------------------- on data sets
def bias_report(tmp_path, bias, features=None, n=60):
    crops, matrices = build_records(n, seed=3, bias=bias)
    path = write_dataset(tmp_path / f"{bias}.h5", crops, matrices)
    if features is not None:
        features = features(tmp_path, crops, matrices)
    report = verify(path, load_rules(), features=features, assigner=fixture_assign,
                    check_matrix=lambda *a: None)
    return {c.name: c for c in report.checks}


def test_sound_dataset_passes_the_audit(tmp_path):
    checks = bias_report(tmp_path, None)
    for name in ("bias:position", "bias:mode", "bias:odd-one-out", "bias:probe-labels"):
        assert checks[name].status == "pass", checks[name].summary
    # one probe per element type and one per relation x element type, each judged
    figures = checks["bias:probe-labels"].figures
    assert {"count", "human_attribute", "count x progression", "object x or"} <= set(figures)
    assert figures["count"]["test"] >= audit.MIN_PROBE_TEST and figures["count"]["judged"]


@pytest.mark.parametrize("bias, caught_by", [
    ("position", "bias:position"),
    ("mode", "bias:mode"),
    ("odd", "bias:odd-one-out"),
    ("labels", "bias:probe-labels"),
])
def test_biased_datasets_fail(tmp_path, bias, caught_by):
    checks = bias_report(tmp_path, bias)
    assert checks[caught_by].status == "fail", checks[caught_by].summary
    # the probe sees the candidates' labels and positions: it catches every one of these
    assert checks["bias:probe-labels"].status == "fail"


def test_answer_position_skew_in_one_element_type_is_caught():
    rng = np.random.default_rng(0)
    answers = rng.integers(0, 8, 4000)
    counts_rows = np.arange(3000, 4000)
    answers[counts_rows[:500]] = 3  # half the count matrices put the answer 4th
    check = audit.answer_position(answers, {"count": counts_rows,
                                            "object": np.arange(3000)})
    assert check.status == "fail"
    assert any(p.startswith("count:") for p in check.problems)
    assert not any(p.startswith("object:") for p in check.problems)


def write_features(signal: float):
    """A FEATS.h5 factory: random 16-d features, answer crops shifted by `signal`."""
    def make(tmp_path, crops, matrices):
        rng = np.random.default_rng(5)
        ids = np.array([c.crop_id for c in crops])
        feats = rng.normal(size=(len(ids), 16)).astype(np.float32)
        answer_crops = {m.panels[8 + m.answer] for m in matrices}
        feats[[i for i, c in enumerate(ids) if c in answer_crops], 0] += signal
        path = tmp_path / "feats.h5"
        with h5py.File(path, "w") as h5:
            h5["crop_id"] = ids[::-1]  # any order: the reader keys by crop id
            h5["features"] = feats[::-1]
        return path
    return make


def test_feature_probe_passes_uninformative_features(tmp_path):
    checks = bias_report(tmp_path, None, features=write_features(0.0))
    assert checks["bias:probe-features"].status == "pass", checks["bias:probe-features"].summary


def test_feature_probe_fails_when_answers_look_different(tmp_path):
    checks = bias_report(tmp_path, None, features=write_features(4.0))
    assert checks["bias:probe-features"].status == "fail", checks["bias:probe-features"].summary


def test_features_missing_a_crop_is_a_clear_error(tmp_path):
    def partial(tmp_path, crops, matrices):
        path = tmp_path / "feats.h5"
        with h5py.File(path, "w") as h5:
            h5["crop_id"] = np.array([c.crop_id for c in crops[:-1]])
            h5["features"] = np.zeros((len(crops) - 1, 4), np.float32)
        return path

    from vprom.errors import VpromError
    with pytest.raises(VpromError, match="have no features.*vprom extract"):
        bias_report(tmp_path, None, features=partial)


def test_features_extracted_with_allow_missing_leave_their_matrices_out(tmp_path, recwarn):
    def holes(tmp_path, crops, matrices):
        path = write_features(0.0)(tmp_path, crops, matrices)
        with h5py.File(path, "a") as h5:
            feats = h5["features"][()]
            feats[::97] = np.nan  # a crop in 97 could not be read
            del h5["features"]
            h5["features"] = feats
        return path

    checks = bias_report(tmp_path, None, features=holes)
    check = checks["bias:probe-features"]
    assert check.status == "pass", check.summary
    assert "left out" in check.summary and "--allow-missing" in check.summary
    assert "nan" not in check.summary.lower()
    assert all(np.isfinite(f["accuracy"]) for f in check.figures.values() if f["test"])
    assert not [w for w in recwarn if "numpy" in str(w.filename) or "Mean" in str(w.message)]


def test_a_maps_file_is_refused_with_what_to_pass_instead(tmp_path):
    def maps(tmp_path, crops, matrices):
        path = tmp_path / "maps.h5"
        with h5py.File(path, "w") as h5:
            h5["crop_id"] = np.array([c.crop_id for c in crops])
            h5["maps"] = np.zeros((len(crops), 4, 2, 2), np.float16)
        return path

    from vprom.errors import VpromError
    with pytest.raises(VpromError, match="spatial maps.*without --pool none"):
        bias_report(tmp_path, None, features=maps)


def test_label_overlap_by_hand():
    sets = [(0,), (0, 1), (2,), (), (1,), (3,), (4,), (2, 4)]  # a, a b, c, none, b, d, e, c e
    overlap = audit.label_overlap(audit.label_masks(sets), np.arange(8)[None]) * 7
    assert overlap.tolist() == [[1, 2, 1, 0, 1, 0, 1, 2]]
    # candidates that share a label set share its row: the first and the last alike
    twice = audit.label_overlap(audit.label_masks(sets), np.array([[1, 0, 2, 3, 4, 5, 6, 1]]))
    assert (twice * 7).tolist() == [[3, 2, 0, 0, 2, 0, 0, 3]]


def test_features_of_the_wrong_shape_are_a_clear_error(tmp_path):
    def wrong(tmp_path, crops, matrices):
        path = tmp_path / "feats.h5"
        with h5py.File(path, "w") as h5:
            h5["crop_id"] = np.array([c.crop_id for c in crops])
            h5["features"] = np.zeros((3, 4), np.float32)
        return path

    from vprom.errors import VpromError
    with pytest.raises(VpromError, match="'features' has shape"):
        bias_report(tmp_path, None, features=wrong)


def test_probe_groups_are_element_types_and_relations():
    etype = np.array(["count"] * 4 + ["object"] * 4)
    relation = np.array(["and", "or", "and", "or", "and", "and", "union", "union"])
    train, test = np.arange(0, 8, 2), np.arange(1, 8, 2)
    groups = {name: (tr.tolist(), te.tolist())
              for name, tr, te in audit.probe_groups(etype, relation, train, test)}
    assert groups == {"count": ([0, 2], [1, 3]), "count x or": ([], [1, 3]),
                      "object": ([4, 6], [5, 7]), "object x and": ([4], [5]),
                      "object x union": ([6], [7])}


def test_a_shortcut_in_one_relation_fails_although_the_element_type_passes():
    n = audit.MIN_PROBE_TEST * 40
    chance = np.full(n, 1 / 8)
    shortcut = np.full(n, 0.25)  # 25% right
    check = audit.judge_groups("bias:probe-labels", "probe", [
        ("human_attribute", np.r_[chance, chance, chance, chance * 1.02], n),
        ("human_attribute x or", shortcut, n),
        ("count x and", chance[:10], n)])  # too few to judge
    assert check.status == "fail"
    assert check.problems == [p for p in check.problems if p.startswith("human_attribute x or")]
    assert check.figures["count x and"]["judged"] is False
    assert not check.figures["human_attribute"]["failed"]


def test_the_label_probe_scores_as_the_plain_formula():
    """The probe keeps its features F×8N slot-major and the candidates' positions as 8
    shared slot features; its scores are those of the plain N×8×(F+8) formula: x·w with the
    standardised one-hot position among x's columns, plus the set part."""
    rng = np.random.default_rng(0)
    n, f, n_sparse = 50, 5, 40
    x = rng.normal(size=(n, 8, f)).astype(np.float32)
    cand = np.sort(rng.integers(0, n * 8, 300))
    feat = rng.integers(0, n_sparse, 300)
    w, table = rng.normal(size=f + 8), rng.normal(size=n_sparse)
    position = np.broadcast_to(np.eye(8), (n, 8, 8))
    plain = np.concatenate([x.astype(np.float64), (position - 1 / 8) / (np.sqrt(7) / 8)], axis=2)
    expected = plain @ w + np.bincount(cand, weights=table[feat], minlength=n * 8).reshape(n, 8)
    columns, part = audit._slot_major(x, (cand, feat), n_sparse)
    assert np.allclose(audit._set_scores(columns, w, part, table).T, expected,
                       rtol=0, atol=1e-12)


def test_minimise_finds_a_quadratics_minimum():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(30, 30))
    a, b = m @ m.T + 0.5 * np.eye(30), rng.normal(size=30)

    def loss_grad(x):
        return 0.5 * x @ a @ x - b @ x, a @ x - b

    best = np.linalg.solve(a, b)
    lowest = loss_grad(best)[0]
    # it stops once the loss falls by less than RTOL of itself over WINDOW iterations
    assert loss_grad(minimise(loss_grad, np.zeros(30)))[0] - lowest < 1e-6 * abs(lowest)
    assert np.allclose(minimise(loss_grad, best), best, rtol=0, atol=1e-12)  # stays there


def _newton_minimum(design: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, float]:
    """The conditional logit's minimum by Newton's method on the plain N×8×K design."""
    n, k = len(y), design.shape[2]
    params = np.zeros(k)
    for _ in range(30):
        loss, grad, p = _plain_loss(design, y, l2, params)
        spread = design - np.einsum("ij,ijk->ik", p, design)[:, None, :]
        hessian = np.einsum("ij,ijk,ijl->kl", p, spread, spread) / n + l2 * np.eye(k)
        params = params - np.linalg.solve(hessian, grad)
    return params, _plain_loss(design, y, l2, params)[0]


def _plain_loss(design, y, l2, params):
    n = len(y)
    scores = design @ params
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(n), y]).mean() + 0.5 * l2 * params @ params
    residual = p.copy()
    residual[np.arange(n), y] -= 1.0
    return loss, np.einsum("ij,ijk->k", residual, design) / n + l2 * params, p


def test_the_label_probe_is_the_minimum_of_its_loss():
    """The fitted weights minimise the plain N×8 formula's loss (the conditional logit of
    x·w, the standardised position and the set part, plus l2/2 of the squared weights), as
    Newton's method finds it: the probe is the loss's minimum, not where a step count
    stopped."""
    rng = np.random.default_rng(2)
    n, f, n_sparse, l2 = 300, 4, 30, 1e-3
    x = rng.normal(size=(n, 8, f)).astype(np.float32)
    cand = np.sort(rng.integers(0, n * 8, 1500))
    feat = rng.integers(0, n_sparse, 1500)
    y = np.where(rng.random(n) < 0.5, x[:, :, 0].argmax(axis=1), rng.integers(0, 8, n))
    columns, part = audit._slot_major(x, (cand, feat), n_sparse)
    w, table = audit.fit_set_probe(columns, y, part, n_sparse, l2)
    sparse = np.zeros((n * 8, n_sparse))
    np.add.at(sparse, (cand, feat), 1.0)
    design = np.concatenate([x.astype(np.float64), np.broadcast_to(audit.SLOTS, (n, 8, 8)),
                             sparse.reshape(n, 8, n_sparse)], axis=2)
    best, lowest = _newton_minimum(design, y, l2)
    fitted = np.concatenate([w, table])
    assert _plain_loss(design, y, l2, fitted)[0] - lowest < 1e-6 * lowest
    assert np.allclose(fitted, best, rtol=0, atol=0.05)
    assert w[0] > 0.5 > np.abs(w[1:f]).max()  # it learnt the planted signal in feature 0


def test_the_fits_scale_is_the_hessian_diagonal_where_it_starts():
    """`start_scale` is 1/√ of the loss's Hessian diagonal at weights 0 (p = 1/8), as the
    plain N×8×K design gives it: for the features, the positions and the set entries that
    `set_entries` makes of candidates' labels (each label with how many of the 8 hold it)."""
    rng = np.random.default_rng(4)
    n, f, n_labels, l2 = 40, 3, 6, 1e-3
    row_labels = [tuple(sorted(rng.choice(n_labels, rng.integers(0, 4), replace=False)))
                  for _ in range(30)]
    view = audit.CandidateView(element=None, super_attribute=None, n_labels=None,
                               overlap=None, area=None, aspect=None,
                               label_row=rng.integers(0, 30, (n, 8)), row_labels=row_labels)
    n_sparse = 8 * n_labels
    cand, feat = audit.set_entries(view, np.arange(n))
    x = rng.normal(size=(n, 8, f)).astype(np.float32)
    columns, part = audit._slot_major(x, (cand, feat), n_sparse)
    sparse = np.zeros((n * 8, n_sparse))
    np.add.at(sparse, (cand, feat), 1.0)
    design = np.concatenate([x.astype(np.float64), np.broadcast_to(audit.SLOTS, (n, 8, 8)),
                             sparse.reshape(n, 8, n_sparse)], axis=2)
    spread = design - design.mean(axis=1, keepdims=True)
    diagonal = np.einsum("ijk,ijk->k", spread, spread) / (8 * n) + l2
    assert np.allclose(audit.start_scale(columns, part, n, l2), 1 / np.sqrt(diagonal),
                       rtol=1e-9, atol=0)


def test_a_training_rows_answer_rate_does_not_reveal_its_answer():
    """Training rows take their elements' answer rates from the other folds of train, so
    within a fold an element has one rate, whether it is a row's answer or not. A
    leave-one-out rate would be lower exactly where the element is the row's answer, which
    a probe with one weight per element reads."""
    rng = np.random.default_rng(3)
    n = 200
    element = np.array([rng.permutation(10)[:8] for _ in range(n)])
    view = audit.CandidateView(element=element, super_attribute=np.zeros((n, 8), int),
                               n_labels=np.ones((n, 8)), overlap=np.zeros((n, 8)),
                               area=np.ones((n, 8)), aspect=np.ones((n, 8)))
    answers = rng.integers(0, 8, n)
    train = np.arange(0, n, 2)
    rate = audit.label_features(view, answers, train, train)[:, :, 4]
    for f in range(audit.FOLDS):
        rows = np.arange(len(train)) % audit.FOLDS == f
        for e in range(10):
            at = element[train][rows] == e
            assert np.ptp(rate[rows][at]) == 0, (f, e)
    # test rows see the rates of all of train: the same per element, fold or not
    test = np.arange(1, n, 2)
    rate = audit.label_features(view, answers, train, test)[:, :, 4]
    assert all(np.ptp(rate[element[test] == e]) == 0 for e in range(10))
