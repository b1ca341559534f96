"""`vprom human-serve` under abuse and load: every malformed body gets one 4xx line and the
server goes on; a full disk gets 507; an internal error gets an id, never a path; idle
connections are closed, so they cannot lock participants out; a classroom answering at once
is queued, and every answer is recorded."""

from __future__ import annotations

import http.client
import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.app.test_human import answer_body, get_session
from vprom.app.human.server import Study, make_server

linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux sockets")


def one_line_error(reply: bytes) -> str:
    assert reply.count(b"\n") <= 1, reply
    return json.loads(reply)["error"]


def _nested(body: dict) -> tuple[bytes, dict]:
    return b"[" * 60_000, {}


def _long_number(body: dict) -> tuple[bytes, dict]:
    return json.dumps(body).replace("1234.5", "9" * 5_000).encode(), {}


@pytest.mark.parametrize("make, status", [
    (lambda b: (json.dumps({**b, "order": [0, 1, 2, 3, 4, 5, 6, "a"]}).encode(), {}), 400),
    (lambda b: (json.dumps({**b, "order": [0, 1, 2, 3, 4, 5, 6, True]}).encode(), {}), 400),
    (_nested, 400),
    (_long_number, 400),
    (lambda b: (json.dumps(b).encode("utf-16"), {}), 400),  # JSON, but not UTF-8
    (lambda b: (b'{"participant": "\xff"}', {}), 400),
    (lambda b: (json.dumps(b).encode(), {"Content-Type": "text/plain"}), 415),
    (lambda b: (json.dumps(b).encode(), {"Content-Type": "application/x-www-form-urlencoded"}),
     415),
])
def test_every_malformed_body_gets_one_line_and_the_server_goes_on(served, make, status):
    s, folder = served
    session = get_session(s)
    raw, headers = make(answer_body(session, 0, 2))
    code, reply = s.request("POST", "/api/response", raw=raw, headers=headers)
    assert code == status and one_line_error(reply)
    assert not (folder / "responses" / "p1.jsonl").exists()
    assert s.request("POST", "/api/response", answer_body(session, 0, 2))[0] == 201


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_gets_507_and_the_answer_can_be_given_again(served):
    s, folder = served
    session = get_session(s)
    answers = folder / "responses" / "p1.jsonl"
    answers.symlink_to("/dev/full")  # every write there fails with ENOSPC, as on a full disk
    code, reply = s.request("POST", "/api/response", answer_body(session, 0, 3))
    error = one_line_error(reply)
    assert code == 507 and "no space" in error and str(folder) not in error
    answers.unlink()
    assert s.request("POST", "/api/response", answer_body(session, 0, 3))[0] == 201


def test_an_internal_error_shows_an_id_and_no_path(served, capsys):
    s, folder = served
    (folder / "responses" / "p1.jsonl").write_text("{broken\n")
    code, reply = s.request("GET", "/api/session?participant=p1")
    error = one_line_error(reply)
    assert code == 500 and "/" not in error and "p1.jsonl" not in error
    incident = re.fullmatch(r"internal error ([0-9a-f]{8}); .*", error)[1]
    log = capsys.readouterr().err
    assert incident in log and f"{folder / 'responses' / 'p1.jsonl'} line 1" in log


def _connect(port: int, n: int, within: float) -> tuple[list[socket.socket], int]:
    """`n` sockets connecting at once to the server, sending nothing; and how many of them
    were connected (accepted or queued by the server) within `within` seconds."""
    sockets, selector = [], selectors.DefaultSelector()
    for _ in range(n):
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", port))
        selector.register(sock, selectors.EVENT_WRITE)
        sockets.append(sock)
    connected, deadline = 0, time.monotonic() + within
    while connected < n and time.monotonic() < deadline:
        for key, _ in selector.select(0.1):
            selector.unregister(key.fileobj)
            connected += not key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    selector.close()
    return sockets, connected


SERVE_WITH_256_FILES = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from vprom.app.human.server import make_server
server = make_server(sys.argv[1], "127.0.0.1", 0, verbose=False, timeout=1)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@linux
def test_idle_connections_cannot_lock_participants_out(study, tmp_path):
    folder = tmp_path / "study"
    shutil.copytree(study, folder)
    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, "-c", SERVE_WITH_256_FILES, str(folder)],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)})
    idle = []
    try:
        port = int(server.stdout.readline())
        for k in range(255):  # as many connections as the server may open files, all silent
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            if k % 4 == 3:
                time.sleep(0.02)  # in step with the server's accepting, so each reaches it
        participant = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        participant.request("GET", "/api/session?participant=p1")
        assert participant.getresponse().status == 200
    finally:
        for sock in idle:
            sock.close()
        server.kill()
        server.wait()


def _post(port: int, body: dict) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("POST", "/api/response", body=json.dumps(body),
                       headers={"Content-Type": "application/json"})
    status = connection.getresponse().status
    connection.close()
    return status


def _answers(folder: Path, participants: int) -> list[list[dict]]:
    """Per participant, an answer (position 0) to each problem, in the order they see."""
    view = Study(folder)
    bodies = []
    for i in range(participants):
        order, shown = view.orders(f"c{i}")
        bodies.append([{"participant": f"c{i}", "problem": key, "position": 0,
                        "skipped": False, "rt_ms": 900, "order": shown[key]} for key in order])
    return bodies


@linux
def test_a_classroom_answering_at_once_is_queued_and_every_answer_kept(study, tmp_path):
    folder = tmp_path / "study"
    shutil.copytree(study, folder)
    answers = _answers(folder, 100)  # 100 participants x 12 problems = 1,200 answers
    server = make_server(folder, "127.0.0.1", 0, verbose=False)  # listening, not yet answering
    port = server.server_address[1]
    waiting = []
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    try:
        # a class connecting at once while the server is busy: every connection is queued
        waiting, connected = _connect(port, 100, within=2)
        assert connected == 100, f"only {connected} of 100 connections were queued"
        serving.start()
        replies = []
        for sock, mine in zip(waiting, answers):
            sock.setblocking(True)
            body = json.dumps(mine[0]).encode()
            sock.sendall(b"POST /api/response HTTP/1.0\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        for sock in waiting:
            sock.settimeout(60)
            replies.append(sock.makefile("rb").readline())
        assert all(line.startswith(b"HTTP/1.0 201") for line in replies), replies
        rest = [body for mine in answers for body in mine[1:12]]
        with ThreadPoolExecutor(64) as pool:  # 64 posts in flight at every moment
            statuses = list(pool.map(lambda body: _post(port, body), rest))
        assert statuses == [201] * len(rest)
        lines = [line for path in (folder / "responses").glob("*.jsonl")
                 for line in path.read_text().splitlines()]
        assert len(lines) == len(set(lines)) == 1200
    finally:
        for sock in waiting:
            sock.close()
        if serving.is_alive():
            server.shutdown()
        server.server_close()
