"""Reach an existing Ray cluster within a bounded time, or say in one line why not.

``ray.init(address=...)`` retries the cluster's GCS for many minutes when nothing
answers at the address (a closed port, a mistyped host, a stale ``auto``), printing
warnings but never failing.  :func:`connect` bounds it:

1. the address is parsed: ``HOST:PORT`` (the GCS port, Ray's default 6379),
   ``ray://HOST[:PORT]`` (the Ray Client server port, default 10001), or ``auto``
   (``RAY_ADDRESS`` when set; otherwise Ray looks for the latest local cluster);
2. the host name is resolved and a TCP connection opened, within the timeout;
3. ``ray.init`` then runs in a helper thread, and the caller waits for it until the
   same deadline (a port that is open but not Ray's, or an ``auto`` that names a
   cluster that is gone, gets no further).

The timeout is ``--connect-timeout SECONDS`` / ``connect_timeout_s=``, else
``TOKENLOOM_RAY_CONNECT_TIMEOUT_S``, else 15 s.  A ``ray.init`` abandoned at the
deadline keeps trying in its (daemon) thread; should it connect later, it disconnects
at once, so the process is left without a half-made connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.errors import ConfigError

ENV = "TOKENLOOM_RAY_CONNECT_TIMEOUT_S"
DEFAULT_CONNECT_TIMEOUT_S = 15.0
MAX_CONNECT_TIMEOUT_S = 86400.0
CLIENT_PORT = 10001


def connect_timeout_s(value: Any = None) -> float:
    """``value`` (seconds), else ``TOKENLOOM_RAY_CONNECT_TIMEOUT_S``, else 15; checked."""
    where = "--connect-timeout / connect_timeout_s"
    if value is None:
        value = os.environ.get(ENV, "").strip() or None
        where = ENV
    if value is None:
        return DEFAULT_CONNECT_TIMEOUT_S
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if isinstance(value, bool) or not 0 < seconds <= MAX_CONNECT_TIMEOUT_S:
        raise ConfigError(
            f"{where} {value!r}: give a number of seconds > 0 and at most "
            f"{MAX_CONNECT_TIMEOUT_S:g} (default {DEFAULT_CONNECT_TIMEOUT_S:g})"
        )
    return seconds


@dataclass(frozen=True)
class Target:
    """Where a Ray address points: a host, a TCP port, and whether it is Ray Client's."""

    host: str
    """Host name or IP address (IPv6 without brackets)."""
    port: int
    """TCP port (the GCS port, or the Ray Client server port for ``ray://``)."""
    client: bool
    """True for ``ray://`` (Ray Client)."""

    def start_hint(self) -> str:
        """How to start a cluster that answers at this target."""
        flag = f"--ray-client-server-port={self.port}" if self.client else f"--port={self.port}"
        if self.host in ("127.0.0.1", "localhost", "::1"):
            return f"`ray start --head --node-ip-address={self.host} {flag}`"
        return f"`ray start --head {flag}` on {self.host}"


def parse_address(address: str) -> Optional[Target]:
    """The target of a Ray address; None for ``auto`` without ``RAY_ADDRESS`` (Ray finds it)."""
    text = str(address).strip()
    if text == "auto":
        text = os.environ.get("RAY_ADDRESS", "").strip()
        if not text or text == "auto":
            return None
    client = text.startswith("ray://")
    rest = text[len("ray://") :] if client else text
    host, sep, port_text = rest.rpartition(":")
    if not sep or "]" in port_text:  # no port given
        host, port_text = rest, str(CLIENT_PORT) if client else ""
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(
            f"--address {address}: give auto, HOST:PORT (the head node's GCS port, Ray's "
            f"default 6379) or ray://HOST[:PORT] (Ray Client, default port {CLIENT_PORT})"
        )
    return Target(host, int(port_text), client)


