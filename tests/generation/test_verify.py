"""`vprom verify`: a sound data set passes; each kind of damage is caught and named."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest

from vprom.generation.verify import loaded
from vprom.generation.verify import checks, verify
from vprom.splits import load_rules
from tests.dataset_fixture import build_records, write_dataset
from vprom.app import cli
from vprom.tables import content_hash, crop_rows


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    crops, matrices = build_records(3, seed=1)
    return write_dataset(tmp_path_factory.mktemp("sound") / "dataset.h5", crops, matrices)


@pytest.fixture
def copy(sound, tmp_path):
    def make(name="damaged.h5"):
        path = tmp_path / name
        shutil.copyfile(sound, path)
        return path
    return make


RULES = load_rules()


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A data set `vprom generate` made with the split rules (its seed in the manifest)."""
    from vprom.generation.generate import generate
    from tests.dataset_fixture import write_pools

    folder = tmp_path_factory.mktemp("generated")
    generate(write_pools(folder / "pools.h5"), folder / "dataset.h5", RULES, scale=0.004,
             seed=3)
    return folder / "dataset.h5"


def run(path, **kw):
    report = verify(path, RULES, **kw)
    return report, {c.name: c for c in report.checks}


def replace(h5, name, data):
    dtype = h5[name].dtype
    del h5[name]
    h5.create_dataset(name, data=data, dtype=dtype)


def test_sound_dataset_passes_every_check(generated):
    report, checks = run(generated)
    assert report.ok, report.format()
    assert set(checks) >= {"integrity", "solver", "splits", "leakage", "bias:position",
                           "bias:mode", "bias:odd-one-out", "bias:probe-labels"}
    assert report.format().splitlines()[-1] == "verdict: PASS"
    assert report.failures() == ""


def test_content_hash_ignores_layout_but_not_data(sound, copy, tmp_path):
    path = copy()
    # same data rewritten with chunking and compression: same hash
    relaid = tmp_path / "relaid.h5"
    with h5py.File(sound) as src, h5py.File(relaid, "w") as dst:
        def clone(name, obj):
            if isinstance(obj, h5py.Dataset):
                dst.create_dataset(name, data=obj[()], dtype=obj.dtype,
                                   compression="gzip" if obj.ndim and obj.size else None)
        src.visititems(clone)
    assert content_hash(relaid) == content_hash(sound)
    with h5py.File(path, "a") as h5:
        h5["crops/x"][0] += 1
    assert content_hash(path) != content_hash(sound)


# ---------------------------------------------------------------- integrity failure modes
def _answer_elements_swapped(h5):
    el = h5["matrices/elements"].asstr()[()]
    el[0, 0] = "purple-ish"
    replace(h5, "matrices/elements", el.astype(object))


def _unknown_crop(h5):
    panels = h5["matrices/panels"][()]
    panels[1, 5] = 999_999
    replace(h5, "matrices/panels", panels)


def _duplicate_matrix_id(h5):
    ids = h5["matrices/id"][()]
    ids[2] = ids[3]
    replace(h5, "matrices/id", ids)


def _duplicate_crop_id(h5):
    ids = h5["crops/crop_id"][()]
    ids[-1] = ids[-2]
    replace(h5, "crops/crop_id", ids)


def _answer_out_of_range(h5):
    a = h5["matrices/answer"][()]
    a[0] = 9
    replace(h5, "matrices/answer", a)


def _progression_on_objects(h5):
    rel = h5["matrices/relation"].asstr()[()].astype(object)
    types = h5["matrices/element_type"].asstr()[()]
    rel[np.flatnonzero(types == "object")[0]] = "progression"
    replace(h5, "matrices/relation", rel)


def _crop_twice(h5):
    panels = h5["matrices/panels"][()]
    el = h5["matrices/elements"].asstr()[()].astype(object)
    panels[0, 1], el[0, 1] = panels[0, 0], el[0, 0]
    replace(h5, "matrices/panels", panels)
    replace(h5, "matrices/elements", el)


def _wrong_element_type(h5):
    t = h5["crops/element_type"].asstr()[()].astype(object)
    t[0] = "object" if t[0] != "object" else "count"
    replace(h5, "crops/element_type", t)


def _count_drift(h5):
    manifest = json.loads(h5.attrs["manifest"])
    manifest["counts"]["matrices"] += 1
    h5.attrs["manifest"] = json.dumps(manifest)


def _no_manifest(h5):
    del h5.attrs["manifest"]


def _wrong_super_attribute(h5):
    sa = h5["matrices/super_attribute"].asstr()[()].astype(object)
    types = h5["matrices/element_type"].asstr()[()]
    sa[np.flatnonzero(types == "object_attribute")[0]] = "texture"
    replace(h5, "matrices/super_attribute", sa)


