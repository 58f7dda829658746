"""The local HTTP server of `serve`: the page (static/) and the JSON views of the runs it follows.

Python's own `http.server` (threads, one per request): the page polls a few small JSON answers
every two seconds, which needs no more. Only GET and HEAD are answered, only the files of the
package's static folder are served (looked up by exact name among those the folder held at
start, so no request path reaches another file), and every answer forbids inline scripts
(Content-Security-Policy), so that text from the run folder can never run in the page even if
it were put into markup. Bound to 127.0.0.1 unless told otherwise; then requests must name the
server by that address (a Host check against DNS rebinding).
"""

from __future__ import annotations

import errno
import json
import socket
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

from accelopt_evo.errors import UserError

from . import views
from .follow import FollowedRun

STATIC = Path(__file__).resolve().parent / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes


def _json(status: int, payload: Any) -> Answer:
    body = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode()
    return Answer(status, "application/json; charset=utf-8", body)


def _error(status: HTTPStatus, message: str) -> Answer:
    return _json(status, {"error": message})


def static_files(folder: Path = STATIC) -> dict[str, bytes]:
    """The page's files by name (the folder is flat)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in CONTENT_TYPES}


@dataclass
class Site:
    """What the server answers: the runs it follows and the page's files."""

    runs: list[FollowedRun]
    names: list[str]                          # how the page names each run
    files: dict[str, bytes] = field(default_factory=static_files)

    def answer(self, target: str) -> Answer:
        """The answer to a GET of `target` (path and query)."""
        url = urlsplit(target)
        path, query = unquote(url.path), {k: v[-1] for k, v in parse_qs(url.query).items()}
        if path in ("/", "/index.html"):
            return self._file("index.html")
        if path.startswith("/static/"):
            return self._file(path[len("/static/"):])
        if path == "/api/runs":
            return _json(HTTPStatus.OK, {"runs": [self._run_entry(i) for i in range(len(self.runs))]})
        parts = path.split("/")
        # ASCII decimal digits only: str.isdigit and int() also take other scripts' digits and
        # superscripts ('²', '٠'), which int() partly refuses and partly maps onto other runs.
        if len(parts) == 5 and parts[:3] == ["", "api", "run"] and parts[3].isascii() and parts[3].isdigit():
            if int(parts[3]) < len(self.runs):
                return self._view(self.runs[int(parts[3])], parts[4], query)
        return _error(HTTPStatus.NOT_FOUND, "no such page")

    def _file(self, name: str) -> Answer:
        body = self.files.get(name)
        if body is None:
            return _error(HTTPStatus.NOT_FOUND, "no such file")
        return Answer(HTTPStatus.OK, CONTENT_TYPES[Path(name).suffix], body)

    def _run_entry(self, i: int) -> dict[str, Any]:
        run = self.runs[i]
        try:
            version = run.look()
        except UserError as exc:
            return {"id": i, "name": self.names[i], "version": run.version, "error": str(exc)}
        return {"id": i, "name": self.names[i], "version": version}

    def _view(self, run: FollowedRun, view: str, query: dict[str, str]) -> Answer:
        makers: dict[str, Callable[[], tuple[int, Any]]] = {
            "summary": lambda: run.view("summary", views.summary),
            "memory": lambda: run.view("memory", views.memory),
            "tree": lambda: run.view(("tree", query.get("problem", "")),
                                     lambda data: views.tree(data, query.get("problem", ""))),
            "kernel": lambda: run.view(("kernel", query.get("problem", ""), query.get("id", "")),
                                       lambda data: views.kernel(data, query.get("problem", ""), query.get("id", ""))),
        }
        if view not in makers:
            return _error(HTTPStatus.NOT_FOUND, "no such view")
        try:
            run.look()
            version, payload = makers[view]()
        except UserError as exc:
            return _error(HTTPStatus.CONFLICT, str(exc))
        if payload is None:
            return _error(HTTPStatus.NOT_FOUND, f"the run has no such {'problem' if view == 'tree' else 'kernel'}")
        return _json(HTTPStatus.OK, {**payload, "version": version})


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    server_version = "accelopt-evo"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._reply(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._reply(head=True)

    def _reply(self, head: bool) -> None:
        hosts = self.server.allowed_hosts
        if hosts is not None and self.headers.get("Host", "").lower() not in hosts:
            answer = _error(HTTPStatus.FORBIDDEN, "unexpected Host header: open the page by the address serve printed")
        else:
            try:
                answer = self.server.site.answer(self.path)
            except Exception as exc:  # a page must survive a bad moment of one request
                answer = _error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        for key, value in HEADERS.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(answer.body)

    def log_message(self, format: str, *args: Any) -> None:   # quiet: the terminal belongs to the run
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    site: Site
    allowed_hosts: set[str] | None


class _Server6(_Server):
    address_family = socket.AF_INET6


@dataclass
class Server:
    """A started server; `close()` stops it."""

    httpd: _Server
    thread: threading.Thread
    url: str

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def run_names(runs: list[FollowedRun]) -> list[str]:
    """The folder name of each run; with the parent's where two would read the same."""
    names = [r.folder.root.name for r in runs]
    return [f"{r.folder.root.parent.name}/{n}" if names.count(n) > 1 else n for r, n in zip(runs, names)]


def start(runs: list[FollowedRun], host: str = "127.0.0.1", port: int = 8765) -> Server:
    """Serve the runs' page on host:port (0: any free port) from a background thread.
    UserError when the address cannot be had (a port in use, an unknown host)."""
    try:
        httpd = (_Server6 if ":" in host else _Server)((host, port), _Handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is in use; pick another with --port (0 picks a free one)") from None
        raise UserError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    httpd.site = Site(runs, run_names(runs))
    bound = httpd.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    httpd.allowed_hosts = ({f"{h}:{bound}" for h in ("127.0.0.1", "localhost", "[::1]")}
                           if host in LOOPBACK else None)
    thread = threading.Thread(target=httpd.serve_forever, name="accelopt-evo serve", daemon=True)
    thread.start()
    return Server(httpd, thread, f"http://{shown}:{bound}/")
