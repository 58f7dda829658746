"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests: scripted replies, usage counts,
fault injection.

It serves `POST /v1/chat/completions` and `GET /v1/models` over HTTP/1.1 (keep-alive, one
thread per connection), so the real `openai` client talks to it exactly as to vLLM or a hosted
API. Replies come from a *responder* (a function of the request); the default one,
`knob_responder`, answers every role of the LLM operators with something usable:

  planner      a plan "set KNOB from A to B" for one `# tune:` knob of the kernel in the prompt
  implementer  that kernel with the planned knob change (or, for crossover and repair, a knob
               picked from the request), in a fenced block
  summarizer   a rationale carrying a unique marker `LESSON-<hex>` (tests look for it later)

The role and sample come from the `X-Accelopt-Role` / `X-Accelopt-Sample` headers the LLM
client sends. Faults (`Fault`) are consumed by matching requests in arrival order: an HTTP
status with an optional Retry-After, a slow reply, malformed JSON, a closed connection. A fault
without a role is meant for the operators' calls: the preflight call a run sends first (role
"preflight") takes only the faults that name its role. `pause()` closes the listening socket
and every open connection (connection refused) until `resume()` listens again on the same port.

With `reasoning=ReasoningModel()` the server behaves as a reasoning model: a `temperature`
other than 1 is refused with OpenAI's 400 (`unsupported_value`, param "temperature"), every
reply carries `reasoning_content` (holding a decoy kernel draft, which is never the answer)
and usage with `completion_tokens_details.reasoning_tokens` (inside `completion_tokens`, as
OpenAI counts them), and a completion budget (`max_completion_tokens` or `max_tokens`) below
`min_budget` is spent on reasoning: `finish_reason` "length" with empty content.

Usage counts are the server's own: whitespace/punctuation pieces of the text (a stand-in for a
tokenizer), reported in `usage` and summed in `totals()` for the replies it answered.

Use: the `llm_server` pytest fixture (re-exported by tests/operators/conftest.py), or
`with ScriptedLLMServer() as server: ...`; tests/ is on sys.path under pytest, so other test
folders can `from llm_server import ScriptedLLMServer, llm_server`.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pytest

PREFLIGHT_ROLE = "preflight"
TEMPERATURE_REFUSAL = ("Unsupported value: 'temperature' does not support {value} with this model. Only the "
                       "default (1) value is supported.")
DECOY = "DRAFT-FROM-REASONING"   # in every reasoning text: a reply that shows it took the reasoning
TOKEN_RE = re.compile(r"\w+|[^\w\s]")
KNOB_RE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)\s*=\s*(?P<value>-?\d+)\s*#\s*tune:\s*(?P<values>[-\d,\s]+)$", re.M)
PLAN_RE = re.compile(r"set ([A-Z][A-Z0-9_]*) from (-?\d+) to (-?\d+)")
FENCE_RE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.S)


def count_tokens(text: str) -> int:
    """The server's token count of a text (word and punctuation pieces)."""
    return len(TOKEN_RE.findall(text))


@dataclass
class Fault:
    """One injected failure, applied to the next `times` chat requests that match `role`.

    kind: "status" (answer `status`, with Retry-After when `retry_after` is set), "slow"
    (wait `delay_s`, then answer normally), "malformed" (200 with a body that is not JSON),
    "close" (close the connection without a response), "no_usage" (a reply without usage).
    """

    kind: str
    status: int = 500
    message: str = ""                # error text of a "status" fault
    retry_after: float | None = None
    delay_s: float = 0.0
    role: str | None = None
    times: int = 1


@dataclass(frozen=True)
class ReasoningModel:
    """How the server answers as a reasoning model (see the module docstring)."""

    reasoning_tokens: int = 48       # spent on reasoning by a reply that fits its budget
    min_budget: int = 256            # a smaller completion budget is all spent on reasoning