@pytest.mark.parametrize("damage, message", [
    (_answer_elements_swapped, "element differs from its crop's element"),
    (_unknown_crop, "crop id is not in crops"),
    (_duplicate_matrix_id, "matrix id 3 appears 2 times"),
    (_duplicate_crop_id, "appears 2 times in crops"),
    (_answer_out_of_range, "answer not in 0..7"),
    (_progression_on_objects, "relation not valid for the element type"),
    (_crop_twice, "the same crop is shown twice"),
    (_wrong_element_type, "crop is of another element type"),
    (_count_drift, "manifest counts"),
    (_no_manifest, "no 'manifest' attribute"),
    (_wrong_super_attribute, "crop of another super-attribute"),
])
def test_each_integrity_failure_is_detected(copy, damage, message):
    path = copy()
    with h5py.File(path, "a") as h5:
        damage(h5)
    report, checks = run(path)
    assert checks["integrity"].status == "fail"
    assert any(message in p for p in checks["integrity"].problems), checks["integrity"].problems
    assert not report.ok and "integrity" in report.failures()
    # two workers: the same report
    assert run(path, workers=2)[0].format() == report.format()


def test_data_changed_after_generation_breaks_the_content_hash(copy):
    path = copy()
    with h5py.File(path, "a") as h5:
        h5["crops/w"][3] += 5  # consistent with every other check, but not with the manifest
    _, checks = run(path)
    assert any("content_hash differs" in p for p in checks["integrity"].problems)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("damage", ["no matrices", "short column", "panels shape"])
def test_broken_structure_fails_integrity_and_skips_the_rest(copy, damage, workers):
    path = copy()
    with h5py.File(path, "a") as h5:
        if damage == "no matrices":
            del h5["matrices"]
        elif damage == "short column":
            replace(h5, "matrices/answer", h5["matrices/answer"][:-1])
        else:
            replace(h5, "matrices/panels", h5["matrices/panels"][:, :15])
    report, checks = run(path, workers=workers)
    assert checks["integrity"].status == "fail"
    assert all(c.status == "skip" for n, c in checks.items() if n != "integrity")
    assert not report.ok


# ---------------------------------------------------------------- solver
def test_solver_failures_are_counted_with_their_reason(copy):
    path = copy()
    with h5py.File(path, "a") as h5:
        labels = h5["crops/labels"].asstr()[()].astype(object)
        for i in (0, 5):  # a distractor's crop also carries the answer's label
            answer = int(h5["matrices/answer"][i])
            wrong = crop_rows(h5["crops/crop_id"][()], h5["matrices/panels"][i])[
                8 + (answer + 1) % 8]
            labels[wrong] += "|" + h5["matrices/elements"].asstr()[i, 8 + answer]
        replace(h5, "crops/labels", labels)
    _, checks = run(path)
    assert checks["solver"].status == "fail" and checks["solver"].figures["failed"] == 2
    assert checks["solver"].problems[0].startswith(
        "matrix 0: not exactly one answer (candidates ["), checks["solver"].problems


def test_the_solver_names_each_unsound_matrix_as_the_string_level_check_does(copy):
    """`checks.solve` (all matrices of a type at once) finds the failures, reasons and
    implied-only count that `solver.check_matrix` finds on each matrix's label strings, on a
    file damaged four ways: a distractor carries the answer's label (matrix 0), a context
    crop lost its element's label (matrix 1), a panel claims an element its crop does not
    show (matrix 2), a context crop's element is a label of another super-attribute (an
    attribute matrix k: its elements break the relation)."""
    from vprom.generation.solver import check_matrix

    path = copy()
    with h5py.File(path, "a") as h5:
        elements = h5["matrices/elements"].asstr()[()].astype(object)
        answer = int(h5["matrices/answer"][0])
        crop_ids, panels = h5["crops/crop_id"][()], h5["matrices/panels"][()]
        labels = h5["crops/labels"].asstr()[()].astype(object)
        labels[crop_rows(crop_ids, panels[0])[8 + (answer + 1) % 8]] += \
            "|" + elements[0, 8 + answer]
        row = crop_rows(crop_ids, panels[1])[0]
        labels[row] = "|".join(x for x in labels[row].split("|") if x != elements[1, 0])
        elements[2, 3] = elements[2, 0] + "x"

        def strings(name):
            return h5[name].asstr()[()].astype(object)

        etype, sa = strings("matrices/element_type"), strings("matrices/super_attribute")
        k = next(i for i in range(3, len(etype)) if sa[i])
        crop_element, crop_type = strings("crops/element"), strings("crops/element_type")
        other = next(e for e, t, s in zip(crop_element, crop_type,
                                          strings("crops/super_attribute"))
                     if t == etype[k] and s != sa[k])
        row = crop_rows(crop_ids, panels[k])[0]
        labels[row] += "|" + other
        crop_element[row] = elements[k, 0] = other
        for name, column in (("crops/labels", labels), ("matrices/elements", elements),
                             ("crops/element", crop_element)):
            replace(h5, name, column)
    data, _ = loaded.load(path)
    m, parts = data.matrices, data.matrices.parts_of()
    universe, groups = checks.universes(data), checks.reading_groups(data)
    failed, reasons, implied_only = [], [], 0
    for i, matrix in enumerate(m.row(i, parts) for i in range(len(m))):
        etype, crops = matrix.element_type.value, data.rows[i].tolist()
        reason = check_matrix(matrix, [data.labels[r] for r in crops], universe[etype],
                              groups.get(etype))
        if reason is not None:
            failed.append(matrix.id)
            reasons.append(reason)
            implied_only += check_matrix(matrix, [data.explicit_labels[r] for r in crops],
                                         universe[etype], groups.get(etype)) is None
    assert checks.solve(checks.SolverTables(data), data, 0, len(m)) == (failed, reasons,
                                                                         implied_only)
    assert {0, 1, 2, k} <= set(failed)
    assert "do not obey" in reasons[failed.index(k)]


