"""Matrix generation: soundness, Table 1 mix, balance, splits, determinism, shards, errors."""

from __future__ import annotations

from collections import Counter

import h5py
import numpy as np
import pytest

from vprom.generation.generate import generate, generate_dataset, merge_shards
from vprom.generation.plan import HoldOut, make_plan
from vprom.generation.pool_index import CELL_NAMES, PoolIndex, cell_of
from tests.generation.direct import generate_matrices
from vprom.splits import load_rules
from tests.generation.conftest import SMALL_SCALE, tiny_crops
from vprom.errors import VpromError
from vprom.domain import SPLITS, TABLE1, ElementType
from vprom.splits.rules import object_third
from vprom.generation.solver import check_matrix
from vprom.tables import read_crop_table, read_manifest, read_matrix_table

RULES = load_rules()


def _rows(data):
    parts = data.matrices.parts_of()
    return [data.matrices.row(i, parts) for i in range(len(data.matrices))]


def _crop_index(data):
    return {int(c): i for i, c in enumerate(data.crops.crop_id)}


def test_label_sets_join_the_explicit_labels_and_those_a_human_name_implies():
    from vprom.generation.labels import LabelVocabulary
    from vprom.tables import CropTable

    kinds = ["human_attribute", "human_attribute", "object", "human_attribute", "object",
             "object"]
    texts = ["man|young", "man|young", "man|young", "", "a||b", "b|a"]
    n = len(texts)
    crops = CropTable(crop_id=range(n), image_id=[1] * n, x=[0] * n, y=[0] * n, w=[1] * n,
                      h=[1] * n, element_type=kinds, element=["e"] * n,
                      super_attribute=[""] * n, source_id=range(n), phrase=[""] * n,
                      labels=texts)
    vocab = LabelVocabulary(frozenset(), {}, {"man": ("male", "young")})
    explicit, every = crops.label_sets(), vocab.label_sets(crops)
    assert explicit == [{"man", "young"}] * 3 + [set(), {"a", "b"}, {"a", "b"}]
    assert every == [{"man", "young", "male"}] * 2 + [{"man", "young"}, set(), {"a", "b"},
                                                      {"a", "b"}]  # only humans imply
    assert [vocab.implied_of(k, e) for k, e in zip(kinds, explicit)] == [
        {"male"}, {"male"}, set(), set(), set(), set()]
    assert all(type(s) is frozenset for s in explicit + every)


def test_every_matrix_is_proven_by_the_solver(small_dataset):
    # with every label a panel has, explicit and implied, read in one super-attribute at a time
    data = small_dataset
    index, labels = _crop_index(data), data.vocabulary.label_sets(data.crops)
    assert any(labels[k] != s for k, s in enumerate(data.crops.label_sets()))  # some implied
    for m in _rows(data):
        universe = frozenset(data.universes[m.element_type.value])
        groups = data.super_attributes.get(m.element_type.value)
        reason = check_matrix(m, [labels[index[p]] for p in m.panels], universe, groups)
        assert reason is None, (m.id, reason)


def test_panels_show_their_elements_and_never_repeat_a_region(small_dataset):
    data = small_dataset
    index = _crop_index(data)
    c = data.crops
    for m in _rows(data):
        rows = [index[p] for p in m.panels]
        assert [c.element[r] for r in rows] == list(m.elements)
        assert all(c.element_type[r] == m.element_type.value for r in rows)
        regions = {(int(c.image_id[r]), int(c.x[r]), int(c.y[r]), int(c.w[r]), int(c.h[r]))
                   for r in rows}
        assert len(regions) == 16
        assert len(set(m.elements[8:])) == 8  # 8 different elements among the candidates


