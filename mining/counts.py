"""Count phrases: does a region description state how many of something it shows?
`parse_count` classifies each number by its neighbours (`mining/data/counts.json`: "five
o'clock" is a time) or binds it to the countable noun after it, skipping adjectives ("two large
dogs" -> dog). A partitive, range or approximate mention spoils the phrase, two bound mentions
are "several counts", and one is the count when it is 1..10 and heads the phrase.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vprom.mining.vocab import DATA_DIR, Vocabulary, load_vocabulary, read_table

from vprom.domain import COUNTS
from vprom.errors import VpromError

#: Why a number is not a count (`CountParse.excluded`); docs/generation.md gives examples.
REASONS = ("time", "age", "label", "measure", "money", "ordinal", "year", "one of", "score",
           "range", "approximate", "modifier", "pair or couple", "pronoun", "several counts",
           "out of range", "not the subject", "not a count noun", "no noun")
_SPOILERS = ("one of", "range", "approximate")   # make the whole phrase unreliable


@dataclass(frozen=True)
class CountParse:
    count: int | None   # 1..10 when the phrase states a count of a noun, else None
    noun: str           # the counted noun, canonical singular ("" if none)
    excluded: str       # "" when counted; else one of REASONS
    number: str         # the number text matched


@dataclass
class _Mention:
    index: int
    text: str
    value: int | None = None
    reason: str = ""
    noun: str = ""


_TOKEN = re.compile(
    r"\d+(?:[.,:/]\d+)*[a-z0-9]*(?:-[a-z0-9]+)*"      # 10:30, 1,000, 5pm, 3rd, 5-year-old, 3-2
    r"|[a-z][a-z0-9]*(?:[-'.][a-z0-9]+)*"             # t-shirt, o'clock, a.m, twenty-one, a380
    r"|[#$£€¥%\"]"
)
_NUMERIC = re.compile(r"(\d+(?:[.,:/]\d+)*)([a-z0-9]*)((?:-[a-z0-9]+)*)")
_AGED = re.compile(r"(years?|yrs?|months?)-old")
_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})


class CountWords:
    """The word lists of counts.json as sets, plus the vocabulary-derived noun sets."""

    def __init__(self, vocab: Vocabulary, path: Path):
        data = read_table(path)
        missing = [key for key in _LISTS if not isinstance(data.get(key), list)]
        if missing or not isinstance(data.get("cardinals"), dict):
            raise VpromError(f"{path}: list {(missing or ['cardinals'])[0]!r} is missing; "
                             "restore it")
        self.vocab = vocab
        self.cardinals: dict[str, int] = data.pop("cardinals")
        for key, words in data.items():
            if isinstance(words, list) and len(set(words)) != len(words):
                raise VpromError(f"{path}: list {key!r} holds a word twice; list it once")
            setattr(self, key, frozenset(words))
        self.nouns = vocab.objects | vocab.person_words | vocab.excluded_objects
        self.adjectives = (frozenset(vocab.object_attributes) | frozenset(vocab.human_attributes)
                           | vocab.excluded_attributes | self.modifiers) - self.stop_words
        self.number_words = frozenset(self.cardinals.keys() | self.ordinals | self.vague)
        # longest first: "seventeen" is tried before "seven" needs the \b to fail
        longest_first = sorted(self.number_words, key=lambda w: (-len(w), w))
        alternation = "|".join(map(re.escape, longest_first))
        self.prefilter = re.compile(r"\d|\b(?:" + alternation + r")\b")


_LISTS = (
    "ordinals", "vague", "time_after", "age_units", "age_before", "measure_after",
    "glued_measure", "glued_time", "money_before", "money_after", "label_before", "label_after",
    "approximate_before", "range_between", "range_before", "score_words", "partitive_after",
    "partitive_determiners", "pronoun_before", "lead", "modifiers", "stop_words", "uncountable",
)


_WORDS: dict[int, CountWords] = {}


def words_for(vocab: Vocabulary) -> CountWords:
    """The word lists of counts.json with the noun sets of `vocab`, made once per vocabulary."""
    words = _WORDS.get(id(vocab))
    if words is None or words.vocab is not vocab:
        if len(_WORDS) >= 8:   # vocabularies come and go in tests; keep a handful
            _WORDS.clear()
        words = _WORDS[id(vocab)] = CountWords(vocab, DATA_DIR / "counts.json")
    return words


def parse_count(phrase: str, vocab: Vocabulary | None = None) -> CountParse | None:
    """Parse the count a region description states; None when it holds no number at all."""
    return parse_words(phrase, words_for(vocab if vocab is not None else load_vocabulary()))


def parse_words(phrase: str, words: CountWords) -> CountParse | None:
    """`parse_count` with the word lists of its vocabulary (`words_for`)."""
    text = phrase.lower()
    if not words.prefilter.search(text):
        return None
    tokens = _TOKEN.findall(text.translate(_QUOTES))
    mentions = _find_mentions(tokens, words)
    if not mentions:
        return None
    _classify(tokens, mentions, words)
    return _decide(tokens, mentions, words)


def _find_mentions(tokens: list[str], words: CountWords) -> list[_Mention]:
    mentions = []
    number_words = words.number_words
    for i, token in enumerate(tokens):
        if token in number_words and not token[0].isdigit():
            if token in words.cardinals:
                mentions.append(_Mention(i, token, value=words.cardinals[token]))
            elif token in words.ordinals:
                mentions.append(_Mention(i, token, reason="ordinal"))
            else:
                mentions.append(_Mention(i, token, reason="pair or couple"))
        elif token.isalpha():
            continue  # most tokens: no digit, no hyphen (letters are never digits)
        elif token[0].isdigit():
            mentions.append(_numeric_mention(i, token, words))
        elif any(c.isdigit() for c in token):
            mentions.append(_Mention(i, token, reason="label"))   # a380, b-52
        elif "-" in token:
            mention = _hyphenated_word(i, token, words)
            if mention is not None:
                mentions.append(mention)
    return mentions


def _numeric_mention(i: int, token: str, words: CountWords) -> _Mention:
    """A token starting with a digit: 3, 10:30, 3.5, 1,000, 5pm, 3rd, 1990s, 5-year-old, 3-2."""
    number, suffix, hyphens = _NUMERIC.fullmatch(token).groups()
    parts = hyphens.split("-")[1:]
    mention = _Mention(i, token)
    if ":" in number:
        mention.reason = "time"
    elif "/" in number or "." in number:
        mention.reason = "measure"
    elif suffix in ("st", "nd", "rd", "th"):
        mention.reason = "ordinal"
    elif suffix in words.glued_time:
        mention.reason = "time"
    elif suffix == "s" and len(number) in (2, 4):
        mention.reason = "year"
    elif suffix:
        mention.reason = "measure" if suffix in words.glued_measure else "label"
    elif parts:
        mention.reason = _hyphen_reason(parts)
        if mention.reason == "":
            mention.value = int(number.replace(",", ""))   # 3-2: score or range, by the noun
    else:
        value = int(number.replace(",", ""))
        if len(number) == 4 and 1800 <= value <= 2099:
            mention.reason = "year"
        else:
            mention.value = value
    return mention


def _hyphen_reason(parts: list[str]) -> str:
    """Why '<n>-<parts>' is not a count; '' for '<n>-<m>' (score or range, decided later)."""
    if parts[-1] == "old" or parts[0] in ("year", "years", "yr", "month", "months"):
        return "age" if parts[-1] == "old" else "measure"
    if all(p.isdigit() for p in parts):
        return "" if len(parts) == 1 else "label"   # 555-1234-00: a phone or serial number
    return "modifier"


def _hyphenated_word(i: int, token: str, words: CountWords) -> _Mention | None:
    """twenty-one, two-story, five-year-old, one-way; None when no part is a number word."""
    first, *rest = token.split("-")
    if first not in words.cardinals:
        return None
    if rest[0] in words.cardinals and len(rest) == 1:
        return _Mention(i, token, value=words.cardinals[first] + words.cardinals[rest[0]])
    if rest[0] in words.ordinals:
        return _Mention(i, token, reason="ordinal")
    return _Mention(i, token, reason=_hyphen_reason(rest))


def _classify(tokens: list[str], mentions: list[_Mention], words: CountWords) -> None:
    """Give every mention with a value a reason, or bind it to its noun."""
    by_index = {m.index: m for m in mentions}
    scored = not words.score_words.isdisjoint(tokens)
    for mention in mentions:
        if mention.reason or mention.value is None:
            continue
        mention.reason = _context_reason(tokens, mention.index, by_index, words)
        if mention.reason:
            continue
        noun, failure = _bind_noun(tokens, mention.index + 1, mention.value, words)
        if mention.text[0].isdigit() and "-" in mention.text:   # 3-2 / 2-3
            mention.reason = "range" if noun and not scored else "score"
        elif noun is None:
            mention.reason = _unbound_reason(tokens, mention, failure, words)
        elif noun in words.uncountable:
            mention.reason = "not a count noun"
        else:
            mention.noun = noun


def _context_reason(tokens, i, by_index, words: CountWords) -> str:
    """The reason the neighbours of token i give, or '' when they say nothing."""
    prev2, prev, _, nxt, nxt2 = ["", "", *tokens, "", ""][i:i + 5]  # "" past either end
    if prev in words.money_before or nxt in words.money_after:
        return "money"
    if nxt in words.time_after or (nxt == "o" and nxt2 == "clock"):
        return "time"
    if prev in words.age_before or (nxt in words.age_units and nxt2 == "old") \
            or _AGED.fullmatch(nxt):
        return "age"
    if nxt in words.measure_after:
        return "measure"
    if prev in words.label_before or nxt in words.label_after:
        return "label"
    if prev in words.approximate_before or (prev == "to" and prev2 == "up"):
        return "approximate"
    if prev in words.range_before:
        return "range"
    if nxt in words.range_between and (i + 2) in by_index:
        follower = by_index[i + 2]
        if follower.value is not None and not follower.reason:
            follower.reason = "range"
            scored = nxt == "to" and not words.score_words.isdisjoint(tokens)
            return "score" if scored else "range"
    if nxt in words.partitive_after and nxt2 in words.partitive_determiners:
        return "one of"
    return ""


def _bind_noun(tokens, start, value, words: CountWords) -> tuple[str | None, str]:
    """The countable noun after a number, skipping adjectives; else (None, why not)."""
    canonical = words.vocab.canonical
    after_adjective = False
    for j in range(start, min(start + 5, len(tokens))):
        token = tokens[j]
        if token[0].isdigit() or token in words.cardinals:
            return None, "no noun"
        noun = _noun_at(tokens, j, words)
        if noun is not None:
            return noun, ""
        if token == "and" and after_adjective:   # "two red and white signs"
            continue
        if token in words.stop_words:
            return None, "no noun"
        if canonical(token) in words.adjectives:
            after_adjective = True
            continue
        if value >= 2 and _looks_plural(token, words):
            return _singular(token), ""
        return None, "not a count noun"
    return None, "no noun"


def _noun_at(tokens, j, words: CountWords) -> str | None:
    """A known noun (one or two words) starting at j; a noun compound gives its head."""
    canonical = words.vocab.canonical
    if j + 1 < len(tokens):
        pair = canonical(tokens[j] + " " + tokens[j + 1])
        if pair in words.nouns:
            return pair
    token = tokens[j]
    if token in words.stop_words:
        return None
    noun = canonical(token)
    if noun not in words.nouns:
        return None
    if j + 1 < len(tokens) and token == noun:   # singular first word: maybe a modifier
        head = tokens[j + 1]
        if head not in words.stop_words and canonical(head) in words.nouns:
            return canonical(head)               # "two pizza boxes" -> box
    return noun


def _looks_plural(token: str, words: CountWords) -> bool:
    return (len(token) > 3 and token.endswith("s") and token.isalpha()
            and not token.endswith(("ss", "us"))
            and token not in words.stop_words)


def _singular(token: str) -> str:
    if token.endswith("ies"):
        return token[:-3] + "y"
    if token.endswith(("ches", "shes", "xes", "sses", "zes")):
        return token[:-2]
    return token[:-1]


def _unbound_reason(tokens, mention: _Mention, failure: str, words: CountWords) -> str:
    prev = tokens[mention.index - 1] if mention.index > 0 else ""
    if mention.text == "one" and (failure == "no noun" or prev in words.pronoun_before):
        return "pronoun"
    if mention.text[0].isdigit():
        return "label"   # a bare digit counts nothing: text on a sign, a shirt, a clock
    return failure


def _decide(tokens, mentions: list[_Mention], words: CountWords) -> CountParse:
    for mention in mentions:
        if mention.reason in _SPOILERS:
            return CountParse(None, "", mention.reason, mention.text)
    bound = [m for m in mentions if m.noun]
    if len(bound) >= 2:
        return CountParse(None, "", "several counts", bound[1].text)
    if bound and _and_another(tokens, bound[0].index):   # "two zebras and a giraffe": three animals
        return CountParse(None, bound[0].noun, "several counts", bound[0].text)
    if not bound:
        first = mentions[0]
        return CountParse(None, "", first.reason, first.text)
    mention = bound[0]
    if mention.value not in COUNTS:
        return CountParse(None, mention.noun, "out of range", mention.text)
    if not words.lead.issuperset(tokens[:mention.index]):
        return CountParse(None, mention.noun, "not the subject", mention.text)
    return CountParse(mention.value, mention.noun, "", mention.text)


def _and_another(tokens: list[str], start: int) -> bool:
    return any(tokens[k] == "and" and tokens[k + 1] in ("a", "an", "another")
               for k in range(start + 1, len(tokens) - 1))
