"""A small fault-injecting HTTP proxy in front of the loopback S3 server.

``proxy.inject(["500", "reset", ...], match=...)`` makes the next requests that match
fail in those ways, one fault per request, then requests pass through again:

* ``"500"`` / ``"503"``: an S3 XML error (``InternalError`` / ``SlowDown``);
* ``"403"``: ``InvalidAccessKeyId``;
* ``"reset"``: the connection is reset before any answer;
* ``"truncate"``: the real answer's headers, half its body, then the connection closes;
* ``"slow:S"``: the real answer after ``S`` seconds, or as soon as the plan is cleared
  (so that no slow answer outlives the test that planned it).

``proxy.log`` records ``(method, path, range, fault)`` of every request.
"""

from __future__ import annotations

import http.client
import socket
import struct
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

Match = Callable[[str, str], bool]

_ERRORS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "403": (403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist."),
}
_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # the client gave up on a held answer (its read timeout, under test)
        super().handle_error(request, client_address)


class FaultProxy:
    """Forwards to ``127.0.0.1:upstream_port``, injecting planned faults."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.log: list[tuple[str, str, Optional[str], Optional[str]]] = []
        self._plan: list[str] = []
        self._match: Match = lambda method, path: True
        self._lock = threading.Lock()
        self._released = threading.Event()  # set while clear() ends the held answers
        self._held = 0
        self._idle = threading.Condition(self._lock)
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def inject(self, faults: list[str], match: Optional[Match] = None) -> None:
        """Fail the next ``len(faults)`` matching requests, in this order."""
        with self._lock:
            self._plan = list(faults)
            self._match = match or (lambda method, path: True)

    def clear(self) -> None:
        """Forget the plan and the log; first end every held ``slow:`` answer."""
        self._released.set()
        with self._idle:
            self._idle.wait_for(lambda: self._held == 0, timeout=30)
            self._plan = []
            self.log.clear()
        self._released.clear()

    def hold(self, seconds: float) -> None:
        """Delay the answer of a ``slow:`` fault that :meth:`take` gave by ``seconds``,
        or until :meth:`clear`."""
        try:
            self._released.wait(seconds)
        finally:
            with self._idle:
                self._held -= 1
                self._idle.notify_all()

    def record(self, entry: tuple[str, str, Optional[str], Optional[str]]) -> None:
        with self._lock:
            self.log.append(entry)

    def faults_left(self) -> int:
        with self._lock:
            return len(self._plan)

    def take(self, method: str, path: str) -> Optional[str]:
        with self._lock:
            if self._plan and self._match(method, path):
                fault = self._plan.pop(0)
                self._held += fault.startswith("slow:")  # clear() waits for its hold()
                return fault
            return None

    def requests(
        self, method: Optional[str] = None
    ) -> list[tuple[str, str, Optional[str], Optional[str]]]:
        with self._lock:
            return [r for r in self.log if method is None or r[0] == method]


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = self.owner.take(self.command, self.path)
        self.owner.record((self.command, self.path, self.headers.get("Range"), fault))
        if fault in _ERRORS:
            return self._error(*_ERRORS[fault])
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return None
        if fault and fault.startswith("slow:"):
            self.owner.hold(float(fault.split(":", 1)[1]))
        status, headers, data = self._forward(body)
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in _HOP and name.lower() != "content-length":
                self.send_header(name, value)
        length = dict((k.lower(), v) for k, v in headers).get("content-length", "0")
        self.send_header("Content-Length", length if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return None
        if fault == "truncate" and len(data) > 1:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        self.wfile.write(data)
        return None

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection("127.0.0.1", self.owner.upstream_port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            return answer.status, answer.getheaders(), data
        finally:
            upstream.close()

    def _error(self, status: int, code: str, message: str) -> None:
        xml = (
            f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{message}</Message></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(xml) if self.command != "HEAD" else 0))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(xml)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle
