"""randperm without torch equals torch's CPU randperm (golden, torch itself, both branches)."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.training._golden import samplers

from tokenloom.errors import ConfigError
from tokenloom.training import SMALL_N_LIMIT, randperm, reference_randperm
from tokenloom.training import permutation as randperm_module

torch = pytest.importorskip("torch")


def torch_randperm(n: int, seed: int, dtype: object = None) -> numpy.ndarray:
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=generator, dtype=dtype or torch.int64).numpy()


def test_golden_entries() -> None:
    entries = samplers()["randperm"]
    assert len(entries) == 75
    for entry in entries:
        assert randperm(entry["n"], entry["seed"]).tolist() == entry["perm"], entry
        assert reference_randperm(entry["n"], entry["seed"]).tolist() == entry["perm"], entry


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 3000), seed=st.integers(0, 2**64 - 1))
def test_equals_torch(n: int, seed: int) -> None:
    numpy.testing.assert_array_equal(randperm(n, seed), torch_randperm(n, seed))


def test_threshold_is_torchs() -> None:
    assert SMALL_N_LIMIT == 214748364 == (2**32 - 1) // 20


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=st.integers(1, 400), seed=st.integers(0, 2**40), limit=st.integers(0, 400))
def test_kernel_equals_reference_in_both_branches(
    monkeypatch: pytest.MonkeyPatch, n: int, seed: int, limit: int
) -> None:
    """Lowering the threshold runs the 64-bit (inside-out) branch on small n."""
    with monkeypatch.context() as patch:
        patch.setattr(randperm_module, "SMALL_N_LIMIT", limit)
        fast, slow = randperm(n, seed), reference_randperm(n, seed)
    numpy.testing.assert_array_equal(fast, slow)
    assert sorted(fast.tolist()) == list(range(n))


def test_without_numba(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENLOOM_DISABLE_NUMBA", "1")
    numpy.testing.assert_array_equal(randperm(500, 3), torch_randperm(500, 3))


@pytest.mark.parametrize(
    "n, dtype", [(-1, numpy.int64), (1.5, numpy.int64), (300, numpy.int8), (10, numpy.float32)]
)
def test_bad_arguments(n: object, dtype: object) -> None:
    with pytest.raises(ConfigError):
        randperm(n, 0, dtype)  # type: ignore[arg-type]


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as handle:
            info = dict(line.split(":", 1) for line in handle)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [SMALL_N_LIMIT - 1, SMALL_N_LIMIT])
def test_both_sides_of_torchs_threshold_against_torch(n: int) -> None:
    """The 64-bit branch starts at ``n = SMALL_N_LIMIT`` (not 2**31): compared whole,
    int32 (the same ATen template as int64, 0.86 GB per copy instead of 1.7)."""
    if _available_bytes() < 4 * 2**30:
        pytest.skip("needs 4 GiB of free memory for two 0.86 GB permutations")
    expected = torch_randperm(n, 7, torch.int32)
    assert numpy.array_equal(randperm(n, 7, numpy.int32), expected)