def test_the_mix_follows_table1_scaled(small_dataset):
    counts = Counter(small_dataset.matrices.element_type)
    for etype, n in TABLE1.items():
        assert counts[etype.value] == round(n * SMALL_SCALE)
    assert list(small_dataset.matrices.id) == list(range(len(small_dataset.matrices)))
    relations = Counter(zip(small_dataset.matrices.element_type, small_dataset.matrices.relation))
    assert relations[("count", "progression")] > 0
    assert not any(r == "progression" for t, r in relations if t != "count")


def test_attribute_distractors_come_in_a_block_of_the_super_attribute(small_dataset):
    data = small_dataset
    index = _crop_index(data)
    blocks = Counter()
    for m in _rows(data):
        if m.element_type.value != "object_attribute" or m.super_attribute != "color":
            continue
        counts = Counter(data.crops.super_attribute[index[p]] for p in m.candidates)
        # color has 5 attributes: a block of 4 of them, or of 2 where the mixing plan steps
        # the matrix down to show a smaller super-attribute beside 2 others; never fewer
        # than another super-attribute shows
        assert counts["color"] in (2, 4) and counts["color"] == max(counts.values()), counts
        blocks[counts["color"]] += 1
    assert blocks[4] and blocks[2]


def test_small_super_attributes_get_a_symmetric_candidate_profile(small_dataset):
    # every object super-attribute of the tiny pool has fewer than 8 attributes, so each
    # object-attribute matrix needs distractors from other super-attributes: they come in
    # equal blocks, so "the candidates' commonest super-attribute" never singles out the
    # answer's (human matrices are drawn candidates first: see test_soundness.py's
    # test_human_candidates_are_exchangeable)
    data = small_dataset
    index = _crop_index(data)
    symmetric = uneven = 0
    for m in _rows(data):
        if m.element_type.value != "object_attribute":
            continue
        sas = [data.crops.super_attribute[index[p]] for p in m.candidates]
        counts = Counter(sas)
        mine = counts[sas[m.answer]]
        assert sas[m.answer] == m.super_attribute
        assert len(counts) > 1
        # never the unique majority, whatever the profile
        assert sum(1 for n in counts.values() if n >= mine) >= 2, (m.id, counts)
        if len(set(counts.values())) == 1:
            assert mine in (4, 2, 1)
            symmetric += 1
        else:
            # only or on a 2-attribute super-attribute (its other attribute completes the
            # row too, so the answer is its one candidate and 7 singletons are not there)
            assert m.relation.value == "or" and mine == 1, (m.id, m.relation, counts)
            uneven += 1
    assert symmetric > 10 * max(uneven, 1)


def test_answer_position_is_uniform_on_a_few_thousand(crops):
    design = RULES.design
    plan = make_plan(0.01, 11, design)
    pool = PoolIndex(crops, 11, design)
    matrices = generate_matrices(pool, plan, range(0, len(plan), 2))
    counts = np.bincount([m.answer for m in matrices], minlength=8)
    assert len(matrices) > 1000
    assert counts.min() > 0.8 * len(matrices) / 8 and counts.max() < 1.2 * len(matrices) / 8
    # the planned positions over all indices are exactly balanced
    full = np.bincount(plan.answer, minlength=8)
    assert full.max() - full.min() <= 1


def test_groups_say_which_elements_in_typed_fields():
    plan = make_plan(0.01, 3, RULES.design)
    by_name = {(g.element_type, g.relation.value, g.name): g for g in plan.groups}
    odd = by_name[(ElementType.COUNT, "and", "c:1,3,5,7,9")]
    assert odd.counts == (1, 3, 5, 7, 9) and odd.held_side == 0
    assert by_name[(ElementType.COUNT, "and", "any")].counts == ()
    assert by_name[(ElementType.COUNT, "or", "c:6,7,8,9,10")].held_side == 1
    thirds = {g.third for g in plan.groups if g.element_type is ElementType.OBJECT}
    assert thirds == {0, 1, 2}
    held = by_name[(ElementType.OBJECT_ATTRIBUTE, "and", "held_sa")]
    assert held.hold_out is HoldOut.SUPER_ATTRIBUTE and held.held_side == 1
    every = ["action", "color", "material", "shape", "texture"]
    asked, shown = held.super_attributes(RULES.design, every)
    assert set(asked) == {"action", "shape", "texture"} and shown == every
    train = by_name[(ElementType.OBJECT_ATTRIBUTE, "and", "train")]
    asked, shown = train.super_attributes(RULES.design, every)
    assert not set(asked) & {"action", "shape", "texture"}
    assert not set(shown) & {"action", "shape", "texture"} and set(asked) <= set(shown)


