"""A VLM export run through the real lmms-eval 0.7.3 from PyPI, as a user runs it: its own
CLI, its OpenAI-compatible chat model type (`--model openai`), against a stub chat-completions
server on 127.0.0.1 that answers from a fixed table (right, wrong, unparseable). The samples
file lmms-eval writes must hold the table's responses under each matrix id, and `vprom score`
must read the stub's table back from it exactly.

The stub knows a problem by its picture: lmms-eval sends each grid as a PNG of the decoded
JPEG, which the stub scales to 32x32 and matches to the nearest exported grid. lmms-eval's
venv is kept between runs under VPROM_TEST_VENVS (default ~/.cache/vprom-tests); it borrows
torch from the venv running the tests. lmms-eval 0.7.3 imports `filelock._api`, which
filelock 4 no longer has, hence the pin.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import threading
import venv
from base64 import b64decode
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from vprom.generation.export import export

from tests.generation.synthetic_build import synthetic_build  # noqa: F401 (fixture)
from vprom.app.api import score as score_predictions

pytestmark = pytest.mark.slow
REQUIREMENTS = ("lmms-eval==0.7.3", "filelock<4")
VENVS = Path(os.environ.get("VPROM_TEST_VENVS", Path.home() / ".cache" / "vprom-tests"))
MAX_REQUESTS = 100  # the stub's bound: lmms-eval retries a failed request up to 5 times


def lmms_eval_venv() -> Path:
    """A venv with lmms-eval 0.7.3, made once; skips only when the index cannot be reached.
    torch and its kin come from the test's own venv (its path is written again on every use,
    as the venv that made the cache may be gone), not downloaded again."""
    import torch

    env = VENVS / "lmms-eval-0.7.3"
    python = env / "bin" / "python"

    def borrow() -> None:
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True, check=True)
        (Path(site.stdout.strip()) / "borrowed.pth").write_text(
            str(Path(torch.__file__).parents[1]) + "\n")

    if (env / "bin" / "lmms-eval").exists():
        borrow()
        if subprocess.run([python, "-c", "import lmms_eval, filelock._api, numpy, torch"],
                          capture_output=True, check=False).returncode == 0:
            return env
    venv.create(env, with_pip=True, clear=True)
    borrow()
    pip = subprocess.run([python, "-m", "pip", "install", "-q", *REQUIREMENTS],
                         capture_output=True, text=True, timeout=1800, check=False)
    if pip.returncode != 0:
        said = pip.stderr.strip().splitlines()[-1:] or ["no output"]
        if any(w in said[0] for w in ("No matching distribution", "connection", "resolve")):
            pytest.skip(f"lmms-eval cannot be installed from the package index: {said[0]}")
        pytest.fail(f"pip install {' '.join(REQUIREMENTS)} failed: {pip.stderr[-2000:]}")
    return env


def thumbnail(im: Image.Image) -> np.ndarray:
    return np.asarray(im.convert("RGB").resize((32, 32), Image.Resampling.BILINEAR), dtype=float)


class Stub(BaseHTTPRequestHandler):
    """Chat completions answered from `server.answers` for the nearest `server.pictures`."""

    def do_POST(self) -> None:
        server = self.server
        server.requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        urls = [c["image_url"]["url"] for m in body["messages"] if isinstance(m["content"], list)
                for c in m["content"] if c.get("type") == "image_url"]
        matrix_id = None
        if len(urls) == 1 and server.requests <= MAX_REQUESTS:
            seen = thumbnail(Image.open(io.BytesIO(b64decode(urls[0].split(",", 1)[1]))))
            distance, matrix_id = min((np.abs(seen - t).mean(), i)
                                      for i, t in server.pictures.items())
            matrix_id = matrix_id if distance < 3 else None
        if matrix_id is None:
            self.send_error(400, "no single known picture in the request")
            return
        server.asked.append(matrix_id)
        out = json.dumps({"id": f"stub-{server.requests}", "object": "chat.completion",
                          "created": 0, "model": body.get("model", "stub"),
                          "choices": [{"index": 0, "finish_reason": "stop", "message": {
                              "role": "assistant", "content": server.answers[matrix_id]}}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                    "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args) -> None:
        pass


def answer_table(rows: list[dict]) -> dict[int, str]:
    """Per matrix id: right (as "Answer: X"), wrong (as "(Y)") or unparseable, in turn."""
    table = {}
    for k, row in enumerate(sorted(rows, key=lambda r: r["matrix_id"])):
        right = row["answer"]
        wrong = "ABCDEFGH"[("ABCDEFGH".index(right) + 3) % 8]
        table[row["matrix_id"]] = (f"Answer: {right}", f"({wrong})", "I cannot tell.")[k % 3]
    return table


def test_lmms_eval_runs_the_export_against_a_chat_server(synthetic_build, tmp_path):
    env = lmms_eval_venv()
    dataset, vg = synthetic_build
    summary = export(dataset, "vlm", tmp_path / "vlm", vg_dir=vg, limit=20, seed=3)
    [shard] = (tmp_path / "vlm" / "lmms_eval" / "data").glob("*.parquet")
    rows = pq.read_table(shard).to_pylist()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    server.requests, server.asked, server.answers = 0, [], answer_table(rows)
    server.pictures = {r["matrix_id"]: thumbnail(Image.open(io.BytesIO(r["image"]["bytes"])))
                       for r in rows}
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run = subprocess.run(
            [env / "bin" / "lmms-eval", "--model", "openai", "--model_args",
             f"model=stub,base_url=http://127.0.0.1:{server.server_port}/v1,timeout=300,"
             "num_concurrent=4",
             "--include_path", tmp_path / "vlm" / "lmms_eval", "--tasks",
             summary.counts["task"], "--log_samples", "--output_path", tmp_path / "results"],
            capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False,
            env={**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",
                                                                    "VIRTUAL_ENV")},
                 "OPENAI_API_KEY": "stub", "HF_HOME": str(tmp_path / "hf"),
                 "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    finally:
        server.shutdown()
    samples = list((tmp_path / "results").rglob("*samples_*.jsonl"))
    assert run.returncode == 0 and len(samples) == 1, run.stdout[-3000:] + run.stderr[-3000:]
    lines = [json.loads(line) for line in samples[0].read_text().splitlines()]
    got = {line["vprom_accuracy"]["matrix_id"]: line for line in lines}
    assert set(server.asked) == set(got) == set(server.answers) and len(got) == 20
    for matrix_id, line in got.items():
        said = server.answers[matrix_id]
        record = line["vprom_accuracy"]
        assert record["response"] == said and said in json.dumps(line["filtered_resps"])
        assert record["correct"] == said.startswith("Answer:")
    results = json.loads(next((tmp_path / "results").rglob("*_results.json")).read_text())
    accuracy = results["results"][summary.counts["task"]]["vprom_accuracy,none"]
    assert accuracy == pytest.approx(sum(r["correct"] for r in
                                         (line["vprom_accuracy"] for line in lines)) / 20)
    # vprom score reads lmms-eval's samples file back: the stub's table, exactly
    metrics, _ = score_predictions(dataset, samples[0], out=tmp_path / "scored")
    said = list(server.answers.values())
    assert metrics["test"]["n"] == 20 and metrics["config"]["partial_sample"]
    assert metrics["test"]["correct"] == sum(a.startswith("Answer:") for a in said)
    assert metrics["config"]["unparsed"] == said.count("I cannot tell.")