@dataclass(frozen=True)
class ChatRequest:
    """What the server received for one chat completion."""

    body: dict[str, Any]
    headers: dict[str, str]
    role: str
    sample: str
    arrived: float

    def header(self, name: str) -> str | None:
        """A request header, whatever its case."""
        lower = {k.lower(): v for k, v in self.headers.items()}
        return lower.get(name.lower())

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def text(self) -> str:
        """All message contents, joined."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


@dataclass
class Exchange:
    """One chat request and what the server did with it."""

    request: ChatRequest
    # "ok", "slow", "no_usage", "length" (cut at its budget), "status 429", "malformed", "close",
    # "abandoned"
    outcome: str
    prompt_tokens: int = 0
    completion_tokens: int = 0       # reasoning tokens included
    content: str = ""
    reasoning_tokens: int = 0


Responder = Callable[[ChatRequest], str]


def _peer_gone(conn: socket.socket) -> bool:
    """Whether the client closed its end (it timed out while the server was slow)."""
    readable, _, _ = select.select([conn], [], [], 0)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _digest(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\x00".join(parts).encode()).digest()[:8], "big")


def first_kernel(text: str) -> str | None:
    """The first fenced block of a prompt that defines `kernel`."""
    for block in FENCE_RE.findall(text):
        if "def kernel" in block:
            return block
    return None


def set_knob(source: str, name: str, value: int) -> tuple[str, str]:
    """`source` with knob `name` set to `value`."""
    for m in KNOB_RE.finditer(source):
        if m.group("name") == name:
            line = re.sub(r"=\s*-?\d+", f"= {value}", m.group(0), count=1)
            return source[: m.start()] + line + source[m.end():], f"set {name} from {m.group('value')} to {value}"
    return source, f"no knob {name}"


def change_one_knob(source: str, choice: int) -> tuple[str, str]:
    """`source` with one `# tune:` knob set to another of its listed values (picked by
    `choice`), and a description; unchanged when the kernel has no knob to move."""
    knobs = [m for m in KNOB_RE.finditer(source)]
    options = []
    for m in knobs:
        values = [int(v) for v in m.group("values").replace(",", " ").split()]
        for v in values:
            if v != int(m.group("value")):
                options.append((m, v))
    if not options:
        return source, "no knob to change"
    m, v = options[choice % len(options)]
    return set_knob(source, m.group("name"), v)


def knob_responder(request: ChatRequest) -> str:
    """Default scripted replies for the LLM operators (see the module docstring)."""
    text = request.text
    choice = _digest(request.role, request.sample, text)
    if request.role == "summarizer":
        marker = f"LESSON-{choice & 0xFFFFFFFF:08x}"
        return (f"**Tile size matters ({marker})**\n\nThe child moves more data per DMA transfer, so fewer "
                "fixed per-transfer costs are paid.\n\nBefore:\n```python\nLOAD_N = 512\n```\nAfter:\n"
                "```python\nLOAD_N = 2048\n```\n")
    kernel = first_kernel(text)
    if kernel is None:
        return "I could not find a kernel in the prompt."
    planned = PLAN_RE.search(text) if request.role == "implementer" else None
    if planned:
        new_source, what = set_knob(kernel, planned.group(1), int(planned.group(3)))
    else:
        new_source, what = change_one_knob(kernel, choice)
    if request.role == "planner":
        return f"Plan: {what}. Larger transfers amortize DMA fixed costs; keep the masks for remainders."
    return f"Here is the kernel ({what}).\n\n```python\n{new_source.rstrip()}\n```\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_HTTPServer"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every keep-alive reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self._send_bytes(status, data, "application/json", headers)

    def _send_bytes(self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _authorized(self) -> bool:
        owner = self.server.owner
        if owner.require_key is None or self.headers.get("Authorization") == f"Bearer {owner.require_key}":
            return True
        self._send_json(401, {"error": {"message": "invalid API key", "type": "invalid_request_error"}})
        return False

    def do_GET(self) -> None:
        owner = self.server.owner
        owner._record_header_request(dict(self.headers))
        if not self._authorized():
            return
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "tests"} for m in owner.models]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        owner._enter()
        try:
            self._post()
        finally:
            owner._leave()

    def _post(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        headers = dict(self.headers)
        owner._record_header_request(headers)
        if not self._authorized():
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request"}})
            return
        lower = {k.lower(): v for k, v in headers.items()}
        request = ChatRequest(body, headers, lower.get("x-accelopt-role", ""), lower.get("x-accelopt-sample", ""),
                              time.monotonic())
        fault = owner._take_fault(request.role)
        if fault is not None and fault.kind == "close":
            owner._log(Exchange(request, "close"))
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if fault is not None and fault.kind == "status":
            extra = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            owner._log(Exchange(request, f"status {fault.status}"))
            message = fault.message or f"injected HTTP {fault.status}"
            self._send_json(fault.status, {"error": {"message": message, "type": "injected"}}, extra)
            return
        if fault is not None and fault.kind == "malformed":
            owner._log(Exchange(request, "malformed"))
            self._send_bytes(200, b'{"id": "chatcmpl-x", "choices": [ {"message": ', "application/json")
            return
        if owner.delay_s:
            time.sleep(owner.delay_s)
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.delay_s)
            if _peer_gone(self.connection):
                owner._log(Exchange(request, "abandoned"))
                self.close_connection = True
                return
        reasoning = owner.reasoning
        if reasoning is not None and body.get("temperature", 1) != 1:
            owner._log(Exchange(request, "status 400"))
            self._send_json(400, {"error": {"message": TEMPERATURE_REFUSAL.format(value=body["temperature"]),
                                            "type": "invalid_request_error", "param": "temperature",
                                            "code": "unsupported_value"}})
            return
        message: dict[str, Any] = {"role": "assistant"}
        finish, reasoning_tokens = "stop", 0
        budget = body.get("max_completion_tokens", body.get("max_tokens"))
        if reasoning is not None and budget is not None and budget < reasoning.min_budget:
            content, finish, reasoning_tokens = "", "length", budget
        else:
            content = owner.responder(request)
            if reasoning is not None:
                reasoning_tokens = reasoning.reasoning_tokens
        if reasoning is not None:
            message["reasoning_content"] = (f"The user wants a kernel. A first draft ({DECOY}):\n```python\n"
                                            "def kernel(x):\n    return x\n```\n")
        message["content"] = content
        prompt_tokens = sum(count_tokens(str(m.get("content", ""))) + 4 for m in request.messages)
        completion_tokens = count_tokens(content) + reasoning_tokens
        payload: dict[str, Any] = {
            "id": f"chatcmpl-{_digest(content, str(time.monotonic_ns())) & 0xFFFFFF:06x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        }
        no_usage = fault is not None and fault.kind == "no_usage"
        if not no_usage:
            payload["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                "total_tokens": prompt_tokens + completion_tokens}
            if reasoning is not None:
                payload["usage"]["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
        outcome = "no_usage" if no_usage else ("slow" if fault is not None else "ok" if finish == "stop" else finish)
        # Logged before the reply goes out, so a client that has its answer finds it logged.
        owner._log(Exchange(request, outcome, 0 if no_usage else prompt_tokens,
                            0 if no_usage else completion_tokens, content, 0 if no_usage else reasoning_tokens))
        self._send_json(200, payload)


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "ScriptedLLMServer"


class ScriptedLLMServer:
    """The test server; see the module docstring."""

    def __init__(self, responder: Responder | None = None, models: tuple[str, ...] = ("test-model",),
                 require_key: str | None = None, delay_s: float = 0.0,
                 reasoning: ReasoningModel | None = None) -> None:
        self.responder: Responder = responder or knob_responder
        self.models = models
        self.reasoning = reasoning       # answer as a reasoning model (see the module docstring)
        self.require_key = require_key   # answer 401 unless "Authorization: Bearer <key>"
        self.delay_s = delay_s           # added to every chat reply (to observe concurrency)
        self.in_flight = 0
        self.max_in_flight = 0
        self.port = 0
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._exchanges: list[Exchange] = []
        self._headers_seen: list[dict[str, str]] = []
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # Lifecycle ---------------------------------------------------------------------------
    def start(self) -> "ScriptedLLMServer":
        httpd = _HTTPServer(("127.0.0.1", self.port), _Handler)
        httpd.owner = self
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def pause(self) -> None:
        """Stop listening and drop open connections: clients now get 'connection refused'."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def resume(self) -> None:
        """Listen again on the same port."""
        if self._httpd is None:
            self.start()

    def stop(self) -> None:
        self.pause()

    def __enter__(self) -> "ScriptedLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The base URL to configure as llm.base_url."""
        return f"http://127.0.0.1:{self.port}/v1"

    # Scripting ---------------------------------------------------------------------------
    def inject(self, *faults: Fault) -> None:
        with self._lock:
            self._faults.extend(faults)

    def _take_fault(self, role: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                # A fault without a role is for the operators' calls, not the preflight.
                matches = fault.role == role if fault.role is not None else role != PREFLIGHT_ROLE
                if fault.times > 0 and matches:
                    fault.times -= 1
                    if fault.times == 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._connections.add if add else self._connections.discard)(conn)

    def _log(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _record_header_request(self, headers: dict[str, str]) -> None:
        with self._lock:
            self._headers_seen.append(headers)

    # Inspection --------------------------------------------------------------------------
    @property
    def exchanges(self) -> list[Exchange]:
        with self._lock:
            return list(self._exchanges)

    @property
    def answered(self) -> list[Exchange]:
        """Chat requests answered with a completion (with or without usage, cut or whole)."""
        return [e for e in self.exchanges if e.outcome in ("ok", "slow", "no_usage", "length")]

    @property
    def headers_seen(self) -> list[dict[str, str]]:
        with self._lock:
            return list(self._headers_seen)

    def totals(self) -> dict[str, int]:
        """Calls answered and the usage the server reported for them."""
        answered = self.answered
        return {"calls": len(answered),
                "prompt_tokens": sum(e.prompt_tokens for e in answered),
                "completion_tokens": sum(e.completion_tokens for e in answered),
                "reasoning_tokens": sum(e.reasoning_tokens for e in answered)}


@pytest.fixture
def llm_server() -> Iterator[ScriptedLLMServer]:
    """A started ScriptedLLMServer with the default knob responder; stopped afterwards."""
    server = ScriptedLLMServer().start()
    try:
        yield server
    finally:
        server.stop()