def test_a_matrix_takes_its_crops_from_its_groups_held_out_side_and_its_neutral_side():
    plan = make_plan(0.01, 3, RULES.design)
    cells = plan.cells()
    for i in range(0, len(plan), 97):
        group = plan.groups[plan.group_of[i]]
        assert cells[i] == cell_of(int(plan.neutral_side[i]), group.held_side)
        assert CELL_NAMES[cells[i]].split("/")[1].endswith("test" if group.held_side else
                                                           "train")


def test_every_split_has_train_val_and_test(small_dataset):
    sizes = small_dataset.counts["splits"]
    for split in SPLITS:
        assert sizes[split]["train"] > 0 and sizes[split]["test"] > 0, split
        assert sizes[split]["val"] == round(8000 * SMALL_SCALE)
        parts = small_dataset.matrices.splits[split]
        ids = [set(parts[p].tolist()) for p in ("train", "val", "test")]
        assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    neutral = sizes["neutral"]
    total = neutral["train"] + neutral["val"] + neutral["test"]
    assert total == len(small_dataset.matrices)
    assert abs(neutral["test"] / total - 1 / 3) < 0.02


def test_no_image_on_both_sides_of_any_split(small_dataset):
    data = small_dataset
    image_of = dict(zip(data.crops.crop_id.tolist(), data.crops.image_id.tolist()))
    panels = {int(i): row for i, row in zip(data.matrices.id, data.matrices.panels)}
    for split in SPLITS:
        parts = data.matrices.splits[split]

        def images(ids):
            return {image_of[int(p)] for i in ids for p in panels[int(i)]}

        train = images(np.concatenate([parts["train"], parts["val"]]))
        assert not train & images(parts["test"]), split


def test_no_test_only_element_reaches_training(small_dataset):
    data = small_dataset
    sa_of = dict(zip(data.crops.crop_id.tolist(), data.crops.super_attribute.tolist()))
    specs = RULES.specs
    for m in _rows(data):
        shown = m.elements[:8] + (m.elements[8 + m.answer],)
        part = dict(m.splits)
        if m.element_type is ElementType.COUNT:
            values = {int(e) for e in shown}
            assert part["interpolation"] != "train" or all(v % 2 for v in values)
            assert part["interpolation"] != "test" or not any(v % 2 for v in values)
            assert part["extrapolation"] != "train" or max(values) <= 5
            assert part["extrapolation"] != "test" or min(values) >= 6
        if m.element_type is ElementType.OBJECT:
            thirds = {object_third(e) for e in m.elements}
            assert part["held_out_objects"] not in ("train", "val") or 0 not in thirds
            assert part["held_out_objects"] != "test" or thirds == {0}
        if m.element_type.value in ("object_attribute", "human_attribute"):
            held = specs["held_out_attributes"].rule["test"][m.element_type.value]
            if part["held_out_attributes"] in ("train", "val"):
                assert not {sa_of[p] for p in m.panels} & set(held)
            pairs = specs["held_out_relation_attribute_pairs"].rule["test"][m.element_type.value]
            in_pair = pairs.get(m.relation.value) == m.super_attribute
            assert part["held_out_relation_attribute_pairs"] != "train" or not in_pair


