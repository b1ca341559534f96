"""`vprom score` on what vision-language model harnesses write back: lmms-eval's samples,
VLMEvalKit's predictions, plain response lines; the letter read out of free text; the unparsed
rate, the letters' entropy, partial samples and the baselines printed beside the score."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from vprom.app.answers import LETTERS, UNPARSED, extract_letter, read_predictions
from vprom.app.api import score as score_predictions
from vprom.app.cli import main
from vprom.errors import VpromError
from vprom.tables import read_matrix_table

PARSED = [
    ("C", "C"), ("(C)", "C"), ("c", "C"), ("C.", "C"), ("**C**", "C"), ("[C]", "C"),
    ("Answer: C", "C"), ("answer: c", "C"), ("ANSWER: (c)", "C"),
    ("the answer is C.", "C"), ("The correct answer is (F) because each row repeats.", "F"),
    ('{"answer": "C"}', "C"), ("{'answer': 'b'}", "B"),
    ('```json\n{"answer": "H", "reason": "the count rises by one"}\n```', "H"),
    ('{"reasoning": "options A and B break the rule", "answer": "E"}', "E"),
    ("C. The third row repeats the colour of the first two.", "C"),
    ("C\n\nThe first row shows three dogs, so the last panel needs three.", "C"),
    ("C - the colour repeats along each row", "C"), ("B) two red cars", "B"),
    ("A. a red car", "A"), ("Final answer: \\boxed{E}", "E"), ("The answer is option G", "G"),
    ("Answer: A\nExplanation: options B and C break the row rule.", "A"),
    ("The answer is C, not B.", "C"), ("I choose G.", "G"), ("Option B", "B"),
    ("Among the options, D completes the pattern.", "D"),
    ("<think>Maybe A. Or B? The rows share an object.</think>\nAnswer: D", "D"),
    ("C. So the answer is C.", "C"),
]
UNPARSEABLE = [
    "", "   ", None, "I cannot tell", "A or B", "A/B", "A, B", "(A) or (B)",
    "The answer is A or B.", "The answer is either A or B.", "A cat sits on the mat.",
    "The answer is a cat.", "answer is a bit unclear", "I cannot pick a single answer.",
    "I think the answer is A. On reflection, the answer is B.", "A. No wait, the answer is B.",
    "Answer: J", "Answer: 3", "None of the candidates fits.", "Failed to obtain answer via API.",
]


@pytest.mark.parametrize("response, letter", PARSED)
def test_a_stated_letter_is_read_from_free_text(response, letter):
    assert extract_letter(response) == LETTERS.index(letter)


@pytest.mark.parametrize("response", UNPARSEABLE)
def test_an_ambiguous_empty_or_missing_letter_is_unparsed(response):
    assert extract_letter(response) == UNPARSED


@pytest.fixture
def problems(tiny_pair):
    dataset, _ = tiny_pair
    table = read_matrix_table(dataset)
    test = np.sort(table.splits["neutral"]["test"])
    return dataset, test, table.answer[np.searchsorted(table.id, test)].astype(int)


def answers_table(test, answers):
    """A fixed table of responses over the test problems: right, wrong and unparseable, each
    with the letter meant (None: unparseable) and whether it is right."""
    rows = []
    for n, (matrix_id, answer) in enumerate(zip(test.tolist(), answers.tolist())):
        kind = n % 4
        letter = LETTERS[answer] if kind in (0, 1) else LETTERS[(answer + 1) % 8]
        response = {0: f"Answer: {letter}", 1: f"({letter.lower()}) the row repeats",
                    2: f"The answer is {letter}.", 3: "I cannot tell from these pictures."}[kind]
        rows.append((matrix_id, response, None if kind == 3 else letter, kind in (0, 1)))
    return rows


def check_scored(metrics, rows, n_test):
    config = metrics["config"]
    assert metrics["test"]["n"] == len(rows) and config["test_problems"] == n_test
    assert metrics["test"]["correct"] == sum(right for *_, right in rows)
    assert config["unparsed"] == sum(letter is None for _, _, letter, _ in rows)
    chosen = [letter for _, _, letter, _ in rows if letter]
    assert config["letters"] == {k: chosen.count(k) for k in LETTERS}


def lmms_eval_line(doc_id, matrix_id, response, raw=None):
    """One line of lmms-eval 0.7.3's `<date>_samples_<task>.jsonl`, as
    `EvaluationTracker.save_results_samples` writes it: the logged sample of
    `evaluator._process_document_results` (doc_id, doc, target, arguments, resps,
    filtered_resps, token_counts, doc_hash, then what process_results returned), with
    `input` added, `arguments` and `doc` popped, a one-request `filtered_resps` flattened to
    its string and `resps` dropped when it equals it (kept, raw, when reasoning tags were
    stripped), and `target` as a string."""
    sample = {"doc_id": doc_id, "target": "C"}
    if raw is not None:
        sample["resps"] = raw
    sample.update({"filtered_resps": response, "token_counts": [None], "doc_hash": "9f2c",
                   "vprom_accuracy": {"matrix_id": matrix_id, "response": response,
                                      "correct": False, "relation": "and",
                                      "element_type": "object"},
                   "input": "The image shows a 3x3 matrix ... Answer with one letter."})
    return json.dumps(sample, ensure_ascii=False)


def test_lmms_eval_samples_are_scored_from_their_filtered_responses(problems, tmp_path):
    dataset, test, answers = problems
    rows = answers_table(test, answers)
    lines = [lmms_eval_line(n, m, r, raw=f"<think>A or B?</think>{r}" if n == 1 else None)
             for n, (m, r, _, _) in enumerate(rows)]
    path = tmp_path / "20250101_120000_samples_vprom.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    metrics, _ = score_predictions(dataset, path, out=tmp_path / "o")
    check_scored(metrics, rows, len(test))
    assert metrics["config"]["format"] == "lmms-eval"
    assert not metrics["config"]["partial_sample"]
    written = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert written["config"]["unparsed_rate"] == pytest.approx(len(test[3::4]) / len(test))


def test_lmms_eval_lines_that_log_the_doc_give_its_matrix_id(tmp_path):
    line = {"doc_id": 0, "doc": {"matrix_id": 17}, "target": "C", "resps": [["(b)"]],
            "filtered_resps": ["B"]}
    path = tmp_path / "samples_vprom.jsonl"
    path.write_text(json.dumps(line) + "\n")
    found = read_predictions(path)
    assert found.matrix_id.tolist() == [17] and found.choice.tolist() == [1]


@pytest.mark.parametrize("line, message", [
    ({"doc_id": 0, "filtered_resps": "C"},
     "line 1: no matrix_id; each line needs vprom_accuracy.matrix_id"),
    ({"doc_id": 0, "filtered_resps": ["A", "B"], "vprom_accuracy": {"matrix_id": 3}},
     "line 1: 2 responses to one problem"),
])
def test_lmms_eval_lines_without_an_id_or_with_several_responses_are_refused(tmp_path, line,
                                                                              message):
    path = tmp_path / "samples_vprom.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(VpromError, match=message):
        read_predictions(path)


#: VLMEvalKit's prediction file for an MCQ data set (`vlmeval/inference.py`): the data set's
#: TSV rows (the custom MCQ schema) without `image`, with `prediction` added; written by
#: `vlmeval.smp.dump` as <model>_<dataset>.xlsx (the default), .tsv (pandas' to_csv, tab,
#: QUOTE_ALL) or .json (a list of records) as PRED_FORMAT says.
VLMEVALKIT_COLUMNS = ["index", "question", *LETTERS, "answer", "category", "l2-category",
                      "prediction"]


def vlmevalkit_records(rows, answers):
    return [{"index": m, "question": "Which candidate completes the matrix?",
             **{k: f"Candidate {k}" for k in LETTERS}, "answer": LETTERS[a],
             "category": "and", "l2-category": "object", "prediction": r}
            for (m, r, _, _), a in zip(rows, answers)]


def write_vlmevalkit(path, records):
    if path.suffix == ".xlsx":
        openpyxl = pytest.importorskip("openpyxl")
        book = openpyxl.Workbook()
        book.active.append(VLMEVALKIT_COLUMNS)
        for record in records:
            book.active.append([record[k] for k in VLMEVALKIT_COLUMNS])
        book.save(path)
    elif path.suffix == ".tsv":
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_ALL)
            writer.writerow(VLMEVALKIT_COLUMNS)
            writer.writerows([record[k] for k in VLMEVALKIT_COLUMNS] for record in records)
    else:
        path.write_text(json.dumps(records, indent=4, ensure_ascii=False), encoding="utf-8")


@pytest.mark.parametrize("suffix", [".xlsx", ".tsv", ".json"])
def test_vlmevalkit_predictions_are_scored(problems, tmp_path, suffix):
    dataset, test, answers = problems
    rows = answers_table(test, answers)
    rows[2] = (rows[2][0], "Looking at each row:\nthe colours repeat.\nAnswer: " +
               LETTERS[(answers[2] + 1) % 8], LETTERS[(answers[2] + 1) % 8], False)
    path = tmp_path / f"qwen2-vl_VPROM{suffix}"
    write_vlmevalkit(path, vlmevalkit_records(rows, answers))
    metrics, _ = score_predictions(dataset, path, out=tmp_path / "o")
    check_scored(metrics, rows, len(test))
    assert metrics["config"]["format"] == "vlmevalkit"


def test_a_vlmevalkit_file_without_its_columns_is_refused(tmp_path):
    path = tmp_path / "m_VPROM.tsv"
    path.write_text('"index"\t"question"\t"answer"\n"1"\t"q"\t"C"\n')
    with pytest.raises(VpromError, match="has a header row with the columns index and "
                                         "prediction; found index, question, answer"):
        read_predictions(path)


def test_a_damaged_xlsx_is_one_line(tmp_path):
    pytest.importorskip("openpyxl")
    path = tmp_path / "m_VPROM.xlsx"
    path.write_bytes(b"PK\x03\x04 not a workbook")
    with pytest.raises(VpromError, match="not a readable .xlsx file"):
        read_predictions(path)


def test_response_lines_of_a_partial_sample_are_scored_and_said_so(problems, tmp_path,
                                                                    capsys):
    dataset, test, answers = problems
    rows = answers_table(test, answers)[::3]  # a --limit export's sample
    path = tmp_path / "mine" / "responses.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"matrix_id": m, "response": r}) + "\n"
                            for m, r, _, _ in rows))
    assert main(["score", str(dataset), str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    metrics = json.loads((tmp_path / "mine" / "metrics.json").read_text())
    check_scored(metrics, rows, len(test))
    assert metrics["config"]["partial_sample"] and metrics["config"]["format"] == "response"
    assert f"(response; {len(rows)} of {len(test)} test problems scored: a partial sample" \
           in lines[0]
    unparsed = sum(letter is None for _, _, letter, _ in rows)
    assert lines[2].startswith(f"unparsed {unparsed} of {len(rows)} "
                               f"({100 * unparsed / len(rows):.1f}%, scored wrong)")


def test_the_letters_entropy_shows_a_model_that_always_says_one_letter(problems, tmp_path):
    dataset, test, _ = problems
    test = test[:len(test) // 8 * 8]
    for name, letters, bits in (("always-a", ["A"] * len(test), 0.0),
                                ("even", [LETTERS[n % 8] for n in range(len(test))], 3.0)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"matrix_id": int(m), "response": k}) + "\n"
                                for m, k in zip(test, letters)))
        metrics, _ = score_predictions(dataset, path, out=tmp_path / name)
        assert metrics["config"]["letter_entropy_bits"] == pytest.approx(bits)


def test_baselines_of_the_same_split_are_printed_beside_the_score(problems, tmp_path, capsys):
    from vprom.baselines.report import report

    dataset, test, answers = problems
    baseline = tmp_path / "rn"
    baseline.mkdir()
    right = [int(a) if n % 2 else 0 for n, a in enumerate(answers)]
    (baseline / "p.jsonl").write_text("".join(json.dumps({"matrix_id": int(m), "choice": c})
                                              + "\n" for m, c in zip(test, right)))
    first, _ = score_predictions(dataset, baseline / "p.jsonl", model="rn")
    report([baseline], tmp_path / "report")
    path = tmp_path / "vlm" / "responses.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"matrix_id": int(m), "response": "A"}) + "\n"
                            for m in test))
    # the paper's name of the model, as `vprom report` shows it
    expected = f"baseline RN own: {100 * first['test']['accuracy']:.1f}% on {len(test)} test"
    for given in (baseline, tmp_path, tmp_path / "report"):
        assert main(["score", str(dataset), str(path), "--baselines", str(given)]) == 0
        assert expected in capsys.readouterr().out.splitlines()[3]
