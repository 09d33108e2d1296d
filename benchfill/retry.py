"""The one place retries live: what is worth retrying, and how long to wait.

Retried: 429, 408, 5xx, timeouts and dropped connections. Not retried: any other 4xx (a bad
request stays bad). The SDKs' own retries are off (openai ``max_retries=0``, litellm
``num_retries=0``) so that attempts are counted once, here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from benchfill.config import RetryConfig

# Exception classes (matched by name along the MRO, so no SDK is imported here) that mean the
# request may not have reached the model or the reply was lost on the way back.
_TRANSIENT = {
    "APIConnectionError",  # openai / litellm: connection refused, reset, dropped
    "APITimeoutError",
    "Timeout",  # litellm
    "TimeoutException",  # httpx
    "TransportError",  # httpx: ConnectError, ReadError, RemoteProtocolError...
    "RateLimitError",
    "InternalServerError",
    "ServiceUnavailableError",
    "TimeoutError",
    "ConnectionError",  # builtins: ConnectionResetError, BrokenPipeError...
    "TruncatedReply",
}


class TruncatedReply(Exception):
    """A 200 whose body is not a complete reply (cut off on the way): worth asking again."""


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
        return code in (408, 429) or code >= 500
    if isinstance(exc, asyncio.TimeoutError):
        return True
    return any(cls.__name__ in _TRANSIENT for cls in type(exc).__mro__)


def async_retrying(cfg: RetryConfig, on_retry: Callable[[RetryCallState], None] | None = None) -> AsyncRetrying:
    return AsyncRetrying(**_kwargs(cfg, on_retry))


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


def _kwargs(cfg: RetryConfig, on_retry) -> dict:
    # Exponential backoff with jitter so that many clients hit by one 429 do not retry in step,
    # but never sooner than the server asked; max_wait_s caps both (tests set it to 0).
    backoff = wait_exponential_jitter(multiplier=cfg.initial_wait_s, max=cfg.max_wait_s, jitter=cfg.jitter_s)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        return min(cfg.max_wait_s, max(backoff(state), retry_after_s(exc)))

    return dict(
        stop=stop_after_attempt(cfg.max_attempts),
        wait=wait,
        retry=retry_if_exception(is_retryable),
        before_sleep=on_retry,
        reraise=True,
    )
