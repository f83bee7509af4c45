"""megatron-core 0.16.1 as an oracle and as a source of real classes, in a subprocess.

megatron-core is never a dependency of tokenloom: ``scripts/test.sh`` installs it into
its own folder (``.megatron-core``) and sets ``TOKENLOOM_MEGATRON_PATH``; only the
subprocesses started here see it (importing ``megatron.core`` takes seconds and pulls
in half of megatron's model code, which the test process must not carry).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = (
    "install it with `python -m pip install --no-deps --target .megatron-core "
    "megatron-core==0.16.1` and set TOKENLOOM_MEGATRON_PATH=$PWD/.megatron-core "
    "(scripts/test.sh does both)"
)


def megatron_env(with_megatron: bool = True, **extra: str) -> dict:
    """The environment of a subprocess; megatron-core on its path when ``with_megatron``."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    paths = [str(PROJECT_ROOT)]
    folder = os.environ.get("TOKENLOOM_MEGATRON_PATH")
    if with_megatron and folder:
        paths.insert(0, folder)
    paths.append(env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


def _probe() -> str:
    if (
        not os.environ.get("TOKENLOOM_MEGATRON_PATH")
        and importlib.util.find_spec("megatron") is None
    ):
        return f"megatron-core is not installed; {INSTALL_HINT}"
    probe = (
        "import importlib.metadata as m, megatron.core.datasets.blended_megatron_dataset_builder;"
        "print(m.version('megatron-core'))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", probe],
            env=megatron_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"megatron-core could not be probed ({error})"
    if done.returncode != 0:
        return f"megatron-core is not importable ({done.stderr.strip()[-200:]}); {INSTALL_HINT}"
    version = done.stdout.strip().splitlines()[-1]
    if version != "0.16.1":
        return f"megatron-core {version} is installed; these tests compare with 0.16.1"
    return ""


_REASON: list[str] = []


def megatron_missing_reason() -> str:
    """Why megatron-core 0.16.1 cannot be used here ("" when it can); probed once."""
    if not _REASON:
        _REASON.append(_probe())
    return _REASON[0]


def require_megatron() -> None:
    """Skip the calling test when megatron-core 0.16.1 is not available."""
    reason = megatron_missing_reason()
    if reason:
        pytest.skip(reason)


def run_python(
    script: str,
    *args: str,
    with_megatron: bool = True,
    timeout: float = 600,
    env: Optional[dict] = None,
) -> subprocess.CompletedProcess:
    """Run ``python -c script args`` (megatron-core on the path when asked); the result."""
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script, *args],
        env=megatron_env(with_megatron, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_json(script: str, *args: str, **kwargs: Any) -> Any:
    """Run ``script``, which prints one JSON document as its last line; that document.

    A failing script fails the test with its stderr."""
    done = run_python(script, *args, **kwargs)
    if done.returncode != 0:
        pytest.fail(f"subprocess failed (rc {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
