"""A minimal S3-compatible, read-only object server for the storage benchmark.

moto (the test suite's S3 server) reads the whole object on every GET, so its cost per
request grows with the object, not with the bytes asked for; that hides exactly what
the benchmark measures on large objects.  This server answers ``HEAD`` and ranged
``GET`` of path-style URLs (``/bucket/key``) from files under ``--root`` with
``os.sendfile``: its cost is one request plus the bytes sent, like a real object store
on a fast network.  ``--latency-ms`` adds a fixed time to first byte per request.

``python benchmarks/s3_range_server.py --root DIR [--latency-ms 0]`` prints
``PORT <n>`` once listening on 127.0.0.1 and serves until killed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


def _etag(path: str) -> str:
    stat = os.stat(path)
    return '"' + hashlib.md5(f"{stat.st_size}-{stat.st_mtime_ns}".encode()).hexdigest() + '"'


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."
    latency = 0.0
    counters = {"requests": 0, "bytes": 0}
    lock = threading.Lock()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _path(self) -> str:
        rel = self.path.split("?", 1)[0].lstrip("/")
        full = os.path.realpath(os.path.join(self.root, rel))
        if not full.startswith(os.path.realpath(self.root) + os.sep):
            return ""
        return full

    def _missing(self) -> None:
        body = b"<?xml version='1.0'?><Error><Code>NoSuchKey</Code><Message>no</Message></Error>"
        self.send_response(404)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path == "/__stats":  # GET /__stats: {"requests", "bytes"} served so far
            with self.lock:
                body = json.dumps(self.counters).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        if self.latency:
            time.sleep(self.latency)
        path = self._path()
        if not path or not os.path.isfile(path):
            return self._missing()
        size = os.path.getsize(path)
        start, end, status = 0, size, 200
        match = _RANGE.match(self.headers.get("Range", "") or "")
        if match:
            start = int(match.group(1))
            end = min(size, int(match.group(2)) + 1) if match.group(2) else size
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(max(0, end - start)))
        self.send_header("ETag", _etag(path))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        with self.lock:
            self.counters["requests"] += 1
            if self.command != "HEAD":
                self.counters["bytes"] += max(0, end - start)
        if self.command == "HEAD" or end <= start:
            return None
        self.wfile.flush()
        with open(path, "rb") as handle:
            sent = start
            while sent < end:
                sent += os.sendfile(self.connection.fileno(), handle.fileno(), sent, end - sent)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="folder holding <bucket>/<key> files")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    Handler.root = args.root
    Handler.latency = args.latency_ms / 1000.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
