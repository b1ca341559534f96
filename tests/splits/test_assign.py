"""Split specs and the pure assignment: each rule, validation, and leakage properties."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vprom.splits.specs import SPEC_DIR, load_rules, load_split_specs
from vprom.errors import VpromError
from vprom.domain import RELATIONS_OF, SPLITS, ElementType, Matrix
from vprom.splits.rules import (
    ALL_RELATIONS,
    ConceptTable,
    TrainBan,
    assign,
    ban_bit,
    choose_val,
    held_out_design,
    image_sides,
    object_third,
    val_size,
)
from tests.dataset_fixture import matrix_table

RULES = load_rules()
SPECS = load_split_specs()
OBJECTS = [f"obj{k}" for k in range(30)]
THIRD = {k: [o for o in OBJECTS if object_third(o) == k] for k in range(3)}
ATTRIBUTES = {
    "object_attribute": {"color": ["red", "blue", "green"], "shape": ["round", "square"],
                         "texture": ["striped", "furry"], "material": ["wooden", "metal"],
                         "scene": ["sunny", "snowy"]},
    "human_attribute": {"age": ["young", "old"], "action": ["standing", "sitting"],
                        "hair style": ["bald", "curly"], "gender": ["male", "female"]},
}


@dataclass
class Panels:
    """What `assign` reads of one matrix's 16 panels: per partition the side of each panel's
    image, each panel crop's super-attribute, and per panel its concepts (categories,
    attribute (table, super-attribute) pairs) among all its labels (None: each panel's own
    element stands for its labels)."""

    sides: dict
    super_attributes: tuple
    concepts: list | None = None


def info(side_neutral=0, side_held=0, sas=("",) * 16):
    return Panels({"neutral": (side_neutral,) * 16, "held_out": (side_held,) * 16}, tuple(sas))


def assign_one(m: Matrix, panels: Panels) -> dict[str, str]:
    """`assign` on one matrix, its panels' ban bits from their concepts."""
    concepts = panels.concepts or [
        (frozenset({e}) if m.element_type is ElementType.OBJECT else frozenset(),
         frozenset({(m.element_type.value, sa)}) if sa else frozenset())
        for e, sa in zip(m.elements, panels.super_attributes)]
    banned = np.bitwise_or.reduce(ConceptTable(concepts).bits(RULES.design.train_bans))
    sides = {p: np.array([s]) for p, s in panels.sides.items()}
    parts = assign(RULES, matrix_table([m]), sides, np.array([banned]))
    return {split: str(part[0]) for split, part in parts.items()}


def matrix(etype, relation, elements, sa="", answer=0):
    return Matrix(id=0, relation=relation, element_type=etype, super_attribute=sa,
                  panels=tuple(range(16)), elements=tuple(elements), answer=answer)


def test_specs_load_with_descriptions_in_split_order():
    assert list(SPECS) == list(SPLITS)
    for spec in SPECS.values():
        assert len(spec.description) > 40
    design = held_out_design(SPECS)
    assert design.held_super_attributes["object_attribute"] == ("action", "shape", "texture")
    assert design.object_test_thirds["union"] == (0,)
    assert sorted(design.object_test_thirds["and"]) == [0, 1]


def test_a_broken_spec_names_its_file(tmp_path):
    for f in SPEC_DIR.glob("*.json"):
        shutil.copy(f, tmp_path / f.name)
    data = json.loads((tmp_path / "interpolation.json").read_text())
    data["rule"]["test"] = [1, 2]  # overlaps train
    (tmp_path / "interpolation.json").write_text(json.dumps(data))
    with pytest.raises(VpromError, match="interpolation.json.*disjoint"):
        load_split_specs(tmp_path)
    (tmp_path / "interpolation.json").unlink()
    with pytest.raises(VpromError, match="interpolation"):
        load_split_specs(tmp_path)