# ---------------------------------------------------------------- splits and leakage
def test_split_parts_must_follow_the_rule(generated, tmp_path):
    path = tmp_path / "swapped.h5"
    shutil.copyfile(generated, path)
    with h5py.File(path, "a") as h5:  # the neutral split's train and test parts swapped
        train, test = h5["splits/neutral/train"][()], h5["splits/neutral/test"][()]
        replace(h5, "splits/neutral/train", test)
        replace(h5, "splits/neutral/test", train)
    _, checks = run(path)
    assert checks["splits"].status == "fail"
    assert checks["splits"].figures["off_rule"] == len(train) + len(test)


def test_val_counts_as_the_train_side(generated):
    # val ids are drawn from the train side: the rule only says train
    _, checks = run(generated)
    assert checks["splits"].ok
    assert all(parts["val"] for parts in checks["splits"].figures["sizes"].values())


def test_matrix_in_two_parts_and_unknown_ids(copy):
    path = copy()
    with h5py.File(path, "a") as h5:
        test = h5["splits/neutral/test"][()]
        replace(h5, "splits/neutral/train", np.append(h5["splits/neutral/train"][()], test[0]))
        replace(h5, "splits/neutral/val", np.append(h5["splits/neutral/val"][()], 10_000))
        del h5["splits/extrapolation"]
    _, checks = run(path)
    problems = " ".join(checks["splits"].problems)
    assert "is in train and test" in problems
    assert "unknown matrix id" in problems
    assert "split 'extrapolation' is missing" in problems


def test_paper_rule_is_checked_independently_of_the_spec(copy):
    path = copy()
    with h5py.File(path, "a") as h5:
        # an even count answer on the train side of interpolation
        t = h5["matrices/element_type"].asstr()[()]
        el = h5["matrices/elements"].asstr()[()]
        a = h5["matrices/answer"][()]
        ids = h5["matrices/id"][()]
        even = [int(ids[i]) for i in range(len(ids))
                if t[i] == "count" and int(el[i, 8 + a[i]]) % 2 == 0]
        test = h5["splits/interpolation/test"][()]
        replace(h5, "splits/interpolation/test", test[test != even[0]])
        replace(h5, "splits/interpolation/train",
                np.append(h5["splits/interpolation/train"][()], even[0]))
    _, checks = run(path)
    assert any("interpolation" in p and "paper's rule" in p for p in checks["splits"].problems)


def test_a_region_on_both_sides_is_leakage(copy):
    path = copy()
    with h5py.File(path, "a") as h5:
        train_id = int(h5["splits/neutral/train"][0])
        test_id = int(h5["splits/neutral/test"][0])
        ids = h5["matrices/id"][()]
        crop_ids = h5["crops/crop_id"][()]
        train_crop = crop_rows(crop_ids, h5["matrices/panels"][int(np.flatnonzero(
            ids == train_id)[0])])[0]
        test_crop = crop_rows(crop_ids, h5["matrices/panels"][int(np.flatnonzero(
            ids == test_id)[0])])[0]
        for column in ("image_id", "x", "y", "w", "h"):
            values = h5[f"crops/{column}"][()]
            values[test_crop] = values[train_crop]
            replace(h5, f"crops/{column}", values)
    _, checks = run(path)
    assert checks["leakage"].status == "fail"
    assert checks["leakage"].figures["neutral"]["regions"] == 1
    assert checks["leakage"].problems[0].startswith("neutral: 1 image regions")


