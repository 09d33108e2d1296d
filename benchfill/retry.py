"""The one place retries live: what is worth retrying, and how long to wait.

Retried: 429, 408, 5xx, timeouts and dropped connections. Not retried: any other 4xx (a bad
request stays bad). The SDKs' own retries are off (openai ``max_retries=0``, litellm
``num_retries=0``) so that attempts are counted once, here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

from benchfill.config import RetryConfig

# Exception classes (matched by name along the MRO, so no SDK is imported here) that mean the
# request may not have reached the model or no reply came back...
_NO_REPLY = {
    "APIConnectionError",  # openai / litellm: connection refused, reset, dropped
    "APITimeoutError",
    "Timeout",  # litellm
    "TimeoutException",  # httpx
    "TransportError",  # httpx: ConnectError, ReadError, RemoteProtocolError...
    "TimeoutError",
    "ConnectionError",  # builtins: ConnectionResetError, BrokenPipeError...
}
# ... or that the reply says to ask again, or was lost on the way back.
_TRANSIENT = _NO_REPLY | {"RateLimitError", "InternalServerError", "ServiceUnavailableError", "TruncatedReply"}


class TruncatedReply(Exception):
    """A 200 whose body is not a complete reply (cut off on the way): worth asking again."""


class AttemptTimeout(TimeoutError):
    """No whole reply within the attempt's ``timeout_s`` (the SDKs' timeouts bound each read, not the
    attempt): no reply, worth asking again."""


def status_of(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    if code is None:
        resp = getattr(exc, "response", None)
        code = getattr(resp, "status_code", None)
    return code if isinstance(code, int) else None


def is_retryable(exc: BaseException) -> bool:
    code = status_of(exc)
    if code is not None:
        # litellm labels some connection failures with a synthetic 500; that is transient too.
        # but not 507: a server out of storage (the simulated world's full disk) is not back in seconds
        return code in (408, 429) or (code >= 500 and code != 507)
    if isinstance(exc, asyncio.TimeoutError):
        return True
    return any(cls.__name__ in _TRANSIENT for cls in type(exc).__mro__)


def replied(exc: BaseException | None) -> bool:
    """Whether a failed call still heard from its endpoint: an error status is a reply, but not the 408 or
    the synthetic 500 that the SDKs give a timeout or a dropped connection."""
    if exc is None or status_of(exc) in (None, 408):
        return False
    return not any(cls.__name__ in _NO_REPLY for cls in type(exc).__mro__)


def async_retrying(cfg: RetryConfig, on_retry: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    return AsyncRetrying(**_kwargs(cfg, on_retry))


T = TypeVar("T")


async def call_with_retries(attempt: Callable[[], Awaitable[T]], cfg: RetryConfig,
                            on_retry: Callable[[RetryCallState | None], None] | None = None) -> T:
    """``await attempt()`` under the same policy as ``async_retrying``, made cheap for the common case.

    Nearly every probe call succeeds at once, and a tenacity ``AsyncRetrying`` loop costs about
    0.1 ms of CPU per call even then (a tenth of the whole request at a thousand requests a
    second). So the first attempt runs bare; only after a retryable failure does tenacity take
    over, with the attempt already spent counted against ``max_attempts`` and the backoff going on
    from where it stands.
    """
    try:
        return await attempt()
    except Exception as exc:  # noqa: BLE001  (re-raised unless the policy says retry)
        if cfg.max_attempts <= 1 or not is_retryable(exc):
            raise
        first = exc
    if on_retry is not None:
        on_retry(None)
    await asyncio.sleep(_wait_s(cfg, 1, first))
    async for tries in AsyncRetrying(**_kwargs(cfg, on_retry, spent=1)):
        with tries:
            return await attempt()
    raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover


def sync_retrying(cfg: RetryConfig, on_retry: Callable[[RetryCallState], None] | None = None) -> Retrying:
    return Retrying(**_kwargs(cfg, on_retry))


def retry_after_s(exc: BaseException | None) -> float:
    """The server's own ``Retry-After`` (seconds, or ``retry-after-ms``) on a 429/503, else 0."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000
        return float(headers.get("retry-after", 0))
    except (TypeError, ValueError):  # an HTTP date: fall back to our own backoff
        return 0.0


def _wait_s(cfg: RetryConfig, attempt: int, exc: BaseException | None) -> float:
    # Exponential backoff with jitter (as tenacity's wait_exponential_jitter: initial * 2^(k-1) plus
    # up to jitter_s) so that many clients hit by one 429 do not retry in step, but never sooner
    # than the server asked; max_wait_s caps both (tests set it to 0).
    try:
        backoff = cfg.initial_wait_s * 2 ** (attempt - 1) + random.uniform(0, cfg.jitter_s)
    except OverflowError:
        backoff = cfg.max_wait_s
    return min(cfg.max_wait_s, max(backoff, retry_after_s(exc)))


def _kwargs(cfg: RetryConfig, on_retry, spent: int = 0) -> dict:
    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return _wait_s(cfg, state.attempt_number + spent, exc)

    return dict(
        stop=stop_after_attempt(cfg.max_attempts - spent),
        wait=wait,
        retry=retry_if_exception(is_retryable),
        before_sleep=on_retry,
        reraise=True,
    )