def _content(path):
    with h5py.File(path, "r") as h5:
        out = {}
        h5.visititems(lambda name, obj: out.__setitem__(name, obj[()].tolist())
                      if isinstance(obj, h5py.Dataset) else None)
        return out


def test_same_seed_same_content_and_files_are_complete(tmp_path, pools_file):
    a = generate(pools_file, tmp_path / "a.h5", RULES, scale=SMALL_SCALE, seed=4)
    b = generate(pools_file, tmp_path / "b.h5", RULES, scale=SMALL_SCALE, seed=4)
    assert _content(tmp_path / "a.h5") == _content(tmp_path / "b.h5")
    assert "matrices" in str(a) and a.counts == b.counts
    c = generate(pools_file, tmp_path / "c.h5", RULES, scale=SMALL_SCALE, seed=5)
    assert _content(tmp_path / "c.h5")["matrices/panels"] != _content(tmp_path / "a.h5")[
        "matrices/panels"]
    manifest = read_manifest(tmp_path / "a.h5")
    assert manifest["kind"] == "dataset" and manifest["config"]["seed"] == 4
    assert manifest["inputs"] == {"pools.h5": manifest["inputs"]["pools.h5"]}
    assert manifest["outputs"]["content_hash"].startswith("sha256:")
    with h5py.File(tmp_path / "a.h5", "r") as h5:
        assert "plant condition" in h5["vocab/super_attributes/object_attribute"]
        assert h5["vocab/count"].asstr()[()].tolist() == [str(v) for v in range(1, 11)]
    assert len(read_matrix_table(tmp_path / "a.h5")) == c.counts["matrices"]
    used = set(read_crop_table(tmp_path / "a.h5").crop_id.tolist())
    assert used == set(np.unique(read_matrix_table(tmp_path / "a.h5").panels).tolist())
    assert not list(tmp_path.glob(".*part"))


def test_two_shards_merge_into_the_single_run(tmp_path, pools_file):
    generate(pools_file, tmp_path / "all.h5", RULES, scale=SMALL_SCALE, seed=2)
    for k in range(2):
        generate(pools_file, tmp_path / f"s{k}.h5", RULES, scale=SMALL_SCALE, seed=2,
                 shard=(k, 2))
    single, shard1 = read_matrix_table(tmp_path / "all.h5"), read_matrix_table(tmp_path / "s1.h5")
    assert shard1.id.tolist() == list(range(1, len(single), 2))
    assert (shard1.panels == single.panels[1::2]).all()
    merge_shards([tmp_path / "s1.h5", tmp_path / "s0.h5"], tmp_path / "merged.h5", RULES)
    merged, whole = _content(tmp_path / "merged.h5"), _content(tmp_path / "all.h5")
    assert merged == whole
    with pytest.raises(VpromError, match=f"{tmp_path / 's1.h5'}: shard 1/2, but 1 file"):
        merge_shards([tmp_path / "s1.h5"], tmp_path / "bad.h5", RULES)


def test_mismatched_shards_are_refused_naming_the_file(tmp_path, pools_file):
    for k, seed in ((0, 2), (1, 2), (1, 3)):
        generate(pools_file, tmp_path / f"s{k}-{seed}.h5", RULES, scale=SMALL_SCALE, seed=seed,
                 shard=(k, 2))
    s0, s1, other = (tmp_path / f"s{k}-{seed}.h5" for k, seed in ((0, 2), (1, 2), (1, 3)))
    with pytest.raises(VpromError, match=f"^{other}: a shard of another run than {s0}"):
        merge_shards([s0, other], tmp_path / "bad.h5", RULES)
    with pytest.raises(VpromError, match=f"^{s0}: shard 0/2 like {s0}"):
        merge_shards([s0, s0], tmp_path / "bad.h5", RULES)
    with pytest.raises(VpromError, match=f"^{s1}: shard 1/2, but 3 file"):
        merge_shards([s1, s0, s1], tmp_path / "bad.h5", RULES)
    assert not (tmp_path / "bad.h5").exists()


