"""The lmms-eval hooks of a V-PROM task folder: `vprom export --format vlm` copies this file
beside the task YAML as `vprom_hooks.py`, which lmms-eval imports in its own environment, so
it imports nothing of vprom. A Parquet row (a "doc") holds `matrix_id`, `question`, `answer`
(a letter A-H: candidates 0-7), `relation`, `element_type` and `image` (grid), `images`
(panels, 16) or none (text). `extract_letter` (also `vprom score`'s) reads the answer out of
free text by the rules of docs/vlm.md, "Reading the letter"; what it cannot read is UNPARSED.
"""

from __future__ import annotations

import logging
import re

LETTERS = "ABCDEFGH"
UNPARSED = -1

# Written here: the harnesses' own extractors (VLMEvalKit's can_infer, each lmms-eval task's
# regexes) differ from one another and need those packages installed to import.
_OPEN = r"""(?:\\boxed\{|[(\[*"'`])*"""
_LETTER = r"""([A-H](?![A-Za-z0-9])|[a-h](?=$|[.,:;!?)\]}*"'`\n]))"""
_FILLER = r"(?:[^A-Za-z0-9\n]|\b(?i:is|be|would|should|must|will|the|my|option|letter|boxed)\b)"
_LEADING = re.compile(r"\s*" + _OPEN + r"""([A-Ha-h])(?:[)\]}*"'`]+|(?=\s*$|\s*\n|[.:,;]|"""
                      r"\s+[-–—]))")
_ANSWER = re.compile(r"(?i:\banswers?\b)" + _FILLER + "{0,12}?" + _LETTER)
_NAMED = re.compile(r"(?i:\b(?:choose|chose|pick|picked|select|selected|option|choice|"
                    r"candidate)s?\b)" + _FILLER + "{0,12}?" + _LETTER)
_ALTERNATIVE = re.compile(r"\s*(?:,|/|(?i:or|and)|,\s*(?i:or|and))\s*" + _OPEN +
                          r"([A-Ha-h])(?![A-Za-z0-9])")


def _offered(text: str, matches) -> set[str]:
    """The letters of `matches`, with any letter joined to one by "or", "and", "/" or ","."""
    letters = set()
    for match in matches:
        letters.add(match[1].upper())
        alternative = _ALTERNATIVE.match(text, match.end())
        if alternative:
            letters.add(alternative[1].upper())
    return letters


def extract_letter(response) -> int:
    """The candidate 0..7 a free-text answer gives, or UNPARSED (rules: docs/vlm.md)."""
    text = str(response or "").rsplit("</think>", 1)[-1]
    leading = [match for match in [_LEADING.match(text)] if match]
    for letters in (_offered(text, [*leading, *_ANSWER.finditer(text)]),
                    _offered(text, _NAMED.finditer(text))):
        if letters:
            return LETTERS.index(letters.pop()) if len(letters) == 1 else UNPARSED
    return UNPARSED


def doc_to_visual(doc: dict, lmms_eval_specific_kwargs=None) -> list:
    """The problem's images in the prompt's order: the fused grid, the 16 panels or none."""
    if doc.get("image") is not None:
        return [doc["image"].convert("RGB")]
    return [im.convert("RGB") for im in doc.get("images") or []]


def doc_to_text(doc: dict, lmms_eval_specific_kwargs=None) -> str:
    return doc["question"]


def process_results(doc: dict, results: list) -> dict:
    """One metric whose per-sample value keeps what `vprom score` and the breakdown need."""
    response = results[0]
    return {"vprom_accuracy": {"matrix_id": int(doc["matrix_id"]), "response": response,
                               "correct": extract_letter(response) == LETTERS.index(doc["answer"]),
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
