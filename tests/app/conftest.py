"""Fixtures shared with other test folders: the tiny run data of the baselines' tests (for
`vprom score`) and the synthetic build (for the worked example); and a human study, served."""

import http.client
import json
import shutil
import threading
from pathlib import Path

import pytest

from tests.baselines.conftest import tiny_pair  # noqa: F401
from tests.dataset_fixture import build_records, write_dataset, write_images
from tests.generation.synthetic_build import synthetic_build  # noqa: F401
from vprom.app.api import human_study
from vprom.app.human.server import make_server


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """A small DATASET.h5 (every relation x element type) with its VG images."""
    root = tmp_path_factory.mktemp("human")
    crops, matrices = build_records(n_per_relation=6, seed=3)
    return write_dataset(root / "d.h5", crops, matrices), write_images(root / "vg", crops)


@pytest.fixture(scope="module")
def study(built, tmp_path_factory) -> Path:
    dataset, vg = built
    out = tmp_path_factory.mktemp("studies") / "study"
    human_study(dataset, vg, out, split="neutral", part="test", n=13, seed=1)
    return out


class Served:
    """A study served on a free 127.0.0.1 port in a thread, with a tiny HTTP client."""

    def __init__(self, folder: Path):
        self.server = make_server(folder, "127.0.0.1", 0, verbose=False)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def request(self, method: str, path: str, body=None, raw: bytes | None = None,
                headers=None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json"} if method == "POST" else {}
        conn.request(method, path, body=data, headers={**sent, **(headers or {})})
        reply = conn.getresponse()
        out = reply.status, reply.read()
        conn.close()
        return out

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served(study, tmp_path):
    folder = tmp_path / "study"  # a fresh copy per test: responses start empty
    shutil.copytree(study, folder)
    s = Served(folder)
    yield s, folder
    s.close()
