"""TOKENLOOM_DISTRIBUTED_TIMEOUT_S and timeout_s=: finite seconds > 0, else a clear error."""

from __future__ import annotations

import pytest

from tokenloom.distributed import default_timeout_s, get_communicator
from tokenloom.errors import DistributedError


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "-inf", "ten", "1e400", "2e9"])
def test_a_bad_environment_timeout_names_the_variable(monkeypatch, value: str) -> None:
    monkeypatch.setenv("TOKENLOOM_DISTRIBUTED_TIMEOUT_S", value)
    with pytest.raises(DistributedError, match=f"TOKENLOOM_DISTRIBUTED_TIMEOUT_S={value!r}"):
        default_timeout_s()


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), 1e10, True, "x", None])
def test_a_bad_timeout_argument_is_refused(value: object) -> None:
    if value is None:  # None means the environment's (or the default) timeout
        assert get_communicator(timeout_s=None).timeout_s == default_timeout_s()
        return
    with pytest.raises(DistributedError, match="finite number of seconds > 0"):
        get_communicator(timeout_s=value)


def test_unset_or_empty_is_the_default_and_huge_values_are_kept(monkeypatch) -> None:
    monkeypatch.delenv("TOKENLOOM_DISTRIBUTED_TIMEOUT_S", raising=False)
    assert default_timeout_s() == 1800.0
    monkeypatch.setenv("TOKENLOOM_DISTRIBUTED_TIMEOUT_S", " ")
    assert default_timeout_s() == 1800.0
    monkeypatch.setenv("TOKENLOOM_DISTRIBUTED_TIMEOUT_S", "1e9")
    assert default_timeout_s() == 1e9  # about 32 years: effectively no limit, as asked
    monkeypatch.setenv("TOKENLOOM_DISTRIBUTED_TIMEOUT_S", "0.5")
    assert get_communicator().timeout_s == 0.5
