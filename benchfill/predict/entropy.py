"""Token-entropy features from scorer models over an OpenAI-compatible endpoint (paper section 3.3, 5.2).

The scorer answers the item (greedy, a bounded number of tokens) with ``logprobs`` and ``top_logprobs``
on; at each generated position l the entropy H_l = -sum_v p_l(v) log p_l(v) is taken over the
renormalized top-k next-token distribution (the paper renormalizes the top 100; OpenAI's API caps k at
20, vLLM allows more with ``--max-logprobs``). The trajectory (H_1..H_L) is summarized by its mean, spread
(sd, quantiles, top-decile mean), and shape (slope over relative position, first- and last-decile means,
total variation). With several scorers, the pairwise absolute gaps between their summaries are added.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from benchfill.errors import ConfigError, EndpointError
from benchfill.redact import redact_url, scrub, url_credentials

log = logging.getLogger("benchfill.predict")

# A request gives up after TRIES tries of timeout_s each (the openai client's retries cover timeouts,
# dropped connections, 429 and 5xx): bounded, so a scorer that takes connections and never answers fails
# the run in minutes, not never; the wait is said every STALL_S of silence meanwhile.
TRIES = 3
STALL_S = 60.0

SUMMARY_NAMES = ["mean", "sd", "q10", "q25", "q50", "q75", "q90", "top10_mean", "slope",
                 "first_decile", "last_decile", "total_variation", "n_tokens"]


def token_entropy(top_logprobs: Sequence[float]) -> float:
    """Shannon entropy (nats) of the renormalized distribution over the given top-k log-probabilities."""
    lp = np.asarray(top_logprobs, dtype=float)
    if lp.size == 0:
        return 0.0
    p = np.exp(lp - lp.max())
    p /= p.sum()
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


def summarize(H: Sequence[float]) -> np.ndarray:
    """The trajectory summaries named in SUMMARY_NAMES; an empty trajectory gives zeros."""
    h = np.asarray(H, dtype=float)
    n = h.size
    if n == 0:
        return np.zeros(len(SUMMARY_NAMES))
    q = np.quantile(h, [0.1, 0.25, 0.5, 0.75, 0.9])
    k = max(1, n // 10)
    top = np.sort(h)[-k:].mean()
    pos = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
    slope = float(np.polyfit(pos, h, 1)[0]) if n > 1 else 0.0
    tv = float(np.abs(np.diff(h)).sum() / (n - 1)) if n > 1 else 0.0  # per step, so length does not drive it
    return np.array([h.mean(), h.std(), *q, top, slope, h[:k].mean(), h[-k:].mean(), tv, np.log1p(n)])


@dataclass(frozen=True)
class Scorer:
    """A scorer model on an endpoint: ``MODEL@BASE_URL``; the key comes from ``api_key_env`` if set."""

    model: str
    base_url: str
    api_key_env: str = "BENCHFILL_SCORER_API_KEY"
    top_logprobs: int = 20
    max_tokens: int = 256

    @classmethod
    def parse(cls, spec: str, where: str = "--scorer", **kw) -> Scorer:
        """``MODEL@URL``; a URL with credentials (user-info, a secret in its query string) is refused, as
        the config refuses an endpoint's: the spec is written into the predictor file."""
        model, sep, url = spec.partition("@")
        if not sep or not model or not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where} {model + sep + redact_url(url)!r}: expected MODEL@http(s)://host:port/v1")
        what = url_credentials(url, user=True)
        if what:
            raise ConfigError(f"{where} {model}: the URL carries {what}; leave it out and put the scorer's key "
                              f"in {kw.get('api_key_env', cls.api_key_env)}")
        return cls(model=model, base_url=url, **kw)


def progress_lines(say: Callable[[str], None], every: int = 50) -> Callable[[Scorer, int, int], None]:
    """An ``on_progress`` that says "scorer M: n/N items" every ``every`` items and at the last one."""
    def on_progress(s: Scorer, done: int, total: int) -> None:
        if done % every == 0 or done == total:
            say(f"scorer {s.model}: {done}/{total} items")
    return on_progress