def test_a_shared_source_object_is_leakage(copy):
    path = copy()
    with h5py.File(path, "a") as h5:
        train_id = int(h5["splits/neutral/train"][0])
        test_id = int(h5["splits/neutral/test"][0])
        panels = h5["matrices/panels"][()]
        ids = h5["matrices/id"][()]
        crop_ids = h5["crops/crop_id"][()]
        a = crop_rows(crop_ids, panels[ids == train_id][0])[0]
        b = crop_rows(crop_ids, panels[ids == test_id][0])[0]
        source = h5["crops/source_id"][()]
        source[b] = source[a]
        replace(h5, "crops/source_id", source)
    _, checks = run(path)
    assert checks["leakage"].figures["neutral"]["sources"] == 1


# ---------------------------------------------------------------- command line
def test_cli_exits_1_with_one_line(copy, capsys):
    path = copy()
    with h5py.File(path, "a") as h5:
        del h5["matrices"]
    assert cli.main(["verify", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "FAIL integrity" in out
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("vprom verify: error:") and "integrity" in err


def test_cli_on_a_missing_file(tmp_path, capsys):
    assert cli.main(["verify", str(tmp_path / "nope.h5")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_an_empty_dataset_fails(tmp_path):
    report, checks = run(write_dataset(tmp_path / "empty.h5", [], []))
    assert "holds no matrices" in checks["integrity"].problems[0]
    assert not report.ok and checks["solver"].status == "skip"


def test_a_generated_dataset_passes_with_the_real_rules(tmp_path, capsys):
    """End to end with `vprom generate`, `vprom.generation.solver` and the split rules (manifest seed)."""
    from vprom.generation.generate import generate
    from tests.dataset_fixture import write_pools

    dataset = tmp_path / "dataset.h5"
    generate(write_pools(tmp_path / "pools.h5"), dataset, RULES, scale=0.004, seed=3)
    assert cli.main(["verify", str(dataset)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "verdict: PASS", out
    # the same file with one split part moved is caught by re-running the rules
    with h5py.File(dataset, "a") as h5:
        test = h5["splits/held_out_objects/test"][()]
        replace(h5, "splits/held_out_objects/test", test[1:])
        replace(h5, "splits/held_out_objects/train",
                np.append(h5["splits/held_out_objects/train"][()], test[0]))
    _, checks = run(dataset)
    assert checks["splits"].status == "fail"
    assert any("held_out_objects: stored train, the rule says test" in p
               for p in checks["splits"].problems)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_file_without_its_seed_cannot_have_its_split_rules_re_run(tmp_path, workers):
    """The split rules need the seed the manifest records: without it the splits check says
    so (the reason crosses from a worker to the report) and the other checks still run."""
    from vprom.generation.generate import generate
    from tests.dataset_fixture import write_pools

    dataset = tmp_path / "dataset.h5"
    generate(write_pools(tmp_path / "pools.h5"), dataset, RULES, scale=0.004, seed=3)
    with h5py.File(dataset, "a") as h5:
        manifest = json.loads(h5.attrs["manifest"])
        del manifest["seed"]
        h5.attrs["manifest"] = json.dumps(manifest)
    _, checks = run(dataset, workers=workers)
    assert checks["splits"].status == "fail"
    assert "the manifest records no seed" in checks["splits"].summary, checks["splits"].summary
    assert checks["solver"].status == "pass" and checks["leakage"].status == "pass"


def test_a_training_matrix_that_shows_a_held_out_label_is_caught(tmp_path):
    """The splits check re-runs the rules' label bans too: a training matrix of a held-out
    split one of whose panels is given a label that split holds out is caught."""
    from vprom.generation.generate import generate
    from vprom.generation.verify.loaded import load
    from vprom.generation.verify.split_checks import concept_table
    from tests.dataset_fixture import write_pools

    dataset = tmp_path / "dataset.h5"
    generate(write_pools(tmp_path / "pools.h5"), dataset, RULES, scale=0.004, seed=3)
    data, _ = load(dataset)
    table, m, etype = concept_table(data), data.matrices, data.crops.element_type
    row_of = {int(mid): i for i, mid in enumerate(m.id)}
    found = None
    for split, ban in RULES.design.train_bans.items():
        for mid in m.splits[split]["train"].tolist():
            i = row_of[int(mid)]
            relation, panel = str(m.relation[i]), int(data.rows[i][0])
            # labels are read by the crop's type
            showing = np.flatnonzero(table.banned(ban, relation) & (etype == etype[panel]))
            if len(showing):
                found = split, panel, int(showing[0])
                break
        if found:
            break
    assert found, "no crop of the generated set shows a held-out label"
    split, panel, held = found
    labels = data.crops.labels.astype(str)
    labels[panel] = f"{labels[panel]}|{labels[held]}"
    with h5py.File(dataset, "a") as h5:
        replace(h5, "crops/labels", labels.astype(object))
    _, checks = run(dataset)
    assert checks["splits"].status == "fail"
    assert any(f"{split}: stored train, the rule says excluded" in p
               for p in checks["splits"].problems), checks["splits"].problems