def test_count_rules():
    odd = matrix("count", "and", ["1"] * 3 + ["3"] * 3 + ["5"] * 2 + ["5", "2", "4", "6", "8",
                                                                    "10", "7", "9"])
    assert assign_one(odd, info())["interpolation"] == "train"
    assert assign_one(odd, info())["extrapolation"] == "train"
    assert assign_one(odd, info(side_held=1))["interpolation"] == "excluded"
    even = matrix("count", "progression", ["6", "8", "10", "2", "4", "6", "4", "6"]
                  + ["8", "1", "2", "3", "5", "7", "9", "10"])
    parts = assign_one(even, info(side_held=1))
    assert parts["interpolation"] == "test" and parts["extrapolation"] == "excluded"
    assert parts["held_out_objects"] == "excluded"  # a count matrix trains there, not tests
    assert assign_one(even, info(side_held=0))["held_out_objects"] == "train"


def test_attribute_rules():
    sas = ["shape"] * 9 + ["color"] * 7
    shape = matrix("object_attribute", "and", ["round"] * 9 + ["red"] * 7, sa="shape")
    assert assign_one(shape, info(side_held=1, sas=sas))["held_out_attributes"] == "test"
    color = matrix("object_attribute", "or", ["red"] * 16, sa="color")
    # a training matrix may not show a held-out attribute, even as a distractor
    shown = info(sas=["color"] * 15 + ["texture"])
    assert assign_one(color, shown)["held_out_attributes"] == "excluded"
    assert assign_one(color, info(sas=["color"] * 16))["held_out_attributes"] == "train"
    union_color = matrix("object_attribute", "union", ["red"] * 16, sa="color")
    pairs = "held_out_relation_attribute_pairs"
    assert assign_one(union_color, info(side_held=1))[pairs] == "test"
    assert assign_one(color, info(side_held=0))[pairs] == "train"
    action_or = matrix("human_attribute", "or", ["sitting"] * 16, sa="action")
    assert assign_one(action_or, info(side_held=1))[pairs] == "test"
    age_or = matrix("human_attribute", "or", ["young"] * 16, sa="age")
    assert assign_one(age_or, info(side_held=0))[pairs] == "train"


def test_object_rules():
    held = matrix("object", "union", (THIRD[0] * 6)[:16])
    parts = assign_one(held, info(side_held=1))
    assert parts["held_out_objects"] == parts["held_out_relation_object_pairs"] == "test"
    mixed = matrix("object", "and", (THIRD[0] + THIRD[2])[:16])
    assert assign_one(mixed, info())["held_out_objects"] == "excluded"
    third2_and = matrix("object", "and", (THIRD[2] * 6)[:16])
    parts = assign_one(third2_and, info())
    assert parts["held_out_objects"] == parts["held_out_relation_object_pairs"] == "train"


def labelled(categories=(), label_sas=(), at=3, side_held=0):
    """`info` where panel `at` carries these categories and (table, super-attribute) labels
    besides its element."""
    concepts = [(frozenset(), frozenset())] * 16
    concepts[at] = (frozenset(categories), frozenset(label_sas))
    return Panels({"neutral": (0,) * 16, "held_out": (side_held,) * 16}, ("",) * 16, concepts)


def test_a_held_out_label_anywhere_keeps_a_matrix_out_of_training():
    color = matrix("object_attribute", "and", ["red"] * 16, sa="color")
    clean = assign_one(color, labelled())
    assert clean["held_out_attributes"] == clean["held_out_objects"] == "train"
    # a red crop that is also round (shape is held out): not as an element, yet excluded
    round_ = assign_one(color, labelled(label_sas={("object_attribute", "shape")}))
    assert round_["held_out_attributes"] == "excluded"
    assert round_["held_out_objects"] == "train"
    # a person whose name implies skiing: human action is held out
    skier = assign_one(color, labelled(label_sas={("human_attribute", "action")}))
    assert skier["held_out_attributes"] == "excluded"
    # a red crop naming an object of the held-out third: out of held_out_objects training
    named = assign_one(color, labelled(categories={THIRD[0][0]}))
    assert named["held_out_objects"] == "excluded"
    assert named["held_out_attributes"] == "train"


def test_relation_object_pairs_ban_their_third_in_their_relation_only():
    pairs = "held_out_relation_object_pairs"
    # and holds out third 1, or third 2; a count matrix whose noun is of third 1
    noun = labelled(categories={THIRD[1][0]})
    count_and = matrix("count", "and", ["3"] * 16)
    count_or = matrix("count", "or", ["3"] * 16)
    assert assign_one(count_and, noun)[pairs] == "excluded"
    assert assign_one(count_or, noun)[pairs] == "train"
    # held_out_objects bans third 0 in every relation, progression too
    third0 = labelled(categories={THIRD[0][0]})
    progression = matrix("count", "progression", [str(v) for v in (1, 2, 3) * 5 + (4,)])
    assert assign_one(progression, third0)["held_out_objects"] == "excluded"
    assert assign_one(progression, third0)[pairs] == "train"


