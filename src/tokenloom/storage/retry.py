"""Explicit, bounded retries for object-storage requests.

Megatron leaves retries to whatever botocore version is installed and never retries
a truncated body; MSC does not retry 500s or dropped connections.  Here every request
goes through :func:`call_with_retries`: botocore's own retries are switched off, and
throttling, 5xx answers, timeouts, resets and truncated bodies are retried with
exponential back-off and full jitter, each retry logged (WARNING, logger
``tokenloom.storage``) with the object's URL.  Anything else (404, 403, bad input) is
raised at once.
"""

from __future__ import annotations

import http.client
import logging
import random
import time
from collections.abc import Callable, Iterator
from typing import Optional, TypeVar

from tokenloom.attributes import read_attribute
from tokenloom.errors import StorageError
from tokenloom.process_caches import register_state
from tokenloom.storage.config import RetryPolicy

logger = logging.getLogger("tokenloom.storage")

T = TypeVar("T")

THROTTLE = "throttled"
TRANSIENT = "transient"

_THROTTLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "ProvisionedThroughputExceededException",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "RequestTimeout",
        "ServiceUnavailable",
        "RequestTimeTooSkewed",
        "BadDigest",
        "IncompleteBody",
    }
)


class TruncatedBodyError(StorageError):
    """A response body ended before the advertised length (retried)."""


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen = 0
    current: Optional[BaseException] = error
    while current is not None and seen < 8:
        yield current
        seen += 1
        current = current.__cause__ or current.__context__


def _classify_one(error: BaseException) -> Optional[str]:
    if isinstance(error, TruncatedBodyError):
        return TRANSIENT
    response = read_attribute(error, "response", None)
    if isinstance(response, dict) and "Error" in response:  # botocore ClientError
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _THROTTLE_CODES or status in (429, 503):
            return THROTTLE
        if code in _TRANSIENT_CODES or status >= 500 or status == 408:
            return TRANSIENT
        return None
    name = type(error).__name__
    module = type(error).__module__
    if module.startswith(("botocore", "urllib3")) and name in {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "ProtocolError",
        "ConnectionError",
        "HTTPClientError",
        "ProxyConnectionError",
    }:
        return TRANSIENT
    if module.startswith("multistorageclient") and name == "RetryableError":
        return TRANSIENT
    if isinstance(
        error,
        (ConnectionError, TimeoutError, http.client.IncompleteRead, http.client.RemoteDisconnected),
    ):
        return TRANSIENT
    return None


def classify(error: BaseException) -> Optional[str]:
    """``"throttled"``, ``"transient"`` (both retried) or None (raised at once)."""
    for link in _chain(error):
        kind = _classify_one(link)
        if kind is not None:
            return kind
        response = read_attribute(link, "response", None)
        if isinstance(response, dict) and "Error" in response:
            return None  # a definite, non-retryable server answer
    return None


def describe(error: BaseException) -> str:
    """``Type: message`` of the most specific error in the chain (botocore's when wrapped)."""
    for link in _chain(error):
        if type(link).__module__.startswith(("botocore", "urllib3")):
            return f"{type(link).__name__}: {link}"
    return f"{type(error).__name__}: {error}"


def backoff_delay(policy: RetryPolicy, attempt: int, kind: str, rng: random.Random) -> float:
    """Seconds to sleep after failed attempt ``attempt`` (1-based): full jitter."""
    base = policy.throttle_backoff_s if kind == THROTTLE else policy.initial_backoff_s
    return rng.uniform(0.0, min(policy.max_backoff_s, base * (2 ** (attempt - 1))))


_RNG = random.Random()
register_state(
    _RNG,
    "storage.retry: the backoff jitter",
    "the random generator of the retries' full jitter, seeded again in every child made "
    "by fork (as the random module's own), so that workers do not retry in step",
    _RNG.seed,
    after_fork_in_child=_RNG.seed,
)


def call_with_retries(
    operation: Callable[[], T],
    *,
    url: str,
    action: str,
    policy: RetryPolicy,
    before_retry: Optional[Callable[[], None]] = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``operation`` until it succeeds, fails for good, or ``policy`` is spent.

    Non-retryable errors propagate unchanged; exhausting the attempts raises
    :class:`StorageError` naming ``url``. ``before_retry`` runs before each new attempt
    (e.g. to drop a broken connection).
    """
    attempt = 1
    while True:
        try:
            return operation()
        except Exception as error:
            kind = classify(error)
            if kind is None:
                raise
            if attempt >= policy.max_attempts:
                raise StorageError(
                    f"{url}: {action} failed {attempt} time(s), the last with "
                    f"{describe(error)}; the endpoint may be down or overloaded. Check it, or "
                    "raise ObjectStorageConfig.retry (RetryPolicy.max_attempts / timeouts)"
                ) from error
            delay = backoff_delay(policy, attempt, kind, _RNG)
            logger.warning(
                "%s: %s failed (%s, %s); retry %d of %d in %.2f s",
                url,
                action,
                kind,
                describe(error),
                attempt,
                policy.max_attempts - 1,
                delay,
            )
            sleep(delay)
            if before_retry is not None:
                before_retry()
            attempt += 1


__all__ = [
    "TruncatedBodyError",
    "call_with_retries",
    "classify",
    "describe",
    "backoff_delay",
    "THROTTLE",
    "TRANSIENT",
]
