"""Lazily created, per-process object-storage clients.

A boto3 client is made on first use with the module-level ``boto3.client`` (as
megatron-core does, so code that patches ``boto3.client`` is honoured; only a named
``profile_name`` needs a ``boto3.session.Session`` of its own), shared by every reader
of the process with the same (endpoint, region, profile, timeouts), and made again in
a child process: the pool is emptied after ``fork`` (``os.register_at_fork``) and also
checks the pid, so DataLoader workers never share a connection pool with their parent.
A patched ``boto3.client`` that refuses keyword arguments (megatron-core's tests patch
in such a class) is called as megatron-core calls it, ``boto3.client("s3")``.
The pool is bounded and :func:`clear_clients` empties it.  boto3's default session
keeps the credentials it first found, so when the ``AWS_*`` environment changes, a
default session this pool made is made again (one the user made is left alone).

The endpoint comes from ``ObjectStorageConfig.endpoint_url`` when set, else from the
environment (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3``, ...) as boto3 does; MSC
clients come from ``MSC_CONFIG`` profiles (``multistorageclient.resolve_storage_client``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Optional

from tokenloom.attributes import read_attribute
from tokenloom.errors import ConfigError
from tokenloom.process_caches import register_state
from tokenloom.storage.config import ObjectStorageConfig

logger = logging.getLogger("tokenloom.storage")
_MAX_CLIENTS = 16
# what boto3 reads from the environment when the config leaves it open: a change makes
# a new client rather than reusing one made for another endpoint or account
_ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_PROFILE",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


def _import_boto3() -> Any:
    try:
        import boto3
        import botocore.config
    except ImportError:
        raise ConfigError("s3:// paths need boto3: pip install 'tokenloom[s3]'") from None
    return boto3, botocore.config


def import_msc() -> Any:
    """The ``multistorageclient`` module (ConfigError naming the extra when missing)."""
    try:
        import multistorageclient
    except ImportError:
        raise ConfigError(
            "msc:// paths need the Multi-Storage Client: pip install 'tokenloom[msc]'"
        ) from None
    return multistorageclient


def _new_s3_client(config: ObjectStorageConfig) -> Any:
    """A client from the module-level ``boto3.client`` (so code that patches it, as
    megatron-core's tests do, is honoured); a named profile needs a session of its own."""
    boto3, botocore_config = _import_boto3()
    retry = config.retry
    settings = botocore_config.Config(
        retries={"total_max_attempts": 1, "mode": "standard"},  # ours are explicit
        connect_timeout=retry.connect_timeout_s,
        read_timeout=retry.read_timeout_s,
        max_pool_connections=32,
    )
    options: dict[str, Any] = {"config": settings}
    if config.endpoint_url is not None:
        options["endpoint_url"] = config.endpoint_url
    if config.region_name is not None:
        options["region_name"] = config.region_name
    if config.profile_name is not None:
        return boto3.session.Session(profile_name=config.profile_name).client("s3", **options)
    try:
        return boto3.client("s3", **options)
    except TypeError as error:
        return _plain_s3_client(boto3, config, error)


def _plain_s3_client(boto3: Any, config: ObjectStorageConfig, refused: TypeError) -> Any:
    """megatron-core's exact call, ``boto3.client("s3")``, for a stand-in factory that
    takes no keyword arguments (megatron-core's tests patch in a class whose
    ``__init__(self, *args)`` does so).  boto3's own ``client`` takes them all, so its
    TypeError is raised as it is.  The stand-in gets none of tokenloom's settings (for
    a real botocore client behind it, botocore's own timeouts and retries would apply);
    tokenloom's retry layer still wraps every call."""
    factory = boto3.client
    if read_attribute(factory, "__module__", None) == "boto3":
        raise refused
    try:
        client = factory("s3")
    except TypeError:
        raise refused from None
    dropped = [
        f"{name}={value!r}"
        for name, value in (
            ("endpoint_url", config.endpoint_url),
            ("region_name", config.region_name),
        )
        if value is not None
    ]
    name = read_attribute(factory, "__qualname__", type(factory).__name__)
    if dropped:
        logger.warning(
            "boto3.client is %s, which takes no keyword arguments (%s); called as "
            "boto3.client('s3'), so ObjectStorageConfig's %s is not passed to it",
            name,
            refused,
            ", ".join(dropped),
        )
    else:
        logger.debug(
            "boto3.client is %s (no keyword arguments): called as boto3.client('s3')", name
        )
    return client


def _follow_environment(made: Optional[tuple[Any, tuple]], environment: tuple) -> Any:
    """Make boto3's default session, which ``boto3.client`` uses and which keeps the
    credentials it first found, follow the ``AWS_*`` environment: one that this pool
    made under other settings is made again; one the user made is left alone.

    ``made`` is ``(weak reference to the session, environment)`` of the last one this
    pool made; returns the new value of it."""
    import weakref

    boto3, _ = _import_boto3()
    session = boto3.DEFAULT_SESSION
    ours = made is not None and session is not None and made[0]() is session
    if session is None or (ours and made is not None and made[1] != environment):
        boto3.setup_default_session()
        return weakref.ref(boto3.DEFAULT_SESSION), environment
    return made if ours else None


class ClientPool:
    """At most ``max_clients`` clients of this process, keyed by their settings."""

    def __init__(self, max_clients: int = _MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self._clients: OrderedDict[Hashable, Any] = OrderedDict()
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._creating = threading.Lock()
        self._default_session: Optional[tuple[Any, tuple]] = None

    def s3(self, config: ObjectStorageConfig) -> Any:
        """The boto3 S3 client for ``config``'s endpoint, region, profile and timeouts."""
        retry = config.retry
        environment = tuple(os.environ.get(name) for name in _ENVIRONMENT)
        key: tuple[Any, ...] = (
            "s3",
            config.endpoint_url,
            config.region_name,
            config.profile_name,
            retry.connect_timeout_s,
            retry.read_timeout_s,
            environment,
        )
        if self._pid != os.getpid():
            self.reset_after_fork()
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                self._clients.move_to_end(key)
                return client
        with self._creating:  # outside the pool's lock (tens of ms); boto3 sessions
            if config.profile_name is None:  # are not safe to share between threads
                self._default_session = _follow_environment(self._default_session, environment)
            client = _new_s3_client(config)
        with self._lock:
            client = self._clients.setdefault(key, client)
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
        return client

    def clear(self) -> None:
        """Forget every client (they are closed once no reader uses them)."""
        with self._lock:
            self._clients.clear()

    def reset_after_fork(self) -> None:
        """In a child process: drop the parent's clients and locks (boto3's default
        session is inherited: it holds no connections, only settings and credentials)."""
        self._lock = threading.Lock()
        self._creating = threading.Lock()
        self._clients = OrderedDict()
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self._clients)


DEFAULT_POOL = ClientPool()
register_state(
    DEFAULT_POOL,
    "storage.clients: object-storage clients",
    f"at most {_MAX_CLIENTS} boto3/MSC clients by (endpoint, region, profile, timeouts, "
    "environment), made again in a child made by fork",
    DEFAULT_POOL.clear,
    after_fork_in_child=DEFAULT_POOL.reset_after_fork,
)


def clear_clients() -> None:
    """Empty the process's client pool (new clients are made on next use)."""
    DEFAULT_POOL.clear()


__all__ = ["ClientPool", "DEFAULT_POOL", "clear_clients", "import_msc"]