def test_train_bans_state_what_each_held_out_split_keeps_out():
    bans = load_rules().design.train_bans
    assert set(bans) == {"held_out_attributes", "held_out_objects",
                         "held_out_relation_object_pairs"}
    assert bans["held_out_attributes"].super_attributes["human_attribute"] == ("action",)
    assert bans["held_out_objects"].object_thirds["progression"] == (0,)
    assert bans["held_out_relation_object_pairs"].object_thirds == {"and": (1,), "or": (2,),
                                                                    "union": (0,)}
    union = load_rules().design.train_side_ban("union")
    assert union.object_thirds == {"union": (0,)}
    table = ConceptTable([(frozenset({THIRD[0][0]}), frozenset()),
                          (frozenset({THIRD[1][0]}), frozenset())])
    assert table.banned(union, "union").tolist() == [True, False]


def test_neutral_follows_the_images_and_mixed_sides_are_excluded():
    m = matrix("object", "and", (THIRD[2] * 6)[:16])
    assert assign_one(m, info(side_neutral=1))["neutral"] == "test"
    mixed = Panels({"neutral": (0,) * 15 + (1,), "held_out": (0,) * 16}, ("",) * 16)
    assert assign_one(m, mixed)["neutral"] == "excluded"


def test_image_sides_hash_images_deterministically():
    rules = load_rules()
    a = image_sides(rules, 1, np.arange(16).reshape(2, 8))
    assert set(a) == {"neutral", "held_out"} and a["neutral"].shape == (2, 8)
    b = image_sides(rules, 1, np.arange(16).reshape(2, 8))
    assert all(np.array_equal(a[p], b[p]) for p in a)
    many = image_sides(rules, 1, np.arange(3000))
    assert abs(np.mean(many["neutral"]) - 1 / 3) < 0.03


def test_the_rules_bundle_the_specs_and_their_design():
    rules = load_rules()
    assert list(rules.specs) == list(load_split_specs())
    assert rules.design == held_out_design(rules.specs)
    assert rules.partitions == {"neutral": 1 / 3, "held_out": 1 / 3}


def test_validation_is_a_fixed_subset_of_train():
    train = np.arange(0, 5000, 3)
    rest, val = choose_val(train, seed=0, split="neutral", scale=0.01)
    assert len(val) == val_size(0.01) == 80
    assert set(val) <= set(train) and not set(val) & set(rest)
    assert len(rest) + len(val) == len(train)
    assert rest.tolist() == np.setdiff1d(train, val).tolist()  # sorted, each id once
    rest_again, again = choose_val(train[::-1], seed=0, split="neutral", scale=0.01)
    assert (again == val).all()  # order of the training ids does not matter (shards)
    assert rest_again.tolist() == rest.tolist()
    with pytest.raises(VpromError, match="too few"):
        choose_val(np.arange(10), seed=0, split="neutral", scale=0.01)


# ---------------------------------------------------------------- properties

@st.composite
def matrices(draw):
    etype = draw(st.sampled_from(list(ElementType)))
    relation = draw(st.sampled_from(RELATIONS_OF[etype]))
    if etype is ElementType.COUNT:
        pool = [(str(v), "") for v in range(1, 11)]
    elif etype is ElementType.OBJECT:
        pool = [(o, "") for o in draw(st.sampled_from([THIRD[0], THIRD[1], THIRD[2],
                                                       OBJECTS]))]
    else:
        table = ATTRIBUTES[etype.value]
        pool = [(a, s) for s, v in table.items() for a in v]
    panels = draw(st.lists(st.sampled_from(pool), min_size=16, max_size=16))
    sa = draw(st.sampled_from(sorted({s for _, s in pool})))
    m = matrix(etype.value, relation, [e for e, _ in panels], sa=sa,
               answer=draw(st.integers(0, 7)))
    sides = (draw(st.integers(0, 1)), draw(st.integers(0, 1)))
    return m, info(*sides, sas=[s for _, s in panels])


