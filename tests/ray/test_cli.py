"""The --engine flags of `tokenloom preprocess` (no Ray needed)."""

from __future__ import annotations

import argparse
import functools

import pytest

from tokenloom.errors import ConfigError
from tokenloom.preprocess.ray_engine.cli import add_engine_flags, engine_from_args
from tokenloom.preprocess.ray_engine.engine import preprocess_ray


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_engine_flags(parser)
    return parser.parse_args(list(argv))


def _local(*args: object, **kwargs: object) -> None:
    return None


def test_local_engine_is_the_default_and_ray_flags_need_it() -> None:
    assert engine_from_args(_parse(), _local) is _local
    for flag in (["--address", "auto"], ["--num-shards", "4"], ["--no-merge"], ["--keep-shards"]):
        with pytest.raises(ConfigError, match=f"{flag[0]} applies to --engine ray only"):
            engine_from_args(_parse(*flag), _local)


def test_ray_engine_gets_its_options() -> None:
    engine = engine_from_args(
        _parse(
            "--engine",
            "ray",
            "--address",
            "10.0.0.1:6379",
            "--num-shards",
            "16",
            "--no-merge",
            "--max-retries",
            "5",
        ),
        _local,
    )
    assert isinstance(engine, functools.partial) and engine.func is preprocess_ray
    assert engine.keywords == {
        "address": "10.0.0.1:6379",
        "num_shards": 16,
        "merge": False,
        "keep_shards": False,
        "max_retries": 5,
    }
    with pytest.raises(ConfigError, match="--max-retries -1"):
        engine_from_args(_parse("--engine", "ray", "--max-retries", "-1"), _local)


@pytest.mark.processes
def test_ray_is_imported_only_when_a_ray_run_starts() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tokenloom.cli.main, tokenloom.cli.preprocess, "
        "tokenloom.preprocess.ray_engine; print('ray' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
