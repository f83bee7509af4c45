"""Connect to a Ray cluster, or start a private local one for the length of a run.

* ``address`` given (``ray://…``, ``HOST:PORT`` or ``auto``): connect within
  ``connect_timeout_s`` (:mod:`.connect`: a clear error naming the address instead of
  Ray's endless retries), and only disconnect at the end; the cluster keeps running.
* Ray already initialised in this process: use it as it is, leave it running.
* Otherwise: start a private single-machine cluster bound to loopback, with its
  session files under ``RAY_TMPDIR`` (Ray's own variable; default ``/tmp``), no
  dashboard and no usage reporting; it is shut down when the run ends (also on an
  error or Ctrl-C), its lingering agent processes included (:mod:`.processes`), and
  Ray's reaper stops it if this process is killed.

Ray is imported here only, so ``tokenloom`` works without it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from tokenloom.errors import ConfigError
from tokenloom.preprocess.ray_engine.connect import connect, connect_timeout_s
from tokenloom.preprocess.ray_engine.options import check_num_cpus
from tokenloom.preprocess.ray_engine.processes import ray_descendants, stop_processes

_QUIET_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def import_ray() -> Any:
    """``import ray``, or a :class:`ConfigError` saying how to install it."""
    for name, value in _QUIET_ENV.items():
        os.environ.setdefault(name, value)
    try:
        import ray
    except ImportError as error:
        raise ConfigError(
            f"--engine ray needs Ray: pip install 'tokenloom[ray]' (import failed: {error})"
        ) from error
    return ray


@dataclass(frozen=True)
class ClusterInfo:
    """The cluster a run uses."""

    private: bool
    """True for a cluster started by this run (stopped at its end)."""
    cpus: int
    """CPUs the cluster offers."""
    nodes: int
    """Live nodes."""
    address: str
    """Where it is (the GCS address)."""
    largest_node_cpus: int = 0
    """CPUs of the live node that has the most (a task needing more never starts)."""


def _info(ray: Any, private: bool) -> ClusterInfo:
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    cpus = int(ray.cluster_resources().get("CPU", 0))
    largest = max((int(node.get("Resources", {}).get("CPU", 0)) for node in nodes), default=0)
    address = ray.get_runtime_context().gcs_address
    return ClusterInfo(private, cpus, len(nodes), str(address), largest)


@contextlib.contextmanager
def ray_cluster(
    address: Optional[str] = None,
    num_cpus: Optional[int] = None,
    connect_timeout: Optional[float] = None,
) -> Iterator[ClusterInfo]:
    """Yield the cluster of a run (see the module docstring); clean up on exit.

    ``connect_timeout`` bounds connecting to ``address`` (None:
    ``TOKENLOOM_RAY_CONNECT_TIMEOUT_S``, else 15 s).
    """
    seconds = connect_timeout_s(connect_timeout)
    num_cpus = check_num_cpus(num_cpus)
    ray = import_ray()
    if ray.is_initialized():
        yield _info(ray, private=False)
        return
    env = {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}
    if address is not None:
        connect(ray, address, seconds, {"runtime_env": env, "log_to_driver": False})
        private = False
    else:
        ray.init(
            num_cpus=num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            _node_ip_address="127.0.0.1",
            runtime_env=env,
            configure_logging=False,
        )
        private = True
    try:
        yield _info(ray, private)
    finally:
        started = ray_descendants() if private else {}
        ray.shutdown()
        stop_processes(started)  # the agents would otherwise linger for up to a minute


__all__ = ["ClusterInfo", "ray_cluster", "import_ray"]
