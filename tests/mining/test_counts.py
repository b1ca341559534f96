"""Count phrases: real-looking region descriptions and the count (or the reason) they give."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vprom.mining.counts import REASONS, CountParse, parse_count
from vprom.mining.vocab import DATA_DIR, load_vocabulary
from tests.mining.conftest import plural

WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]

# phrase -> (count, noun) when counted, or the reason it is not a count
CASES = {
    # counts
    "five bowls of oatmeal": (5, "bowl"),
    "3 dogs": (3, "dog"),
    "two men": (2, "man"),
    "Two men standing on a beach": (2, "man"),
    "three large brown dogs": (3, "dog"),
    "there are four zebras": (4, "zebra"),
    "a group of five people": (5, "person"),
    "two teddy bears on a bed": (2, "teddy bear"),
    "two tennis rackets": (2, "racket"),
    "two pizza boxes": (2, "box"),
    "two red and white signs": (2, "sign"),
    "one man": (1, "man"),
    "one person surfing": (1, "person"),
    "9 giraffes": (9, "giraffe"),
    "10 sheep grazing in a field": (10, "sheep"),
    "ten sheep": (10, "sheep"),
    "three white plates.": (3, "plate"),
    "TWO DOGS!": (2, "dog"),
    "two t-shirts hanging": (2, "t-shirt"),
    "two orange cats": (2, "cat"),
    "two slices of pizza": (2, "slice"),
    "four wheels on the car": (4, "wheel"),
    "two large windows": (2, "window"),
    "three people skiing down a hill": (3, "person"),
    "the two horses": (2, "horse"),
    "seven birds on a wire": (7, "bird"),
    "6 donuts in a box": (6, "donut"),
    "eight umbrellas": (8, "umbrella"),
    "two clouds in the sky": (2, "cloud"),
    "these three elephants": (3, "elephant"),
    "two zebras grazing": (2, "zebra"),
    "three cups of coffee": (3, "cup"),
    "two wooden chairs": (2, "chair"),
    "4 cows in a pasture": (4, "cow"),
    "two baby elephants": (2, "elephant"),
    "two women walking": (2, "woman"),
    "5 children playing": (5, "child"),
    "there are three kites in the sky": (3, "kite"),
    "two kiwis on a plate": (2, "kiwi"),   # an unknown plural noun is still a noun
    "only two apples left": (2, "apple"),
    # not counts
    "five o'clock": "time",
    "the clock says five o clock": "time",
    "clock shows 10:30": "time",
    "the train leaves at 5 pm": "time",
    "sign says open until 9pm": "time",
    "a 10 years old boy": "age",
    "a 5-year-old girl": "age",
    "a three-year-old child": "age",
    "boy aged 7": "age",
    "number 7 on the jersey": "label",
    "#10 on a shirt": "label",
    "player 23": "label",
    "bus 42 on the street": "label",
    "route 9 sign": "label",
    "a sign with the number 2": "label",
    "sign says 55": "label",
    "one way sign": "label",
    "a b-52 bomber": "label",
    "two feet of snow": "measure",
    "speed limit 5 mph": "measure",
    "20% off": "measure",
    "a 3.5 inch screen": "measure",
    "a two-story house": "modifier",
    "two-tone shirt": "modifier",
    "10 dollars": "money",
    "$5 sign": "money",
    "the second car": "ordinal",
    "3rd base": "ordinal",
    "first place trophy": "ordinal",
    "one of the dogs": "one of",
    "two of them are brown": "one of",
    "one of the two dogs": "one of",
    "score is 3-2": "score",
    "made in 1990": "year",
    "the 1990s": "year",
    "two or three birds": "range",
    "2-3 people": "range",
    "between two and three trees": "range",
    "about five people": "approximate",
    "more than two people": "approximate",
    "at least two dogs": "approximate",
    "two dogs and three cats": "several counts",
    "two men and two women": "several counts",
    "two zebras and a giraffe": "several counts",
    "twelve eggs in a carton": "out of range",
    "11 players": "out of range",
    "0 cars": "out of range",
    "a dozen donuts": "out of range",
    "twenty-one candles": "out of range",
    "the one on the left": "pronoun",
    "this one is bigger": "pronoun",
    "a pair of scissors": "pair or couple",
    "a couple of people": "pair or couple",
    "a man holding two bananas": "not the subject",
    "plate with three donuts": "not the subject",
    "two water": "not a count noun",
    "there are two": "no noun",
}


@pytest.mark.parametrize("phrase", list(CASES))
def test_phrase_table(phrase):
    expected = CASES[phrase]
    result = parse_count(phrase)
    assert result is not None
    if isinstance(expected, tuple):
        assert (result.count, result.noun, result.excluded) == (*expected, "")
    else:
        assert result.count is None and result.excluded == expected, result
        assert expected in REASONS
    assert result.number and result.number in phrase.lower()


@pytest.mark.parametrize("phrase", [
    "a man on a bike", "", "the sky is blue", "someone holding a kite", "alone on the beach",
    "bones of a fish", "a tone of voice", "the ones on the left", "stone wall",
])
def test_phrases_without_a_number_give_none(phrase):
    assert parse_count(phrase) is None


def test_number_text_and_reason_are_reported():
    assert parse_count("five bowls of oatmeal") == CountParse(5, "bowl", "", "five")
    assert parse_count("player 23") == CountParse(None, "", "label", "23")


def test_an_explicit_vocabulary_is_used():
    vocab = load_vocabulary()
    assert parse_count("two grey cats", vocab) == parse_count("two grey cats")


_vocab = load_vocabulary()
_NOUNS = sorted(n for n in _vocab.objects if n not in ("orange",))   # "two orange cats": colour


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10), st.sampled_from(_NOUNS), st.booleans(),
       st.sampled_from(["", "the ", "there are ", "a group of "]))
def test_number_and_plural_known_noun_parse_to_the_number(n, noun, digits, lead):
    number = str(n) if digits else WORDS[n - 1]
    phrase = f"{lead}{number} {plural(noun)}"
    result = parse_count(phrase)
    if noun in _COUNTS_UNCOUNTABLE:
        assert result.count is None and result.excluded == "not a count noun"
    else:
        assert (result.count, result.noun, result.excluded) == (n, noun, ""), phrase


_COUNTS_UNCOUNTABLE = {"cheese", "bread", "pasta", "lettuce", "broccoli", "cauliflower", "celery",
                       "soda", "butter", "ice cream", "toilet paper", "soup", "graffiti", "wine"}


@settings(max_examples=200, deadline=None)
@given(st.integers(11, 10_000), st.sampled_from(["dogs", "people", "cars"]))
def test_counts_over_ten_are_out_of_range(n, noun):
    if 1800 <= n <= 2099:
        n += 300   # four-digit numbers in that span are years
    result = parse_count(f"{n} {noun}")
    assert result.count is None and result.excluded == "out of range"


_COUNT_WORDS = json.loads((DATA_DIR / "counts.json").read_text(encoding="utf-8"))
_ALL_NUMBER_WORDS = sorted({*_COUNT_WORDS["cardinals"], *_COUNT_WORDS["ordinals"],
                            *_COUNT_WORDS["vague"]})
_NUMBER_WORDS = re.compile(r"\b(" + "|".join(_ALL_NUMBER_WORDS) + r")\b")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Nd", "Cs")), max_size=60))
def test_text_without_digits_or_number_words_is_none(text):
    if _NUMBER_WORDS.search(text.lower()):
        return
    assert parse_count(text) is None


@pytest.mark.parametrize("word", _ALL_NUMBER_WORDS)
def test_the_prefilter_lets_every_number_word_through(word):
    assert parse_count(f"a {word} here") is not None
    assert parse_count(f"a {word}x here") is None   # only whole words
