"""Throughput of count-phrase parsing and label canonicalisation (the miner's hot loops).

Builds a deterministic mix of region-description-like phrases from the vocabularies: by
default 92% without any number (as most of Visual Genome's 5.4M descriptions) and 8% with
one (counts, times, ages, labels, ...). Prints, side by side in one run:

- `parse_count` phrases/s over the mix, and over the numbered phrases only;
- the cost of the prefilter alone (lower() + one regex search), the floor for a phrase
  without a number;
- `Vocabulary.canonical` labels/s, memoised (as the miner sees it) and on fresh labels;
- the projected time for 5.4M descriptions.

    .venv/bin/python bench/counts.py [--phrases 200000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vprom.mining.counts import parse_count, words_for
from vprom.mining.vocab import load_vocabulary, normalize

VG_REGIONS = 5_400_000


def phrases(n: int, rng: np.random.Generator, numbered: float) -> list[str]:
    vocab = load_vocabulary()
    nouns = sorted(vocab.objects | vocab.person_words)
    adjectives = sorted(vocab.object_attributes)
    preps = ["on", "in", "next to", "behind", "under", "with", "near", "holding"]
    numbers = ["two", "three", "5", "one", "ten", "12", "a 10 years old", "number 7",
               "five o'clock", "2-3", "one of the", "$5", "1990", "second"]
    out = []
    for _ in range(n):
        a, b = rng.choice(nouns, 2)
        adj = rng.choice(adjectives)
        prep = rng.choice(preps)
        if rng.random() < numbered:
            out.append(f"{rng.choice(numbers)} {adj} {a}s {prep} the {b}")
        else:
            out.append(f"a {adj} {a} {prep} the {b}")
    return out


def rate(fn, items) -> float:
    start = time.perf_counter()
    for item in items:
        fn(item)
    return len(items) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phrases", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    vocab = load_vocabulary()
    words = words_for(vocab)
    mix = phrases(args.phrases, rng, numbered=0.08)
    numbered = phrases(args.phrases // 10, rng, numbered=1.0)
    parse_count(mix[0])   # warm the word lists

    prefilter = words.prefilter.search
    r_prefilter = rate(lambda p: prefilter(p.lower()), mix)
    r_mix = rate(parse_count, mix)
    r_numbered = rate(parse_count, numbered)
    counted = sum(1 for p in numbered if (c := parse_count(p)) and c.count is not None)

    labels = [f"{w}s" if i % 3 == 0 else w.upper() if i % 3 == 1 else f" {w} "
              for i, w in enumerate(rng.choice(sorted(vocab.known), args.phrases))]
    r_canonical_warm = rate(vocab.canonical, labels)   # first pass fills the cache ...
    r_canonical_cached = rate(vocab.canonical, labels)  # ... which the miner then hits
    fresh = [f"{w} x{i}" for i, w in enumerate(labels[: args.phrases // 4])]
    normalize.cache_clear()
    r_canonical_fresh = rate(vocab.canonical, fresh)

    print(f"phrases: {len(mix)} mixed (8% numbered), {len(numbered)} numbered "
          f"({counted} of them counted)")
    print(f"prefilter only          {r_prefilter:12,.0f} phrases/s")
    print(f"parse_count, mix        {r_mix:12,.0f} phrases/s  "
          f"({r_prefilter / r_mix:.2f}x the prefilter cost)")
    print(f"parse_count, numbered   {r_numbered:12,.0f} phrases/s")
    print(f"canonical, cached       {r_canonical_cached:12,.0f} labels/s "
          f"(first pass {r_canonical_warm:,.0f})")
    print(f"canonical, fresh labels {r_canonical_fresh:12,.0f} labels/s")
    print(f"projected parse_count over VG's {VG_REGIONS:,} descriptions: "
          f"{VG_REGIONS / r_mix:.1f} s")


if __name__ == "__main__":
    main()
