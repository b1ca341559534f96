"""The audit's cases 12-15 and the infinities stored as features (bench/fault_audit.py runs
them after its own): human-serve under abuse, interrupts, the smaller failures, and non-finite
features at extract and at every reader. Each runs the `vprom` command line in a fresh
process on the audit's temporary synthetic build.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np

from fault_audit import ENV, Work, _quote, both, fill, full_disk, one_line, registry, vprom
from tests.app.conftest import Served
from tests.app.test_errors import SWALLOWED_INTERRUPT
from tests.app.test_human import answer_body, get_session
from tests.app.test_human_server import _answers, _post
from tests.app.test_one_writer import held_elsewhere
from tests.dataset_fixture import build_records, write_dataset, write_images
from tests.features.test_finite import loud_weights, poisoned

CASES = []
case = registry(CASES)


# ---------------------------------------------------------------- 12: human-serve
class Server:
    """`vprom human-serve STUDY` on a free port, with a tiny HTTP client."""

    def __init__(self, study: Path, prefix: str = ""):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        command = f"{prefix} exec {_quote(sys.executable)} -m vprom human-serve " \
                  f"{_quote(str(study))} --port {self.port}"
        self.log = study.with_name(study.name + ".log")  # a file: a full pipe would stall it
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(["bash", "-c", command], env=ENV, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.2)
        raise RuntimeError("human-serve did not start")

    request = Served.request  # the tests' client: it needs only `port`

    def close(self) -> str:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        return self.log.read_text()


def served(w: Work, name: str, prefix: str = "") -> tuple[Server, Path]:
    study = w.root / "study"
    if not study.is_dir():
        status, _, err = vprom("human-study", w.dataset, "--vg", w.vg, "--out", study, "--n", 13)
        assert status == 0, err
    folder = w.root / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(study, folder)
    return Server(folder, prefix), folder


def error_line(reply: bytes) -> str | None:
    with contextlib.suppress(ValueError, KeyError, TypeError):
        return json.loads(reply)["error"] if reply.count(b"\n") <= 1 else None
    return None


@case("12 human-serve: malformed bodies (order with 'a', 60 KB of '[', a 5,000-digit rt_ms)",
      "400 with a one-line error each; the server goes on")
def malformed_bodies(w: Work):
    server, _ = served(w, "c12a")
    try:
        good = answer_body(get_session(server), 0, 2)
        bodies = [json.dumps({**good, "order": [0, 1, 2, 3, 4, 5, 6, "a"]}).encode(),
                  b"[" * 60_000,
                  json.dumps(good).replace("1234.5", "9" * 5_000).encode()]
        codes = [server.request("POST", "/api/response", raw=b) for b in bodies]
        after = server.request("POST", "/api/response", good)[0]
    finally:
        log = server.close()
    ok = all(c == 400 and error_line(r) for c, r in codes) and after == 201
    return ok and "Traceback" not in log, f"replies {[c for c, _ in codes]}, then {after}"


@case("12 human-serve: a full disk (answers file on /dev/full)", "507, no path in the reply")
def serve_full_disk(w: Work):
    server, folder = served(w, "c12b")
    try:
        session = get_session(server)
        (folder / "responses" / "p1.jsonl").symlink_to("/dev/full")
        code, reply = server.request("POST", "/api/response", answer_body(session, 0, 3))
    finally:
        server.close()
    error = error_line(reply) or ""
    return code == 507 and "/" not in error, f"{code}: {error[:100]}"


@case("12 human-serve: an internal error (a broken answers file)", "500 with no server path")
def serve_internal_error(w: Work):
    server, folder = served(w, "c12c")
    try:
        (folder / "responses" / "p1.jsonl").write_text("{broken\n")
        code, reply = server.request("GET", "/api/session?participant=p1")
    finally:
        server.close()
    error = error_line(reply) or ""
    return code == 500 and "/" not in error and str(folder) not in reply.decode(), \
        f"{code}: {error[:100]}"


@case("12 human-serve under ulimit -n 256: 255 idle connections, then a participant",
      "the participant is served (idle connections are closed)")
def serve_idle(w: Work):
    server, _ = served(w, "c12d", prefix="ulimit -n 256;")
    sockets = []
    try:
        for _ in range(255):
            with contextlib.suppress(OSError):
                sockets.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        began = time.monotonic()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
            conn.request("GET", "/api/session?participant=p9")
            code = conn.getresponse().status
        except OSError as e:
            code = type(e).__name__
        took = time.monotonic() - began
    finally:
        for s in sockets:
            s.close()
        server.close()
    return code == 200, f"{code} after {took:.1f} s, {len(sockets)} idle connections"


@case("12 human-serve: 100 participants' 1,300 answers, 64 posted at a time",
      "every one answered 201 and recorded once")
def serve_classroom(w: Work):
    from collections import Counter
    from concurrent.futures import ThreadPoolExecutor

    server, folder = served(w, "c12e")
    try:
        bodies = _answers(folder, 100)  # each participant's first answer, then the others
        firsts, rest = [m[0] for m in bodies], [b for m in bodies for b in m[1:]]
        answers = firsts + rest

        def post(body):
            try:
                return _post(server.port, body)
            except OSError as e:
                return type(e).__name__

        with ThreadPoolExecutor(64) as pool:
            codes = Counter(pool.map(post, firsts)) + Counter(pool.map(post, rest))
    finally:
        server.close()
    lines = [x for p in (folder / "responses").glob("*.jsonl") for x in p.read_text().splitlines()]
    ok = codes == {201: len(answers)} and len(lines) == len(set(lines)) == len(answers)
    return ok, f"replies {dict(codes)}, {len(lines)} recorded"


# ---------------------------------------------------------------- 13-14: interrupts
@case("13 SIGTERM to build re-run in a finished build folder holding features/, then again",
      "exit 143, one line; the re-run ends 0 and keeps the stages and features/")
def build_with_features(w: Work):
    folder = w.build_copy("c13")
    (folder / "features").mkdir()
    (folder / "features" / "resnet101.h5").write_text("features of this build")
    log = folder.parent / "c13.out"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vprom", "build", "--synthetic", "--out",
                                 str(folder), "--workers", "2"], stdout=out,
                                stderr=subprocess.PIPE, text=True,
                                env={**ENV, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 300  # into the stage after the kept ones: verify
    while "[4/5]" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    stopped = one_line((proc.returncode, "", err), "interrupted (SIGTERM)", code=143)
    status, out, _ = vprom("build", "--synthetic", "--out", folder, "--workers", 2)
    kept = (folder / "features" / "resnet101.h5").read_text() == "features of this build"
    resumed = status == 0 and "[3/5] dataset: kept" in out and kept
    return stopped[0] and resumed, stopped[1] + f"; re-run exit {status}" + (
        ", stages and features/ kept" if resumed else "")


@case("14 SIGTERM (and Ctrl-C) landing in a finalizer", "exit 143 (130) and the one line")
def swallowed_interrupt(w: Work):
    results = []
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        proc = subprocess.Popen([sys.executable, "-c", SWALLOWED_INTERRUPT, "finalizer"],
                                env=ENV, cwd=w.root, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.readline()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        results.append(one_line((proc.returncode, "", err), "interrupted", code=code))
    return both(*results)


@case("extract --workers 3, SIGTERM to the whole group", "exit 143 and one line, no traceback")
def extract_group_sigterm(w: Work):
    folder = w.fresh("c14b")
    proc = subprocess.Popen([sys.executable, "-m", "vprom", "extract", str(w.dataset), "--vg",
                             str(w.vg), "--backbone", "resnet18", "--weights", "none",
                             "--input-size", "64", "--batch-size", "4", "--chunk-batches", "1",
                             "--workers", "3", "--out", "feats.h5"], cwd=folder, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(folder.glob("feats.h5.partial/chunk-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    return one_line((proc.returncode, "", err), "interrupted (SIGTERM)", code=143)


# ---------------------------------------------------------------- 15: the smaller ones
@case("15 two crops into one store", "the second is refused at once, naming the first's pid")
def crops_lock(w: Work):
    out = w.fresh("c15a") / "crops.h5"
    with held_elsewhere(out) as holder:
        return one_line(vprom("crops", w.dataset, "--vg", w.vg, "--size", 8, "--out", out),
                        str(holder.pid))


@case("15 evaluate a best.pt of another model's run", "refused in one line naming best.pt")
def evaluate_foreign(w: Work):
    run, other = w.run("c15b-run"), w.run("c15b-other", model="rn")
    shutil.copy(other / "best.pt", run / "best.pt")
    return one_line(vprom("evaluate", run, "--device", "cpu"), "best.pt", "not this run's")


@case("15 evaluate a best.pt of the wrong shape", "refused in one line naming the first key")
def evaluate_wrong_shape(w: Work):
    import torch

    run = w.run("c15c-run")
    state = torch.load(run / "best.pt", weights_only=True)
    key = next(iter(state["model"]))
    state["model"][key] = torch.zeros(3, 5)
    torch.save(state, run / "best.pt")
    return one_line(vprom("evaluate", run, "--device", "cpu"), "best.pt", key)


@case("15 train resuming from another run's last.pt, and from one of the wrong shape",
      "refused in one line each, naming last.pt")
def train_foreign_last(w: Work):
    import torch

    run, other = w.run("c15d-run"), w.run("c15d-other", model="rn")
    shutil.copy(other / "last.pt", run / "last.pt")
    longer = w.train_argv(run, epochs=2)
    foreign = one_line(vprom(*longer), "last.pt", "not this run's")
    shaped_run = w.run("c15d-run2")
    state = torch.load(shaped_run / "last.pt", weights_only=True)
    key = next(iter(state["model"]))
    state["model"][key] = torch.zeros(3, 5)
    torch.save(state, shaped_run / "last.pt")
    shaped = one_line(vprom(*w.train_argv(shaped_run, epochs=2)), "last.pt", key)
    return both(foreign, shaped)


@case("15 score a CSV with a 200 KB line, and one with matrix_id 2**80",
      "one line each naming the file")
def score_hostile_csv(w: Work):
    long = w.predictions("matrix_id,choice\n1," + "9" * 200_000 + "\n", "long.csv")
    huge = w.predictions(f"matrix_id,choice\n{2 ** 80},1\n", "huge.csv")
    return both(one_line(vprom("score", w.dataset, long), "long.csv"),
                one_line(vprom("score", w.dataset, huge), "huge.csv"))


def _all_predictions(w: Work, bom: bool = False) -> Path:
    from vprom.tables import read_matrix_table

    ids = np.sort(read_matrix_table(w.dataset).splits["neutral"]["test"])
    rows = "matrix_id,choice\n" + "".join(f"{i},0\n" for i in ids)
    return w.predictions(("\ufeff" if bom else "") + rows, "bom.csv" if bom else "all.csv")


@case("15 score --out metrics.json", "no absolute path in the file")
def score_absolute(w: Work):
    folder = w.fresh("c15f")
    status, _, err = vprom("score", w.dataset, _all_predictions(w), "--out", folder)
    out = folder / "metrics.json"
    absolute = re.findall(r'"(/[^"]*)"', out.read_text()) if out.exists() else ["(no file)"]
    return status == 0 and not absolute, f"exit {status}; absolute paths: {absolute[:2]}"


@case("15 score a UTF-8 CSV with a byte-order mark", "read like the same CSV without one")
def score_bom(w: Work):
    status, out, err = vprom("score", w.dataset, _all_predictions(w, bom=True))
    return status == 0, f"exit {status}: {(err.strip().splitlines() or [''])[-1][:120]}"


@case("15 verify --features on a features file holding NaN",
      "fails in one line naming the file and the count")
def verify_nan(w: Work):
    bad = w.fresh("c15h") / "nan.h5"
    shutil.copy(w.features, bad)
    with h5py.File(bad, "r+") as h5:
        h5["features"][0, :3] = np.nan
    status, out, err = vprom("verify", w.dataset, "--features", bad, "--workers", 1)
    said = "nan.h5" in out + err and "not finite" in (out + err).lower()
    return status == 1 and said, f"exit {status}: " + ((err or out).strip().splitlines()
                                                       or [""])[-1][:140]


@case("15 mine an objects.json of 100k nested '['", "refused in one line within 60 s")
def mine_nested(w: Work):
    vg = w.fresh("c15i") / "vg"
    shutil.copytree(w.vg, vg, ignore=shutil.ignore_patterns("VG_100K*"))
    (vg / "objects.json").write_text("[" * 100_000)
    began = time.monotonic()
    ok, text = one_line(vprom("mine", "--vg", vg, "--out", vg.parent / "pools.h5",
                              "--workers", 1, timeout=60), "objects.json")
    return ok and time.monotonic() - began < 60, text


@case("15 crops onto a full disk", "exit 1, one line 'no space left on the device'")
def crops_full_disk(w: Work):
    with full_disk(w, "c15j", "2m") as disk:
        fill(disk, 32 * 1024)
        return one_line(vprom("crops", w.dataset, "--vg", w.vg, "--size", 32, "--out",
                              disk / "crops.h5"), "no space left on the device")


@case("15 extract --workers 2 under ulimit -n 16 and 20", "one line each and no traceback")
def extract_low_fd(w: Work):
    results = []
    for files in (16, 20):
        out = w.fresh(f"c15k{files}") / "f.h5"
        status, _, err = vprom("extract", w.dataset, "--vg", w.vg, "--backbone", "resnet18",
                               "--weights", "none", "--input-size", 32, "--workers", 2,
                               "--out", out, shell_prefix=f"ulimit -n {files};", timeout=300)
        clean = "Traceback" not in err and "Exception" not in err and not out.exists()
        ok, text = one_line((status, "", err), "ulimit -n")
        results.append((ok and clean, text))
    return both(*results)


@case("15 merge two shards of different seeds", "refused in one line naming a shard file")
def merge_mismatch(w: Work):
    folder = w.fresh("c15l")
    for k, seed in ((0, 0), (1, 1)):
        status, _, err = vprom("generate", w.pools, "--out", folder / f"s{k}.h5", "--shard",
                               f"{k}/2", "--seed", seed, "--scale", 0.01, "--workers", 1)
        assert status == 0, err
    return one_line(vprom("merge", folder / "s0.h5", folder / "s1.h5", "--out",
                          folder / "d.h5"), "s1.h5")


# ---------------------------------------------------------------- ±inf stored as features
@case("inf: extract --pool none of a backbone with large activations at float16",
      "refused in one line naming the backbone and the largest value; no file")
def extract_overflow(w: Work):
    folder = w.fresh("inf1")
    weights = loud_weights(folder / "loud.pt")
    result = vprom("extract", w.dataset, "--vg", w.vg, "--backbone", "resnet18", "--weights",
                   weights, "--pool", "none", "--input-size", 64, "--out", folder / "maps.h5")
    ok, text = one_line(result, "resnet18", "float32")
    return ok and not (folder / "maps.h5").exists(), text


@case("inf: a features file holding inf, read by train, verify and export savir-t",
      "each refuses in one line naming the file")
def readers_refuse_inf(w: Work):
    folder = w.fresh("inf2")
    bad = folder / "inf.h5"
    shutil.copy(w.features, bad)
    with h5py.File(bad, "r+") as h5:
        h5["features"][1, :2] = np.inf
    crops, matrices = build_records(1, seed=3)  # the tests' small data set: maps in seconds
    small = write_dataset(folder / "small.h5", crops, matrices)
    maps = folder / "maps.h5"
    status, _, err = vprom("extract", small, "--vg", write_images(folder / "vg", crops),
                           "--backbone", "resnet18", "--weights", "none", "--input-size", 32,
                           "--pool", "none", "--out", maps)
    assert status == 0, err
    train = one_line(vprom("train", w.dataset, "--features", bad, "--model", "mlp-sum-2",
                           "--split", "neutral", "--epochs", 1, "--device", "cpu", "--out",
                           folder / "run"), "inf.h5")
    verified = one_line(vprom("verify", w.dataset, "--features", bad, "--workers", 1),
                        "inf.h5", "not finite")
    export = one_line(vprom("export", small, "--format", "savir-t", "--features",
                            poisoned(maps, folder / "inf-maps.h5", "maps"), "--out",
                            folder / "savir"), "inf-maps.h5", "not finite")
    return both(train, verified, export)