@settings(max_examples=300, deadline=None)
@given(matrices())
def test_no_test_only_element_ever_reaches_a_training_matrix(case):
    m, panels = case
    parts = assign_one(m, panels)
    assert set(parts) == set(SPLITS) and set(parts.values()) <= {"train", "test", "excluded"}
    shown = m.elements[:8] + (m.elements[8 + m.answer],)
    if m.element_type is ElementType.COUNT:
        for split in ("interpolation", "extrapolation"):
            test = set(SPECS[split].rule["test"])
            if parts[split] == "train":
                assert not {int(e) for e in shown} & test
            if parts[split] == "test":
                assert {int(e) for e in shown} <= test
    if m.element_type is ElementType.OBJECT:
        for split in ("held_out_objects", "held_out_relation_object_pairs"):
            third = SPECS[split].rule["test"][m.relation.value]
            if parts[split] == "train":
                assert all(object_third(e) != third for e in m.elements)
            if parts[split] == "test":
                assert all(object_third(e) == third for e in m.elements)
    if m.element_type.value in ATTRIBUTES:
        held = set(SPECS["held_out_attributes"].rule["test"].get(m.element_type.value, []))
        if parts["held_out_attributes"] == "train":
            assert not set(panels.super_attributes) & held and m.super_attribute not in held
        pairs = SPECS["held_out_relation_attribute_pairs"].rule["test"][m.element_type.value]
        if parts["held_out_relation_attribute_pairs"] == "train":
            assert pairs.get(m.relation.value) != m.super_attribute


@settings(max_examples=200, deadline=None)
@given(matrices())
def test_a_matrix_goes_only_to_the_side_of_its_images(case):
    m, panels = case
    parts = assign_one(m, panels)
    for split, spec in SPECS.items():
        side = "test" if panels.sides[spec.partition][0] else "train"
        assert parts[split] in (side, "excluded")


@st.composite
def concept_sets(draw):
    """Crops' concepts (categories, attribute (table, super-attribute) pairs), some repeated,
    and held-out bans over them: random super-attributes and thirds per relation."""
    pairs = [(t, sa) for t, table in ATTRIBUTES.items() for sa in table]
    concept = st.tuples(st.frozensets(st.sampled_from(OBJECTS), max_size=3),
                        st.frozensets(st.sampled_from(pairs), max_size=3))
    concepts = draw(st.lists(concept, max_size=40))
    concepts += draw(st.lists(st.sampled_from(concepts), max_size=20)) if concepts else []
    ban = st.builds(
        TrainBan,
        super_attributes=st.dictionaries(st.sampled_from(sorted(ATTRIBUTES)), st.lists(
            st.sampled_from(["color", "shape", "age", "action", "nope"]), max_size=3).map(
            tuple), max_size=2),
        object_thirds=st.dictionaries(st.sampled_from(ALL_RELATIONS), st.lists(
            st.integers(0, 2), max_size=3).map(tuple), max_size=4))
    bans = draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), ban, min_size=1))
    return concepts, bans


def shows(ban: TrainBan, relation: str, categories, label_super_attributes) -> bool:
    """What a ban holds out, written out: a held-out (table, super-attribute) pair among the
    crop's, or one of its categories in a third banned for the relation."""
    pairs = {(table, sa) for table, sas in ban.super_attributes.items() for sa in sas}
    thirds = ban.object_thirds.get(relation, ())
    return bool(pairs & set(label_super_attributes)) or any(
        object_third(c) in thirds for c in categories)


@settings(max_examples=200, deadline=None)
@given(concept_sets())
def test_the_concept_table_gives_every_bans_verdict_on_every_crop(case):
    """`ConceptTable` says what each ban holds out of each crop, ban by ban and as bits."""
    concepts, bans = case
    table = ConceptTable(concepts)
    for ban in bans.values():
        for relation in ALL_RELATIONS:
            assert table.banned(ban, relation).tolist() == [
                shows(ban, relation, *c) for c in concepts]
    assert table.bits(bans).tolist() == [
        sum(ban_bit(bans, name, r) for name, ban in bans.items() for r in ALL_RELATIONS
            if shows(ban, r, *c)) for c in concepts]
