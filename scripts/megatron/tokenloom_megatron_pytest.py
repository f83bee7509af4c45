"""pytest plugin that runs Megatron-LM's unmodified data tests against tokenloom, on CPU.

Loaded by ``scripts/megatron-tests.sh`` with ``-p tokenloom_megatron_pytest`` and
``--noconftest``: it stands in for Megatron-LM's ``tests/unit_tests/conftest.py`` (which
downloads assets and sets up CUDA/Transformer-Engine bits) and changes nothing else:

* ``tokenloom.megatron.install()`` runs when this plugin is imported, before pytest
  imports any test module, so every ``megatron.core.datasets`` module the tests import is
  tokenloom's. ``TOKENLOOM_MEGATRON_BASELINE=1`` skips it: the checkout's own
  ``megatron/core/datasets`` is tested instead (the baseline).
* ``tests.unit_tests.test_utilities.Utils.initialize_distributed`` is swapped for a gloo
  process group on CPU (world size from ``WORLD_SIZE``, 1 by default), the one change to
  the tests' own code that the harness makes.
* The two downloads the tests make with ``requests`` (GPT-2's ``gpt2-vocab.json`` and
  ``gpt2-merges.txt``) are served from the golden set
  (``TOKENLOOM_MEGATRON_GOLDEN``); every other HTTP(S) request made through ``requests``
  raises ``requests.ConnectionError`` at once (no network here).
* The fixtures of Megatron's conftest that matter on CPU are kept: ``--experimental``,
  restoring the environment after each test, ``tmp_path_dist_ckpt``, and tearing the
  process group down at the end of the session.
* After a test that failed, processes it left behind are killed (Megatron's
  ``tools/preprocess_data.py`` respawns pool workers whose initializer fails forever, so
  a timed-out test would otherwise keep two cores busy until the session ends).
"""

from __future__ import annotations

import io
import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest

BASELINE = os.environ.get("TOKENLOOM_MEGATRON_BASELINE", "") not in ("", "0")

if not BASELINE:
    import tokenloom.megatron

    tokenloom.megatron.install()

_DOWNLOADS = {
    "https://s3.amazonaws.com/models.huggingface.co/bert/gpt2-vocab.json": "vocab.json",
    "https://s3.amazonaws.com/models.huggingface.co/bert/gpt2-merges.txt": "merges.txt",
}


def _golden_gpt2_file(url: str) -> Path | None:
    name = _DOWNLOADS.get(url)
    golden = os.environ.get("TOKENLOOM_MEGATRON_GOLDEN")
    if name is None or not golden:
        return None
    return Path(golden) / "tokenizers" / "gpt2_bpe" / name


def _offline_adapter():  # type: ignore[no-untyped-def]
    import requests
    from requests.adapters import BaseAdapter

    class GoldenAdapter(BaseAdapter):
        """Serves the GPT-2 vocabulary and merges from the golden set; refuses the rest."""

        def send(self, request, **kwargs):  # type: ignore[no-untyped-def]
            path = _golden_gpt2_file(request.url)
            if path is None:
                raise requests.ConnectionError(
                    f"tokenloom's Megatron test harness is offline: {request.url} "
                    "is not one of the substituted downloads",
                    request=request,
                )
            response = requests.Response()
            response.status_code = 200
            response.url = request.url
            response.request = request
            response.raw = io.BytesIO(path.read_bytes())
            return response

        def close(self) -> None:
            return None

    return GoldenAdapter


def _install_offline_requests() -> None:
    try:
        import requests
    except ImportError:
        return
    adapter_class = _offline_adapter()
    original_init = requests.Session.__init__

    def init(session, *args, **kwargs):  # type: ignore[no-untyped-def]
        original_init(session, *args, **kwargs)
        session.mount("http://", adapter_class())
        session.mount("https://", adapter_class())

    requests.Session.__init__ = init  # type: ignore[method-assign]


def _gloo_initialize_distributed() -> None:
    """Megatron's ``Utils.initialize_distributed``, with gloo on CPU instead of NCCL."""
    import torch.distributed
    from tests.unit_tests.test_utilities import Utils
    from torch.distributed import PrefixStore, TCPStore

    for name in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_UNFUSED_ATTN"):
        os.environ.pop(name, None)
    if not torch.distributed.is_initialized() and Utils.rank >= 0:
        store = TCPStore(
            os.environ.get("MASTER_ADDR", "127.0.0.1"),
            int(os.environ.get("MASTER_PORT", "0")) if Utils.world_size > 1 else 0,
            Utils.world_size,
            is_master=Utils.rank == 0,
            timeout=timedelta(minutes=1),
        )
        Utils.store = PrefixStore("default_pg", store)
        torch.distributed.init_process_group(
            backend="gloo",
            world_size=Utils.world_size,
            rank=Utils.rank,
            store=Utils.store,
            timeout=timedelta(minutes=5),
        )
        torch.distributed.barrier()
    Utils.inited = True


def _descendants(root: int) -> list[int]:
    """Process ids below ``root`` (Linux /proc), children before their parents' parents."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend(children)
        frontier = children
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Kill what a failed test left running (see the module docstring)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for pid in reversed(_descendants(os.getpid())):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def pytest_addoption(parser: pytest.Parser) -> None:
    """Megatron's conftest option, kept so command lines from its CI still parse."""
    parser.addoption(
        "--experimental",
        action="store_true",
        help="enable megatron.core's experimental flag during testing",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Swap ``Utils``' distributed init for gloo and make ``requests`` offline."""
    for marker in ("internal", "flaky", "flaky_in_dev", "launch_on_gb200"):
        config.addinivalue_line("markers", f"{marker}: Megatron-LM's marker")
    _install_offline_requests()
    from tests.unit_tests.test_utilities import Utils

    Utils.initialize_distributed = staticmethod(_gloo_initialize_distributed)


def pytest_report_header(config: pytest.Config) -> str:
    """Say which implementation of megatron.core.datasets runs."""
    if BASELINE:
        return "megatron.core.datasets: Megatron-LM's own (TOKENLOOM_MEGATRON_BASELINE=1)"
    return "megatron.core.datasets: tokenloom (tokenloom.megatron.install())"


@pytest.fixture(autouse=True)
def experimental(request: pytest.FixtureRequest) -> None:
    """Megatron's conftest fixture: ``--experimental`` sets the experimental flag."""
    from megatron.core import config

    config.ENABLE_EXPERIMENTAL = request.config.getoption("--experimental") is True


@pytest.fixture(autouse=True)
def reset_env_vars():  # type: ignore[no-untyped-def]
    """Megatron's conftest fixture: restore the environment after every test."""
    original = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(original)


@pytest.fixture(scope="session")
def tmp_path_dist_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Megatron's conftest fixture: one directory for the whole session (one process
    here, so no cross-rank sharing is needed)."""
    return tmp_path_factory.mktemp("tmp_dist_ckpt")


@pytest.fixture(scope="session")
def ensure_test_data() -> Path:
    """Megatron's conftest fixture (Megatron-LM main): the test assets at /opt/data. They
    are made offline and mounted by megatron-tests.sh, so there is nothing to download."""
    data = Path("/opt/data")
    if not data.is_dir() or not any(data.iterdir()):
        pytest.skip("no test assets at /opt/data (run through scripts/megatron-tests.sh)")
    return data


@pytest.fixture(scope="session", autouse=True)
def cleanup():  # type: ignore[no-untyped-def]
    """Megatron's conftest fixture: tear the process group down at the end."""
    yield
    import torch.distributed

    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