def test_a_short_pool_is_named(tmp_path):
    crops = tiny_crops(drop=("2", "4"))  # 8 counts left: an Or matrix needs 9 (7 + 2 answers)
    with pytest.raises(VpromError, match=r"count pool.*count or matrices.*9 distinct elements"
                                         r".*needed.*short by 1"):
        generate_dataset(crops, RULES, scale=SMALL_SCALE, seed=0)
    thin = tiny_crops(drop=("round", "square", "oval", "striped", "spotted", "smooth", "furry",
                            "parked", "flying", "hanging", "floating"))
    with pytest.raises(VpromError, match=r"object_attribute pool.*held_sa"):
        generate_dataset(thin, RULES, scale=SMALL_SCALE, seed=0)


def test_generate_refuses_a_missing_file_and_a_bad_scale(tmp_path, pools_file):
    with pytest.raises(VpromError, match="no such file"):
        generate(tmp_path / "nope.h5", tmp_path / "out.h5", RULES)
    with pytest.raises(VpromError, match="scale"):
        generate(pools_file, tmp_path / "out.h5", RULES, scale=0)
    assert not (tmp_path / "out.h5").exists()


def test_generate_refuses_anything_but_a_pools_file(tmp_path, pools_file):
    dataset = tmp_path / "d.h5"
    generate(pools_file, dataset, RULES, scale=SMALL_SCALE, seed=1)
    with pytest.raises(VpromError, match=r"d.h5: this is a DATASET.h5.*takes a POOLS.h5 "
                                         r"\(the pools of `vprom mine`\)"):
        generate(dataset, tmp_path / "again.h5", RULES, scale=SMALL_SCALE)
    bare = tmp_path / "bare.h5"
    with h5py.File(bare, "w") as h5:
        tiny_crops(crops_per_element=4).write(h5.create_group("crops"))
    with pytest.raises(VpromError, match="bare.h5: no manifest"):
        generate(bare, tmp_path / "again.h5", RULES, scale=SMALL_SCALE)
    assert not (tmp_path / "again.h5").exists()


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path, pools_file, monkeypatch):
    import os

    from vprom.generation.verify.checks import manifest_problems
    from vprom.generation.verify.loaded import load

    out = tmp_path / "d.h5"
    generate(pools_file, out, RULES, scale=SMALL_SCALE, seed=1)
    old = out.read_bytes()
    real = os.replace

    def killed(src, dst):
        if str(dst) == str(out):
            raise KeyboardInterrupt  # the kill just before the data file is renamed
        real(src, dst)

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        generate(pools_file, out, RULES, scale=SMALL_SCALE, seed=2)
    monkeypatch.undo()
    assert out.read_bytes() == old  # nothing a user had is lost
    assert manifest_problems(load(out)[0]) == []
    generate(pools_file, out, RULES, scale=SMALL_SCALE, seed=2)
    assert manifest_problems(load(out)[0]) == []
    assert not list(tmp_path.glob(".*part"))


def test_a_pool_too_thin_at_any_scale_advises_more_images(tmp_path):
    """300 synthetic images lack the held-out super-attributes' elements: fewer matrices do
    not help, so the advice is more images (1,000 images build: tests/generation/
    synthetic_build.py)."""
    from vprom.mining.pools import mine
    from vprom.mining.synth import write_corpus

    write_corpus(tmp_path / "vg", images=300, seed=0, workers=1)
    mine(tmp_path / "vg", tmp_path / "pools.h5", workers=1)
    for scale in (0.003, 0.001):
        with pytest.raises(VpromError) as refused:
            generate(tmp_path / "pools.h5", tmp_path / "d.h5", RULES, scale=scale, seed=0)
        assert "lower --scale" not in str(refused.value)
        assert str(refused.value).endswith("mine more images (the synthetic corpus: a larger "
                                           "--images)")
