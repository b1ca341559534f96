"""The lmms-eval hooks a VLM export ships (`vprom_hooks.py`): the letter read from a free-text
answer, the per-sample record `vprom score` reads, and the accuracy."""

from __future__ import annotations

import pytest
from vprom.generation.export.vlm_task import (
    LETTERS,
    UNPARSED,
    aggregate,
    extract_letter,
    process_results,
)


@pytest.mark.parametrize("response, letter", [
    ("C", "C"), ("(C)", "C"), ("C.", "C"), ("Answer: C", "C"), ("the answer is C.", "C"),
    ('{"answer": "C"}', "C"), ("c", "C"), ("answer: (c)", "C"), ("**Answer:** H", "H"),
    ("C. The rows share a colour", "C"), ("C) because each row shows a dog", "C"),
    ("The correct answer is: B\nRow one repeats A's object.", "B"),
    ("", None), ("   ", None), ("A or B", None), ("The answer is a red car", None),
    ("The answer is C. No, the answer is D.", None), ("I cannot tell", None),
    ('{"answer": "Z"}', None), ("{not json", None), ("J", None), (None, None),
])
def test_extract_letter(response, letter):
    assert extract_letter(response) == (UNPARSED if letter is None else LETTERS.index(letter))


def test_process_results_keeps_what_score_reads():
    doc = {"matrix_id": 17, "answer": "D", "relation": "or", "element_type": "count"}
    assert process_results(doc, ["Answer: D"]) == {"vprom_accuracy": {
        "matrix_id": 17, "response": "Answer: D", "correct": True, "relation": "or",
        "element_type": "count"}}
    assert process_results(doc, ["A or D"])["vprom_accuracy"]["correct"] is False


def test_aggregate_is_the_accuracy():
    items = [{"relation": "and", "element_type": "object", "correct": c}
             for c in (True, True, False)] + [{"relation": "or", "element_type": "count",
                                               "correct": False}]
    assert aggregate(items) == 0.5