def _unreachable(address: str, target: Optional[Target], why: str) -> ConfigError:
    start = target.start_hint() if target else "`ray start --head --node-ip-address=127.0.0.1`"
    return ConfigError(
        f"--address {address}: no Ray cluster answers there ({why}); start one with {start}, "
        "check the host and the port, or drop --address to run on a private local cluster"
    )


def _probe(target: Target, seconds: float) -> Optional[str]:
    """Resolve and TCP-connect within ``seconds``; None when it worked, else why not."""
    found: dict[str, str] = {}

    def run() -> None:
        try:
            infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except OSError as error:
            found["why"] = f"the host name {target.host!r} does not resolve: {error}"
            return
        for family, kind, proto, _, where in infos:
            try:
                with socket.socket(family, kind, proto) as probe:
                    probe.settimeout(seconds)
                    probe.connect(where)
                    found.pop("why", None)
                    return
            except ConnectionRefusedError:
                found["why"] = (
                    f"TCP connect to {target.host}:{target.port} refused: nothing listens there"
                )
            except OSError as error:
                found["why"] = f"TCP connect to {target.host}:{target.port} failed: {error}"

    thread = threading.Thread(target=run, name="tokenloom-ray-probe", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return (
            f"no answer from {target.host}:{target.port} within {seconds:g} s (name lookup "
            "or TCP connect)"
        )
    return found.get("why")


class _DropThreadWarning(logging.Filter):
    """Ray warns that a driver started outside the main thread sets no SIGTERM handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


@contextlib.contextmanager
def _quiet_ray_thread_warning() -> Iterator[None]:
    logger = logging.getLogger("ray._private.worker")
    quiet = _DropThreadWarning()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


class _Attempt:
    """One ``ray.init`` in a helper thread, which the caller may abandon."""

    def __init__(self, ray: Any, address: str, options: dict) -> None:
        self.ray, self.address, self.options = ray, address, options
        self.lock = threading.Lock()
        self.abandoned = False
        self.connected = False
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            self.ray.init(address=self.address, **self.options)
        except BaseException as error:  # handed to the waiting thread
            self.error = error
            return
        with self.lock:
            self.connected = not self.abandoned
        if not self.connected:  # the caller gave up already: leave nothing behind
            with contextlib.suppress(Exception):
                self.ray.shutdown()

    def wait(self, seconds: float) -> bool:
        """True when ``ray.init`` returned (or failed) within ``seconds``."""
        thread = threading.Thread(target=self.run, name="tokenloom-ray-connect", daemon=True)
        thread.start()
        thread.join(seconds)
        with self.lock:
            done = not thread.is_alive() and (self.connected or self.error is not None)
            self.abandoned = not done
        return done


def connect(ray: Any, address: str, seconds: float, options: dict) -> None:
    """``ray.init(address=address, **options)`` within ``seconds``, else a ConfigError."""
    deadline = time.monotonic() + seconds
    target = parse_address(address)
    if target is not None:
        why = _probe(target, seconds)
        if why is not None:
            raise _unreachable(address, target, why)
    attempt = _Attempt(ray, address, options)
    with _quiet_ray_thread_warning():
        done = attempt.wait(max(deadline - time.monotonic(), 0.5))
    if not done:
        kind = "Ray Client server" if target and target.client else "Ray GCS"
        where = f"something listens on {target.host}:{target.port}, but " if target else ""
        raise _unreachable(
            address,
            target,
            f"{where}ray.init did not connect within {seconds:g} s: not a {kind} port, a "
            f"cluster that is gone, or one too busy to answer (then raise --connect-timeout "
            f"or {ENV})",
        )
    if attempt.error is not None:
        error = attempt.error
        if isinstance(error, (ConnectionError, ValueError, RuntimeError, OSError)):
            raise _unreachable(address, target, f"{type(error).__name__}: {error}") from error
        raise error


__all__ = [
    "CLIENT_PORT",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "ENV",
    "Target",
    "connect",
    "connect_timeout_s",
    "parse_address",
]
