"""The counts pass in batches: the same answers as the per-phrase, per-box rules it replaces."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from vprom.errors import VpromError
from vprom.mining import count_pass, readers, typed_records
from vprom.mining.counts import _words_for
from vprom.mining.pool_passes import clipped_box
from vprom.mining.vocab import load_vocabulary

WORDS = _words_for(load_vocabulary())
TABLE = count_pass._number_keys(WORDS.number_bytes)
EXACT = WORDS.prefilter.search

TRICKY = [
    "two zebras", "TWO ZEBRAS", "Two-story house", "twenty-one candles", "someone walking",
    "phone on a table", "often seen", "a stone", "the tent", "seventeen birds",
    "thirteenth floor", "thirteens", "sevenfold", "seventeenth century", "one", "one.",
    "(three) cats", "three_cats", "3cats", "a380 plane", "sign says 10", "x1two", "twoone",
    "", " ", "a pair of shoes", "pairs", "couple", "zero", "a dozen eggs", "first place",
    "millionaire", "hundreds", "caf\u00e9 with two chairs", "\u0663 apples",
    "\uff14 apples", "\uff34\uff37\uff2f dogs", "\u212aelvin", "new\nline two",
    "t\u0131wo", "two\u00a0dogs", "\u00bd pizza", "\u00b2 squared", "teneleven",
]


def _expected(phrases):
    return [i for i, p in enumerate(phrases) if EXACT(p.lower())]


@pytest.mark.parametrize("phrases", [TRICKY, [p for p in TRICKY if "\n" not in p],
                                     [p for p in TRICKY if p.isascii() and "\n" not in p], []])
def test_numbered_finds_exactly_what_the_prefilter_finds(phrases):
    assert count_pass._numbered(phrases, EXACT, TABLE) == _expected(phrases)


def test_numbered_on_random_phrases_of_words_and_fragments():
    rng = np.random.default_rng(0)
    parts = ([w.decode() for w in WORDS.number_bytes] + ["a", "red", "car", "one's", "ten-",
             "-two", "7", "8th", "s", "ones", "tw", "o", ",", ".", "'", "-", "\u00e9", "\u0663"])
    phrases = [" ".join(rng.choice(parts, size=rng.integers(0, 6))).upper()
               if rng.random() < .2 else "".join(rng.choice(parts, size=rng.integers(0, 4)))
               for _ in range(3000)]
    assert 300 < len(_expected(phrases)) < 2900  # both kinds are there
    assert count_pass._numbered(phrases, EXACT, TABLE) == _expected(phrases)


def _random_words(count: int) -> list[bytes]:
    rng = np.random.default_rng(2)
    return sorted({bytes(rng.integers(97, 123, size=rng.integers(1, 12)).astype(np.uint8))
                   for _ in range(count)})


@pytest.mark.parametrize("words", [sorted(WORDS.number_bytes), [b"a", b"ab", b"abcdefghij"],
                                   _random_words(3000)])
def test_the_number_word_table_holds_each_key_and_nothing_else(words):
    table = count_pass._number_keys(frozenset(words))
    keys = np.array([int.from_bytes(w[:8].ljust(8, b"\0"), "little") for w in words],
                    dtype=np.uint64)
    rng = np.random.default_rng(4)
    others = np.concatenate([keys + 1, keys ^ 1 << 40, rng.integers(1, 1 << 62, size=5000,
                                                                       dtype=np.uint64)])
    others = others[~np.isin(others, keys)]

    def held(k):
        return table.slots[(k * table.multiplier) >> table.shift] == k

    assert held(keys).all() and not held(others).any()
    assert (table.slots != 0).sum() == len(np.unique(keys))


def test_number_words_not_all_plain_letters_fall_back_to_the_prefilter():
    assert count_pass._number_keys(None) is None  # `_Words.number_bytes` for such words
    assert count_pass._numbered(["two cats", "a cat"], EXACT, None) == [0]


def _funnel(regions, sizes, owner, counts, typed):
    """`_funnel` on regions given as rows, or as the typed structs `typed_images` gives."""
    if typed:
        regions = [typed_records.Region(*r) for r in regions]
    found, row, _, boxes = count_pass._columns([count_pass.Image(0, 1, regions, None, None)])
    return count_pass._funnel(found, row, boxes, sizes, owner, counts)


@pytest.mark.parametrize("typed", [False, True])
def test_the_vectorised_funnel_counts_as_clipped_box_does(typed):
    rng = np.random.default_rng(1)
    sizes = [(800, 600), (50, 40), (1, 1)]
    regions = [(k, "p", *map(int, rng.integers(-60, 900, size=2)),
                *map(int, rng.integers(-5, 400, size=2))) for k in range(4000)]
    regions += [(1, "p", 0, 0, 800, 600), (2, "p", 0, 0, 801, 600), (3, "p", 799, 599, 1, 1),
                (4, "p", 800, 0, 1, 1), (5, "p", -1, -1, 0, 5), (6, "p", 0, 0, 0, 5),
                (7, "p", 3, 3, 5, 0)]
    owner = np.arange(len(regions)) % len(sizes)
    counts = Counter()
    odd = _funnel(regions, sizes, owner, counts, typed)
    expected, boxes = Counter(), []
    for r, o in zip(regions, owner):
        boxes.append(clipped_box(*r[2:], *sizes[o], expected))
    assert counts == expected and len(expected) == 3
    assert [odd.get(i, r[2:]) for i, r in enumerate(regions)] == boxes
    assert 0 < len(odd) < len(regions)


@pytest.mark.parametrize("typed", [False, True])
def test_a_coordinate_beyond_int64_goes_box_by_box(typed):
    regions = [(1, "two cats", 0, 0, 10, 10), (2, "p", 2 ** 70, 0, 10, 10),
               (3, "p", 0, 0, 2 ** 62, 10)]
    counts = Counter()
    odd = _funnel(regions, [(100, 100)], np.zeros(3, dtype=int), counts, typed)
    assert odd == {0: (0, 0, 10, 10), 1: None, 2: (0, 0, 100, 10)}
    assert counts == Counter(outside_image=1, clipped=1)


@pytest.mark.parametrize("typed", [False, True])
def test_a_sum_beyond_int64_goes_box_by_box(typed):
    regions = [(1, "p", 0, 0, 10, 10), (2, "p", 2 ** 62, 0, 2 ** 62, 10)]  # x + w wraps
    counts = Counter()
    odd = _funnel(regions, [(100, 100)], np.zeros(2, dtype=int), counts, typed)
    assert odd == {0: (0, 0, 10, 10), 1: None} and counts == Counter(outside_image=1)


def _image(index, regions, image_id=None):
    return {"image_id": index + 1 if image_id is None else image_id, "regions": regions}


def _region(rid, phrase="three dogs", x=0, y=0, w=200, h=200):
    return {"region_id": rid, "phrase": phrase, "x": x, "y": y, "width": w, "height": h,
            "image_id": 0}


def _mine(records, sizes=None):
    source = readers.FileRef(Path("region_descriptions.json"))
    sizes = sizes or {k + 1: (400, 400) for k in range(len(records))}
    return count_pass.mine_counts(count_pass.images(enumerate(records), source), sizes, 100,
                                  load_vocabulary())


def test_regions_off_the_fast_path_are_read_as_the_reader_reads_them(monkeypatch):
    monkeypatch.setattr(count_pass, "BATCH", 2)
    plain = [_image(k, [_region(10 * k + j) for j in range(3)]) for k in range(5)]
    odd = [_image(k, [_region(10 * k + j) for j in range(3)]) for k in range(5)]
    odd[1]["regions"][0]["x"] = 0.0                  # a float box: int() as readers do
    odd[2]["regions"][1]["phrase"] = None            # not a string: ""
    del odd[2]["regions"][2]["region_id"]            # the v1.0 key
    odd[2]["regions"][2]["id"] = 22
    odd[3]["regions"][0]["region_id"] = True         # a bool id is not the fast path's int
    a, b = _mine(plain), _mine(odd)
    assert a.stats["regions"]["read"] == b.stats["regions"]["read"] == 15
    assert a.stats["regions"]["counted"] == 15 and b.stats["regions"]["counted"] == 14
    assert a.columns["source_id"].tolist() == [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32,
                                               40, 41, 42]
    assert b.columns["source_id"].tolist() == [0, 1, 2, 10, 11, 12, 20, 22, 1, 31, 32, 40, 41,
                                               42]


def test_the_first_fault_in_the_file_is_named_even_inside_a_batch():
    records = [_image(k, [_region(10 * k)]) for k in range(6)]
    records[2]["regions"][0]["x"] = "left"            # record 2: a non-numeric box
    records[4] = ["not", "a", "record"]               # record 4: not an object
    with pytest.raises(VpromError, match=r"image 3, region .*non-numeric box"):
        _mine(records)
    records[2]["regions"][0]["x"] = 0
    with pytest.raises(VpromError, match="record #4 is a list"):
        _mine(records)


def test_images_missing_from_image_data_are_counted_not_mined():
    records = [_image(k, [_region(10 * k), _region(10 * k + 1, "a cat")]) for k in range(3)]
    result = _mine(records, sizes={1: (400, 400), 3: (400, 400)})
    counts = result.stats["regions"]
    assert counts["read"] == 6 and counts["missing_image"] == 2
    assert counts["missing_image_records"] == 1 and result.stats["missing_image_ids"] == [2]
    assert result.columns["source_id"].tolist() == [0, 20]
