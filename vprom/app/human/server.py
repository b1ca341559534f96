"""`vprom human-serve`: the study page on a local web server, answers appended to JSON lines.

Routes (all else 404; nothing outside STUDY/public/ is read): GET of STUDY/public/'s files
(no listing, no dot files); GET /api/session?participant=ID: the participant's problems and
candidates in their own seeded order, and those answered; POST /api/response: one answer or
skip, {"participant": ID, "problem": KEY, "position": 0-7 | null, "skipped": bool, "rt_ms":
number, "order": [the 8 candidate indices as shown]}, appended to responses/<ID>.jsonl in one
fsynced write under flock. Every reply is one JSON line (4xx a bad request, 507 a full disk,
500 with an id the log repeats); at most MAX_CONNECTIONS threads serve at once.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import mimetypes
import os
import re
import resource
import secrets
import sys
import threading
import time
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np

from vprom.app.human.study import load_key, read_responses
from vprom.claim import output_lock
from vprom.domain import N_CANDIDATES
from vprom.errors import VpromError

PARTICIPANT = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_CONNECTIONS = 128
PUBLIC_FILE = re.compile(r"(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*")


class Refused(Exception):
    """A request the study answers with a 4xx status (400 unless given) and a reason."""

    def __init__(self, reason: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST):
        super().__init__(reason)
        self.status = status


class Study:
    """A study folder being served: its problems, its key, and the answers so far."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.key = load_key(self.folder)
        self.public = (self.folder / "public").resolve()
        try:
            listed = json.loads((self.public / "problems.json").read_text())["problems"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            raise VpromError(f"{self.public / 'problems.json'}: missing or not a study's "
                             "problem list; write the study again") from None
        self.problems = {p["key"]: p for p in listed}
        if set(self.problems) != set(self.key["problems"]):
            raise VpromError(f"{self.folder}: public/problems.json and study.json list "
                             "different problems; write the study again")
        self.responses = self.folder / "responses"
        self.responses.mkdir(exist_ok=True)
        self.seed = int(self.key["manifest"]["seed"] or 0)
        self._lock = threading.Lock()
        self._answered: dict[str, set[str]] = {}

    def orders(self, participant: str) -> tuple[list[str], dict[str, list[int]]]:
        """The participant's problem order, and per problem the candidate order shown."""
        digest = hashlib.sha256(participant.encode()).digest()
        rng = np.random.default_rng([self.seed, 25, *np.frombuffer(digest, np.uint32)])
        keys = list(self.problems)
        order = [keys[i] for i in rng.permutation(len(keys))]
        return order, {k: [int(v) for v in rng.permutation(N_CANDIDATES)] for k in order}

    def session(self, participant: str) -> dict:
        participant = check_participant(participant)
        order, shown = self.orders(participant)
        problems = [{"key": k, "context": self.problems[k]["context"],
                     "candidates": [self.problems[k]["candidates"][i] for i in shown[k]],
                     "order": shown[k]} for k in order]
        with self._lock:
            answered = sorted(self.answered(participant))
        return {"participant": participant, "problems": problems, "answered": answered}

    def answered(self, participant: str) -> set[str]:
        """Problems this participant has answered or skipped (read once, then kept)."""
        if participant not in self._answered:
            path = self.responses / f"{participant}.jsonl"
            rows = read_responses(self.folder, self.key, [path]) if path.is_file() else []
            self._answered[participant] = {r["problem"] for r in rows}
        return self._answered[participant]

    def record(self, body: bytes) -> dict:
        """Check one response and append it; the stored record."""
        response = parse_response(body)
        participant, problem = response["participant"], response["problem"]
        if problem not in self.problems:
            raise Refused(f"no problem {problem!r} in this study", HTTPStatus.NOT_FOUND)
        shown = self.orders(participant)[1][problem]
        if response["order"] != shown:
            raise Refused("order is not the candidate order this participant was shown; "
                          "reload the page")
        position = response["position"]
        candidate = None if position is None else shown[position]
        key = self.key["problems"][problem]
        record = {
            "participant": participant, "problem": problem, "matrix_id": key["matrix_id"],
            "skipped": response["skipped"], "position": position, "candidate": candidate,
            "choice": None if candidate is None else key["candidate_order"][candidate],
            "order": shown, "rt_ms": response["rt_ms"],
            "received": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        with self._lock:
            done = self.answered(participant)
            if problem in done:
                raise Refused(f"participant {participant} has already answered problem "
                              f"{problem}", HTTPStatus.CONFLICT)
            append_line(self.responses / f"{participant}.jsonl", record)
            done.add(problem)
        return record


def check_participant(participant) -> str:
    if not isinstance(participant, str) or not PARTICIPANT.fullmatch(participant):
        raise Refused("participant must be 1-64 letters, digits, '-' or '_' (put it in the "
                      "address: ?participant=ID)")
    return participant


def parse_response(body: bytes) -> dict:
    """The fields of a response body, checked against the schema."""
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise Refused("the body is not UTF-8 text") from None
    except (ValueError, RecursionError):  # also a number of over 4,300 digits, deep nesting
        raise Refused("the body is not a JSON response") from None
    expected = {"participant", "problem", "position", "skipped", "rt_ms", "order"}
    if not isinstance(data, dict) or set(data) != expected:
        raise Refused(f"the body must be an object with exactly {', '.join(sorted(expected))}")
    check_participant(data["participant"])
    position, skipped, rt = data["position"], data["skipped"], data["rt_ms"]
    if not isinstance(data["problem"], str) or not isinstance(skipped, bool):
        raise Refused("problem must be a string and skipped a boolean")
    if skipped != (position is None) or not (position is None or (
            type(position) is int and 0 <= position < N_CANDIDATES)):
        raise Refused("give a position 0-7, or skipped true with position null")
    if type(rt) not in (int, float) or not 0 <= rt < 24 * 3600 * 1000:
        raise Refused("rt_ms must be a number of milliseconds")
    order = data["order"]
    if not isinstance(order, list) or any(type(v) is not int for v in order) or sorted(
            order) != list(range(N_CANDIDATES)):
        raise Refused("order must list the candidates 0-7 as shown")
    return data


def append_line(path: Path, record: dict) -> None:
    """Append one JSON line with a single write, under flock, fsynced; all of it or nothing."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        try:
            if os.write(fd, line) != len(line):  # a regular file is written short when full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            os.fsync(fd)
        except OSError:
            # never leave half a line; a device cannot be cut back, and the write's error is
            # the one to report
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


class Handler(BaseHTTPRequestHandler):
    study: Study  # set on the subclass `make_server` makes, with `timeout`
    server_version = "vprom-human-study"
    error_message_format = "%(code)d %(message)s\n"  # http.server's own refusals: one line
    error_content_type = "text/plain; charset=utf-8"

    def log_message(self, format, *args):  # one quiet line per request on stderr
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: HTTPStatus, obj) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _answer(self, reply) -> None:
        """Call `reply()`, which sends the reply; a refusal becomes its 4xx line, and any
        other failure a 507 or 500 line that names no server path."""
        try:
            reply()
        except Refused as e:
            self._json(e.status, {"error": str(e)})
        except (TimeoutError, ConnectionError):
            raise  # the participant is silent or gone: nothing to answer
        except Exception as e:  # noqa: BLE001 - every other failure is answered
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                sys.stderr.write(f"vprom human-serve: {e}; answers are refused until space is "
                                 "freed\n")
                self._json(HTTPStatus.INSUFFICIENT_STORAGE, {
                    "error": "no space left on the server's disk; the answer was not "
                             "recorded: tell the organiser, then answer again"})
            else:
                incident = secrets.token_hex(4)  # an id to find the details by, not a secret
                details = str(e) if isinstance(e, VpromError) else traceback.format_exc()
                sys.stderr.write(f"vprom human-serve: internal error {incident}: {details}\n")
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {
                    "error": f"internal error {incident}; the server's log has the details"})

    def do_GET(self):
        self._answer(self._get)

    def _get(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/api/session":
            participant = parse_qs(url.query).get("participant", [""])[0]
            self._json(HTTPStatus.OK, self.study.session(participant))
        else:
            self._file(url.path)

    do_HEAD = do_GET

    def _file(self, path: str) -> None:
        name = "index.html" if path in ("", "/") else path.lstrip("/")
        target = self.study.public / name
        if (not PUBLIC_FILE.fullmatch(name) or not target.resolve().is_relative_to(
                self.study.public) or not target.is_file()):
            raise Refused("no such file in this study", HTTPStatus.NOT_FOUND)
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self._send(HTTPStatus.OK, target.read_bytes(), kind)

    def do_POST(self):
        self._answer(self._post)

    def _post(self) -> None:
        if urlsplit(self.path).path != "/api/response":
            raise Refused("POST only to /api/response", HTTPStatus.NOT_FOUND)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise Refused("send a Content-Length", HTTPStatus.LENGTH_REQUIRED) from None
        if not 0 <= length <= 64 * 1024:
            raise Refused("the body is too large", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        if self.headers.get_content_type() != "application/json":
            raise Refused("send the body as application/json",
                          HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
        body = self.rfile.read(length)
        if len(body) != length:
            raise Refused("the body is shorter than its Content-Length")
        record = self.study.record(body)
        self._json(HTTPStatus.CREATED, {"ok": True, "problem": record["problem"]})


class StudyServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` at once: the accepting loop waits
    for a free place, and meanwhile new connections wait in the listen backlog."""

    daemon_threads = True
    request_queue_size = 128  # connections waiting in the listen backlog

    def __init__(self, address, handler, max_connections: int, verbose: bool):
        super().__init__(address, handler)
        self.places = threading.BoundedSemaphore(max_connections)
        self.verbose = verbose

    def process_request(self, request, client_address):
        self.places.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.places.release()  # no thread was started to release it
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.places.release()


def make_server(study: str | Path, host: str, port: int, verbose: bool = True,
                timeout: float = 10.0) -> StudyServer:
    """An HTTP server for the study folder, bound but not yet serving (port 0: any free one);
    a connection that sends nothing for `timeout` seconds is closed."""
    handler = type("StudyHandler", (Handler,), {"study": Study(study), "timeout": timeout})
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    places = MAX_CONNECTIONS if files == resource.RLIM_INFINITY else min(
        MAX_CONNECTIONS, max(1, files // 2))
    try:
        return StudyServer((host, port), handler, places, verbose)
    except OSError as e:
        raise VpromError(f"cannot listen on {host}:{port} ({e.strerror}); pick another "
                         "--port") from None


def serve(study: str | Path, host: str, port: int) -> None:
    """Serve the study until Ctrl-C; one server per study (its responses' lock is held)."""
    with output_lock(Path(study) / "responses"):
        server = make_server(study, host, port)
        address = f"http://{host}:{server.server_address[1]}/?participant=<id>"
        print(f"serving {study} at {address}; responses go to {Path(study) / 'responses'}; "
              "Ctrl-C stops", flush=True)
        try:
            server.serve_forever()
        finally:
            server.server_close()
