"""Fixtures of the Ray tests: real text, a real tokenizer, and a real local Ray cluster.

The cluster (``ray.init(num_cpus=2, include_dashboard=False)`` on loopback, without
usage reporting) is started once per test module that asks for it and shut down at the
module's end, also when a test fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from tests.ray.ray_helpers import RAY_ENV
from tests.support.tokenizer_models import hf_path, real_texts  # noqa: F401

from tokenloom.preprocess.ray_engine.processes import ray_descendants, stop_processes

for _name, _value in RAY_ENV.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="session")
def hf_tokenizer(hf_path: str) -> Any:  # noqa: F811
    from tokenloom.tokenizers import load_tokenizer

    return load_tokenizer(f"hf:{hf_path}")


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A real two-CPU local Ray cluster for the module (this process is its driver)."""
    ray = pytest.importorskip("ray")
    import tests.ray.ray_helpers as helpers

    from ray import cloudpickle

    if ray.is_initialized():
        ray.shutdown()
    cloudpickle.register_pickle_by_value(helpers)  # workers need not import tests/
    temp_dir = tempfile.mkdtemp(prefix="tlray-")  # short: Ray's socket paths are limited
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=temp_dir,
    )
    try:
        yield ray
    finally:
        started = ray_descendants()
        ray.shutdown()
        stop_processes(started)  # Ray's agents may otherwise linger for a minute
        cloudpickle.unregister_pickle_by_value(helpers)
        shutil.rmtree(temp_dir, ignore_errors=True)
