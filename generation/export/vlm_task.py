"""The lmms-eval hooks of a V-PROM task folder (`vprom export --format vlm`).

`vprom export` copies this file beside the task YAML as `vprom_hooks.py`; lmms-eval imports
it from there (`!function vprom_hooks.process_results`), in its own environment, so it
imports nothing of vprom. Each Parquet row (a "doc") holds `matrix_id`, `question` (the
prompt text), `answer` (a letter A-H), `relation`, `element_type` and the layout's images:
`image` (grid), `images` (panels, 16) or none (text).

`extract_letter` reads one answer letter from free text. In order:
1. a JSON object with an "answer" key: its value;
2. explicit statements, "answer is C", "Answer: (C)", "correct answer is: C" (any case):
   the letter they name, if they all name the same one;
3. a response that opens with a letter, "C", "(C)", "C." or "C) because ...", and names
   no other letter A-H standing alone on its first line; a lower-case letter only when it
   is the whole response ("c"), as "a" is also a word.
Anything else (empty, "A or B", no letter) is unparsed: None, which counts as wrong.
"""

from __future__ import annotations

import json
import logging
import re

LETTERS = "ABCDEFGH"
STATED = re.compile(r"(?i:answer)(?:\W{0,4}(?i:is))?\W{0,4}"
                    r"([A-H](?![A-Za-z])|[a-h](?=\W*$|[\)\]]))")
OPENING = re.compile(r"^\s*[\(\[*\"']*([A-H])[\)\]*\"']*(?=$|[\s.,:;!])")
ALONE = re.compile(r"(?<![A-Za-z'])([A-H])(?![A-Za-z'])(?!\s+[a-z])")  # not "A dog"
BARE = re.compile(r"^\s*[\(\[]?([a-h])[\)\]]?[.!]?\s*$")


def doc_to_visual(doc: dict, lmms_eval_specific_kwargs=None) -> list:
    """The problem's images in the prompt's order: the fused grid, the 16 panels or none."""
    if doc.get("image") is not None:
        return [doc["image"].convert("RGB")]
    return [im.convert("RGB") for im in doc.get("images") or []]


def doc_to_text(doc: dict, lmms_eval_specific_kwargs=None) -> str:
    return doc["question"]


def extract_letter(response) -> str | None:
    """The letter A-H a free-text response chooses, or None when it names none or several."""
    text = str(response or "").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            stated = json.loads(text).get("answer")
        except (ValueError, AttributeError):
            stated = None
        if stated is not None:
            return extract_letter(stated)
    named = {m.upper() for m in STATED.findall(text)}
    if named:
        return named.pop() if len(named) == 1 else None
    bare = BARE.match(text)
    if bare:
        return bare[1].upper()
    opening = OPENING.match(text)
    first_line = text.splitlines()[0]
    if opening and set(ALONE.findall(first_line)) <= {opening[1]}:
        return opening[1]
    return None


def process_results(doc: dict, results: list) -> dict:
    """One metric whose per-sample value keeps what `vprom score` and the breakdown need."""
    response = results[0]
    return {"vprom_accuracy": {"matrix_id": int(doc["matrix_id"]), "response": response,
                               "correct": extract_letter(response) == doc["answer"],
                               "relation": doc["relation"],
                               "element_type": doc["element_type"]}}


def aggregate(items: list[dict]) -> float:
    """Accuracy over all samples; the accuracy per relation x element type is logged."""
    cells: dict[tuple[str, str], list[bool]] = {}
    for item in items:
        cells.setdefault((item["relation"], item["element_type"]), []).append(item["correct"])
    for (relation, element_type), hits in sorted(cells.items()):
        logging.getLogger("vprom").warning("vprom %s x %s: %.3f of %d", relation,
                                           element_type, sum(hits) / len(hits), len(hits))
    return sum(bool(item["correct"]) for item in items) / max(len(items), 1)
