"""The files of a VLM export, a chunk of problems at a time. `lmms_eval/` (for --include_path):
`<task>.yaml` in lmms-eval 0.7.3's `TaskConfig` keys (Parquet `data_files` absolute, as
`datasets` resolves them from the working directory), `vprom_hooks.py` (a copy of `vlm_task`),
`data/<part>-NNNNN.parquet`. `vlmevalkit/<TASK>.tsv`: the custom MCQ TSV VLMEvalKit reads with
`pandas.read_csv(sep="\\t")`; `image` is base64 JPEG (panels: a list literal of 16).
"""

from __future__ import annotations

import base64
import csv
import io
import shutil
from pathlib import Path

import vprom.generation.export.vlm_task as hooks
from vprom.generation.export.hf import INT, STRING, write_table

HOOKS = "vprom_hooks"
LETTERS = hooks.LETTERS
IMAGE = {"_type": "Image"}
TSV_COLUMNS = ("index", "question", *LETTERS, "answer", "category", "l2-category",
               "super_attribute")
TASK_YAML = """\
# V-PROM for lmms-eval, written by `vprom export --format vlm`: split {split}, part {part},
# layout {layout}. Run: lmms-eval --include_path {folder} --tasks {task} ...
task: {task}
dataset_path: parquet
dataset_kwargs:
  data_files:
    {part}: {data}
test_split: {part}
output_type: generate_until
doc_to_visual: !function {hooks}.doc_to_visual
doc_to_text: !function {hooks}.doc_to_text
doc_to_target: answer
generation_kwargs:
  max_new_tokens: 256
  temperature: 0
  do_sample: false
process_results: !function {hooks}.process_results
metric_list:
  - metric: vprom_accuracy
    aggregation: !function {hooks}.aggregate
    higher_is_better: true
metadata:
  version: 1.0
"""


def tsv_cells(values) -> str:
    """Tab-separated cells, quoted as pandas reads them. Callers append the base64 image cell
    unquoted: `csv.writer` scanning ~150 KB of it costs more than rendering the picture."""
    buffer = io.StringIO()
    csv.writer(buffer, delimiter="\t", lineterminator="\n").writerow(values)
    return buffer.getvalue()[:-1]  # the terminator: a cell holding it is quoted


def features(layout: str) -> dict:
    pictures = {"grid": {"image": IMAGE}, "panels": {"images": [IMAGE]}}.get(layout, {})
    return {"matrix_id": INT, "question": STRING, "answer": STRING, "relation": STRING,
            "element_type": STRING, "super_attribute": STRING, **pictures}


class VlmWriter:
    """Fills `tmp`, the export folder renamed to `final` when complete."""

    def __init__(self, tmp: Path, final: Path, task: str, options) -> None:
        self.tmp, self.task, self.options, self.shards = tmp, task, options, 0
        data = tmp / "lmms_eval" / "data"
        data.mkdir(parents=True)
        shutil.copyfile(hooks.__file__, tmp / "lmms_eval" / f"{HOOKS}.py")
        (tmp / "lmms_eval" / f"{task}.yaml").write_text(TASK_YAML.format(
            split=options.split, part=options.part, layout=options.layout, task=task,
            folder=final / "lmms_eval", hooks=HOOKS,
            data=final / "lmms_eval" / "data" / f"{options.part}-*.parquet"), encoding="utf-8")
        (tmp / "vlmevalkit").mkdir()
        self.tsv_path = tmp / "vlmevalkit" / f"{task.upper()}.tsv"
        # open across `add` calls, one chunk at a time; `close` ends it
        self.tsv = open(self.tsv_path, "w", encoding="utf-8", newline="")  # noqa: SIM115
        pictured = options.layout != "text"
        self.tsv.write(tsv_cells(TSV_COLUMNS) + ("\timage" if pictured else "") + "\n")

    def add(self, problems: list[dict]) -> None:
        """Write one chunk of `vlm.problem_records`."""
        layout = self.options.layout
        columns = {k: [p[k] for p in problems] for k in features("text")}
        if layout == "grid":
            columns["image"] = [{"bytes": p["picture"], "path": f"{p['matrix_id']}.jpg"}
                                for p in problems]
        elif layout == "panels":
            columns["images"] = [[{"bytes": b, "path": f"{p['matrix_id']}-{k + 1}.jpg"}
                                  for k, b in enumerate(p["picture"])] for p in problems]
        write_table(self.tmp / "lmms_eval" / "data" / f"{self.options.part}-"
                    f"{self.shards:05d}.parquet", columns, features(layout))
        self.shards += 1
        for p in problems:
            cells = tsv_cells([p["matrix_id"], p["question"], *p["options"], p["answer"],
                               p["relation"], p["element_type"], p["super_attribute"]])
            if layout == "grid":
                cells += "\t" + base64.b64encode(p["picture"]).decode("ascii")
            elif layout == "panels":
                cells += "\t" + str([base64.b64encode(b).decode("ascii") for b in p["picture"]])
            self.tsv.write(cells + "\n")

    def close(self) -> dict:
        self.tsv.close()
        return {"task": self.task, "shards": self.shards,
                "tsv": str(self.tsv_path.relative_to(self.tmp))}
