"""The curated vocabularies: contents the rest of vprom relies on, canonical labels, validation."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vprom.mining.vocab import (
    DATA_DIR,
    HUMAN_SUPER_ATTRIBUTES,
    OBJECT_SUPER_ATTRIBUTES,
    load_vocabulary,
    normalize,
)
from tests.mining.conftest import plural
from vprom.errors import VpromError

# The labels the synthetic corpus renders (and the paper's examples): they must exist.
OBJECT_ATTRIBUTES = {
    "color": "red green blue yellow orange purple pink white black brown gray",
    "material": "wooden metal glass plastic brick stone",
    "scene": "sunny cloudy snowy rainy foggy",
    "plant condition": "leafy bare dry blooming dead",
    "action": "parked flying hanging floating",
    "shape": "round square rectangular triangular curved",
    "texture": "striped spotted checkered plaid smooth furry",
}
HUMAN_ATTRIBUTES = {
    "age": "young old",
    "hair style": "bald curly blond",
    "clothing style": "casual formal sleeveless",
    "gender": "male female",
    "action": "standing sitting walking running",
    "clothing color": "red blue green white black yellow",
}
OBJECTS = ("ball box car tree flower cup bottle chair table book clock lamp sign plate bowl kite "
           "umbrella bird dog cat horse bag hat apple banana pizza").split()


@pytest.fixture(scope="module")
def vocab():
    return load_vocabulary()


def test_sizes_match_the_paper(vocab):
    assert len(vocab.object_attributes) == 84
    assert len(vocab.human_attributes) == 38
    assert len(vocab.objects) == 346
    assert set(vocab.object_attributes.values()) == set(OBJECT_SUPER_ATTRIBUTES)
    assert set(vocab.human_attributes.values()) == set(HUMAN_SUPER_ATTRIBUTES)


def _super_attribute(vocab, raw: str, human: bool) -> str | None:
    """The super-attribute the miner files a raw attribute under, in one table."""
    table = vocab.human_attributes if human else vocab.object_attributes
    return table.get(vocab.canonical(raw))


def _implied(vocab, raw: str) -> tuple[str, ...]:
    return vocab.implied_labels.get(vocab.canonical(raw), ())


@pytest.mark.parametrize("table,human", [(OBJECT_ATTRIBUTES, False), (HUMAN_ATTRIBUTES, True)])
def test_required_attributes_are_in_their_super_attribute(vocab, table, human):
    for super_attribute, labels in table.items():
        for label in labels.split():
            assert _super_attribute(vocab, label, human=human) == super_attribute, label


def test_required_objects_persons_and_exclusions(vocab):
    assert set(OBJECTS) <= vocab.objects
    assert {"man", "woman", "boy", "girl", "person"} <= vocab.person_words
    assert {"sky", "road", "water", "ground", "wall", "grass"} <= vocab.excluded_objects
    assert {"open", "empty"} <= vocab.excluded_attributes
    # persons are not object categories: "man" and "person" would be valid for each other
    assert not vocab.person_words & vocab.objects


def test_person_words_imply_visible_gender_and_age(vocab):
    assert _implied(vocab, "man") == ("male", "adult")
    assert _implied(vocab, "Women") == ("female", "adult")
    assert _implied(vocab, "girl") == ("female", "young")
    assert _implied(vocab, "person") == () and _implied(vocab, "dog") == ()
    for name, values in vocab.implied_labels.items():
        assert name in vocab.person_words | vocab.objects
        assert {_super_attribute(vocab, v, human=True) for v in values} <= {"gender", "age",
                                                                          "action"}
    # every gendered word names its gender, and every word for a child says young
    gendered = {"man", "woman", "boy", "girl", "lady", "guy", "mother", "father"}
    assert all({"male", "female"} & set(_implied(vocab, w)) for w in gendered)
    assert all("young" in _implied(vocab, w) for w in ("boy", "girl", "child", "kid", "baby"))


@pytest.mark.parametrize("raw,expected", [
    ("grey", "gray"), ("Grey", "gray"), ("wood", "wooden"), ("balls", "ball"),
    ("tshirt", "t-shirt"), ("tee shirt", "t-shirt"), ("t shirt", "t-shirt"), ("T-Shirt", "t-shirt"),
    ("men", "man"), ("people", "person"), ("children", "child"), ("boxes", "box"),
    ("cherries", "cherry"), ("benches", "bench"), ("leaves", "leaf"), ("clouds", "cloud"),
    ("tennis balls", "ball"), ("bikes", "bicycle"), ("puppies", "dog"), ("light blue", "blue"),
    ("  Parked  ", "parked"), ("blonde", "blond"), ("glass", "glass"), ("bus", "bus"),
    ("grass", "grass"), ("pants", "pants"), ("thingamajigs", "thingamajigs"),
    ("Some Unknown-Thing!", "some unknown-thing"),
])
def test_canonical(vocab, raw, expected):
    assert vocab.canonical(raw) == expected


def test_every_category_plural_comes_back(vocab):
    for label in vocab.objects | vocab.person_words:
        assert vocab.canonical(plural(label)) == label, label
        assert vocab.canonical(label.upper()) == label


def test_person_words_and_super_attributes_of_raw_names(vocab):
    assert {vocab.canonical("Men"), vocab.canonical("skier")} <= vocab.person_words
    assert vocab.canonical("dog") not in vocab.person_words
    assert _super_attribute(vocab, "GREY", human=False) == "color"
    assert _super_attribute(vocab, "grey", human=True) == "clothing color"
    assert _super_attribute(vocab, "blonde", human=True) == "hair style"
    assert _super_attribute(vocab, "blond", human=False) is None
    assert _super_attribute(vocab, "open", human=False) is None


@pytest.mark.parametrize("raw,expected", [
    ("Red", "red"), ("  big   red\tcar ", "big red car"), ("red.", "red"), ("'red'", "red"),
    ("t-shirt", "t-shirt"), ("man's", "man's"), ("man’s hat", "man's hat"), ("- sign -", "sign"),
    ("black/white", "black white"), ("hot_dog", "hot dog"), ("!!!", ""), ("", ""),
    ("café", "café"),
])
def test_normalize(raw, expected):
    assert normalize(raw) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_normalize_is_idempotent_and_trimmed(text):
    once = normalize(text)
    assert normalize(once) == once
    assert once == once.strip() and "  " not in once


def test_vocabulary_pickles_for_spawned_worker_processes(vocab):
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy == vocab
    assert copy.canonical("Grey") == "gray" and _super_attribute(copy, "red", human=False) == "color"


# ------------------------------------------------------------------------------ validation
@pytest.fixture
def data_copy(tmp_path) -> Path:
    folder = tmp_path / "data"
    shutil.copytree(DATA_DIR, folder)
    return folder


def _edit(folder: Path, name: str, change) -> None:
    path = folder / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_copy_loads_like_the_default(data_copy):
    copy = load_vocabulary(data_copy)
    assert copy.objects == load_vocabulary().objects
    assert copy.aliases == load_vocabulary().aliases


@pytest.mark.parametrize("name,change,words", [
    ("object_attributes.json", lambda d: d["shape"].append("red"),
     ["object_attributes.json", "'red'"]),
    ("object_attributes.json", lambda d: d.__setitem__("colour", ["mauve"]), ["'colour'"]),
    ("object_attributes.json", lambda d: d.pop("texture"), ["'texture'", "missing"]),
    ("human_attributes.json", lambda d: d["age"].append("young"), ["duplicate", "'young'"]),
    ("human_attributes.json", lambda d: d["age"].append(""), ["human_attributes.json", "empty"]),
    ("human_attributes.json", lambda d: d["age"].append("Very Old"), ["'Very Old'", "normalised"]),
    ("objects.json", lambda d: d["objects"].append("sky"), ["excluded.json", "'sky'"]),
    ("objects.json", lambda d: d["objects"].append("man"), ["person_words.json", "'man'"]),
    ("aliases.json", lambda d: d["synonym"].update({"dog": "cat"}), ["aliases.json", "'dog'"]),
    ("aliases.json", lambda d: d["synonym"].update({"zzfoo": "zzbar", "zzbar": "zzfoo"}),
     ["cycle", "zzfoo"]),
    ("aliases.json", lambda d: d["synonym"].update({"zzfoo": "zzbar"}),
     ["zzfoo -> zzbar", "canonical"]),
    ("aliases.json", lambda d: d["synonym"].update({"grey": "gray"}), ["'grey'", "twice"]),
    ("excluded.json", lambda d: d["attributes"]["state"].append("red"), ["excluded.json", "'red'"]),
    ("excluded.json", lambda d: d["objects"].__setitem__("weird", ["zz"]), ["'weird'", "reasons"]),
    ("implied_labels.json", lambda d: d["implied"]["man"].append("tall"),
     ["implied_labels.json", "'tall'", "human attribute"]),
    ("implied_labels.json", lambda d: d["implied"]["man"].append("male"), ["duplicate", "'male'"]),
    ("implied_labels.json", lambda d: d["implied"].__setitem__("men", ["male"]),
     ["implied_labels.json", "'men'", "person word"]),
    ("implied_labels.json", lambda d: d["implied"].__setitem__("boy", []), ["'boy'", "nothing"]),
    ("implied_labels.json", lambda d: d.pop("implied"), ["implied_labels.json", "'implied'"]),
])
def test_validation_names_the_file_and_the_label(data_copy, name, change, words):
    _edit(data_copy, name, change)
    with pytest.raises(VpromError) as error:
        load_vocabulary(data_copy)
    message = str(error.value)
    for word in words:
        assert word in message


def test_alias_chains_resolve_to_their_canonical_end(data_copy):
    _edit(data_copy, "aliases.json", lambda d: d["synonym"].update({"zzgrey": "grey"}))
    assert load_vocabulary(data_copy).canonical("zzgrey") == "gray"


def test_duplicate_json_keys_and_broken_json_are_refused(data_copy):
    path = data_copy / "aliases.json"
    path.write_text('{"spelling": {"grey": "gray", "grey": "gray"}}')
    with pytest.raises(VpromError, match="'grey' appears twice"):
        load_vocabulary(data_copy)
    path.write_text('{"spelling": ')
    with pytest.raises(VpromError, match="aliases.json: not valid JSON"):
        load_vocabulary(data_copy)
    path.unlink()
    with pytest.raises(VpromError, match="aliases.json: vocabulary file missing"):
        load_vocabulary(data_copy)