class EntropyFeatures:
    """Callable texts -> (names, matrix): each scorer's summaries, then the cross-scorer gaps.

    ``cache``: a JSON-lines file of trajectories, read at start and appended to as each reply arrives, so
    that scoring thousands of items with a real model resumes where a crash or a stop left it. A
    trajectory is kept under the scorer's model name, ``max_tokens`` and ``top_logprobs`` and the text's
    digest, not its URL (the same model served on another port is the same scorer). ``on_progress`` is
    called with (scorer, done, total) as replies arrive; ``on_stall`` (default: the ``benchfill.predict``
    logger) with one line each ``stall_s`` seconds that no reply arrives, naming the scorer, its URL and
    the requests in flight. Each request waits ``timeout_s`` for its answer, ``TRIES`` times at most.
    """

    def __init__(self, scorers: Sequence[Scorer], concurrency: int = 8, timeout_s: float = 120.0,
                 cache: str | None = None, on_progress: Callable[[Scorer, int, int], None] | None = None,
                 on_stall: Callable[[str], None] | None = None, stall_s: float = STALL_S):
        if not scorers:
            raise ConfigError("entropy features need at least one scorer")
        self.scorers = list(scorers)
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self._clients: dict[Scorer, object] = {}
        self.cache = cache
        self.on_progress = on_progress
        self.on_stall = on_stall or log.warning
        self.stall_s = stall_s
        self.memo: dict[tuple, list[float]] = {}
        self.computed = 0  # trajectories asked of a scorer (not from the cache)
        self._lock = threading.Lock()
        if cache and os.path.isdir(cache):
            raise ConfigError(f"--scorer-cache {cache}: a folder; give a file (JSON lines)")
        if cache and os.path.exists(cache):
            self._read_cache(cache)

    @staticmethod
    def _key(s: Scorer, text: str) -> tuple:
        return (s.model, s.max_tokens, s.top_logprobs, hashlib.blake2b(text.encode(), digest_size=16).hexdigest())

    def _read_cache(self, path: str) -> None:
        good = 0  # bytes up to the last whole record
        with open(path, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                if not raw.endswith(b"\n"):  # the last line, cut by a crash mid-write: dropped, scored again
                    break
                try:
                    r = json.loads(raw)
                    key = (r["model"], r["max_tokens"], r["top_logprobs"], r["digest"])
                    H = [float(h) for h in r["H"]]
                except (ValueError, KeyError, TypeError):
                    raise ConfigError(f"{path}:{n}: not a trajectory record of the entropy cache") from None
                self.memo[key] = H
                good += len(raw)
        if good < os.path.getsize(path):
            with open(path, "r+b") as fh:
                fh.truncate(good)

    def _remember(self, key: tuple, H: list[float]) -> None:
        with self._lock:
            self.memo[key] = H
            self.computed += 1
            if self.cache:
                rec = {"model": key[0], "max_tokens": key[1], "top_logprobs": key[2], "digest": key[3], "H": H}
                try:
                    os.makedirs(os.path.dirname(os.path.abspath(self.cache)), exist_ok=True)
                    with open(self.cache, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(rec) + "\n")
                except OSError as exc:  # a full disk, a folder made read-only: the scorer's answer is not kept
                    # (a line cut short is dropped when the cache is read again); the answers before it are
                    raise ConfigError(f"{self.cache}: cannot write the scorer cache ({exc.strerror or exc}); the "
                                      f"answers written before this one are kept there, and a rerun once it can "
                                      f"be written asks only for the rest") from None

    def _client(self, s: Scorer):
        if s not in self._clients:
            from openai import OpenAI, Timeout

            from benchfill import proxies

            proxies.prepare()

            # A host that does not take the connection is known in seconds; the answer may take minutes.
            # The SDK's own Timeout: its transport (httpx2) refuses another library's (httpx's) from 2.17 on.
            timeout = Timeout(self.timeout_s, connect=min(10.0, self.timeout_s))
            self._clients[s] = OpenAI(base_url=s.base_url, api_key=os.environ.get(s.api_key_env) or "none",
                                      timeout=timeout, max_retries=TRIES - 1)
        return self._clients[s]

    def trajectory(self, s: Scorer, text: str) -> list[float]:
        import openai

        try:
            resp = self._client(s).chat.completions.create(
                model=s.model, messages=[{"role": "user", "content": text}], temperature=0.0,
                max_tokens=s.max_tokens, logprobs=True, top_logprobs=s.top_logprobs)
        except openai.APITimeoutError:  # a subclass of APIConnectionError, but the connection was made
            raise EndpointError(f"scorer {s.model}@{s.base_url}: no answer within {self.timeout_s:g} s "
                                f"({TRIES} tries)") from None
        except openai.APIConnectionError as exc:
            said = scrub(str(exc), env=[s.api_key_env])
            raise EndpointError(f"scorer {s.model}@{s.base_url}: cannot connect ({said})") from None
        except openai.APIStatusError as exc:  # the body may echo the request's headers, the key among them
            raise EndpointError(f"scorer {s.model}@{s.base_url}: HTTP {exc.status_code}: "
                                f"{scrub(exc.message, env=[s.api_key_env])}") from None
        lp = resp.choices[0].logprobs
        if lp is None or not lp.content:
            raise EndpointError(f"scorer {s.model}@{s.base_url}: the reply carries no logprobs")
        return [token_entropy([t.logprob for t in (tok.top_logprobs or [tok])]) for tok in lp.content]

    def names(self) -> list[str]:
        names = [f"{s.model}:{n}" for s in self.scorers for n in SUMMARY_NAMES]
        for a in range(len(self.scorers)):
            for b in range(a + 1, len(self.scorers)):
                names += [f"gap:{self.scorers[a].model}-{self.scorers[b].model}:{n}" for n in SUMMARY_NAMES]
        return names

    def _ask(self, s: Scorer, texts: Sequence[str]) -> list[list[float]]:
        """Each text's trajectory, from the memo or asked of ``s``, ``concurrency`` requests at a time.

        The requests run on daemon threads that nobody waits for: on Ctrl-C, SIGTERM or the first error
        this returns at once, where a ThreadPoolExecutor would wait, at its exit and again at the
        interpreter's, for every request in flight to time out (minutes with a scorer that never answers).
        A thread left behind takes no new text, and still caches the answer it gets.
        """
        total = len(texts)
        got: list[list[float] | None] = [self.memo.get(self._key(s, t)) for t in texts]
        done = 0
        for H in got:
            if H is not None:
                done += 1
                self._said(s, done, total)
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for k, H in enumerate(got):
            if H is None:
                todo.put(k)
        replies: queue.SimpleQueue[tuple[int, list[float] | None, BaseException | None]] = queue.SimpleQueue()
        stop = threading.Event()

        def work() -> None:
            while not stop.is_set():
                try:
                    k = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    H = self.trajectory(s, texts[k])
                    # (in the try: a cache it cannot write ended this thread with nothing said, and the
                    # caller waited for its answer for ever, saying the scorer had stopped answering)
                    self._remember(self._key(s, texts[k]), H)
                except BaseException as exc:  # raised by the caller, on its own thread
                    replies.put((k, None, exc))
                    return
                replies.put((k, H, None))

        workers = min(self.concurrency, total - done)
        for n in range(workers):
            threading.Thread(target=work, name=f"benchfill-scorer-{n}", daemon=True).start()
        try:
            quiet_since, stalls = time.monotonic(), 0
            while done < total:
                try:
                    k, H, exc = replies.get(timeout=max(0.0, quiet_since + (stalls + 1) * self.stall_s
                                                        - time.monotonic()))
                except queue.Empty:
                    stalls += 1
                    waiting = min(workers, total - done)  # while texts remain, each worker holds one request
                    self.on_stall(f"scorer {s.model} at {s.base_url}: {waiting} request{'s' * (waiting != 1)} "
                                  f"in flight, no answer for {time.monotonic() - quiet_since:.0f} s")
                    continue
                if exc is not None:
                    raise exc
                got[k] = H
                done += 1
                quiet_since, stalls = time.monotonic(), 0
                self._said(s, done, total)
        finally:
            stop.set()
        return got  # type: ignore[return-value]  # every entry filled above

    def _said(self, s: Scorer, done: int, total: int) -> None:
        if self.on_progress:
            self.on_progress(s, done, total)

    def __call__(self, texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
        per_scorer = []
        # each distinct text asked once: a server's answers at temperature 0 still vary a little with what
        # else shares its batch, and a text asked twice at once would get two trajectories, not one
        distinct = list(dict.fromkeys(texts))
        for s in self.scorers:
            got = self._ask(s, distinct)
            summary = dict(zip(distinct, (summarize(h) for h in got), strict=True))
            per_scorer.append(np.array([summary[t] for t in texts]).reshape(len(texts), len(SUMMARY_NAMES)))
        cols = list(per_scorer)
        for a in range(len(per_scorer)):
            for b in range(a + 1, len(per_scorer)):
                cols.append(np.abs(per_scorer[a] - per_scorer[b]))
        return self.names(), np.hstack(cols)
