"""Feature families computed from an item's text before any rollout (the paper's section 3.3).

Each family is a named block that can be switched on and off: ``random`` (a control that carries no
information), ``length`` (the baseline log(1 + |text|)), ``structural`` (counts of numbers, formulas,
code lines, options, sentences), ``embedding`` (a sentence embedding, reduced by PCA inside each
fold: see models.py) and ``entropy`` (token-entropy summaries from scorer models: entropy.py).
A block records how many PCA components it wants; the reduction itself is fitted on training rows only.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchfill.errors import ConfigError

FAMILIES = ("random", "length", "structural", "embedding", "entropy")
DEFAULT_FAMILIES = ("length", "structural", "embedding")
EMBEDDING_COMPONENTS = 16  # PCA components kept from the embedding (fitted per fold)


@dataclass
class FeatureBlock:
    family: str
    names: list[str]
    X: np.ndarray  # shape (n_items, n_features)
    components: int | None = None  # PCA components to keep when fitting; None keeps the columns as they are

    def rows(self, idx: np.ndarray) -> FeatureBlock:
        return FeatureBlock(self.family, self.names, self.X[idx], self.components)


def parse_families(text: str | Sequence[str]) -> tuple[str, ...]:
    names = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    bad = [n for n in names if n not in FAMILIES]
    if bad or not names:
        raise ConfigError(f"--families: unknown family {', '.join(bad) or '(none given)'}; choose from {', '.join(FAMILIES)}")
    return tuple(dict.fromkeys(names))


def random_features(texts: Sequence[str], seed: int = 0) -> np.ndarray:
    """x ~ N(0, 1), a fixed function of (seed, text), so a new item gets its draw too and reruns agree."""
    out = np.empty((len(texts), 1))
    for k, t in enumerate(texts):
        h = hashlib.blake2b(f"{seed}\x00{t}".encode(), digest_size=8).digest()
        out[k, 0] = np.random.default_rng(int.from_bytes(h, "little")).standard_normal()
    return out


def length_features(texts: Sequence[str]) -> np.ndarray:
    """The paper's baseline: log(1 + |C_t|), |C_t| in characters."""
    return np.log1p(np.array([len(t) for t in texts], dtype=float))[:, None]


_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:[.,]\d+)?")
_LATEX = re.compile(r"\\[A-Za-z]+|\$[^$]+\$|[\^_]\{")
_OPERATOR = re.compile(r"[=<>+*/^]|\\le|\\ge|\u2264|\u2265")
_CODE_LINE = re.compile(r"^\s*(?:def |class |return\b|import |from \w+ import|for .*:|if .*:|while .*:|>>> |#|@)|[;{}]\s*$")
_OPTION_LINE = re.compile(r"^[A-Z][.)]\s")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
_WORD = re.compile(r"[A-Za-z]+")

STRUCTURAL_NAMES = [
    "log_numbers", "log_latex", "log_operators", "log_code_lines", "n_options", "log_sentences",
    "log_lines", "log_words", "mean_word_len", "frac_digits", "frac_upper", "n_questions",
]


def structural_features(texts: Sequence[str]) -> np.ndarray:
    """Surface structure of the text; counts go through log1p so a long item does not dominate."""
    rows = []
    for t in texts:
        lines = t.splitlines() or [""]
        words = _WORD.findall(t)
        n = max(len(t), 1)
        rows.append([
            np.log1p(len(_NUMBER.findall(t))),
            np.log1p(len(_LATEX.findall(t))),
            np.log1p(len(_OPERATOR.findall(t))),
            np.log1p(sum(1 for ln in lines if _CODE_LINE.search(ln))),
            float(sum(1 for ln in lines if _OPTION_LINE.match(ln))),
            np.log1p(len(_SENTENCE_END.findall(t))),
            np.log1p(len(lines)),
            np.log1p(len(words)),
            float(np.mean([len(w) for w in words])) if words else 0.0,
            sum(c.isdigit() for c in t) / n,
            sum(c.isupper() for c in t) / n,
            float(t.count("?")),
        ])
    return np.array(rows, dtype=float).reshape(len(texts), len(STRUCTURAL_NAMES))


def build_blocks(
    texts: Sequence[str],
    families: Sequence[str],
    *,
    seed: int = 0,
    embedder: Callable[[Sequence[str]], np.ndarray] | None = None,
    entropy: Callable[[Sequence[str]], tuple[list[str], np.ndarray]] | None = None,
    embedding_components: int = EMBEDDING_COMPONENTS,
) -> list[FeatureBlock]:
    """The chosen families' blocks for ``texts``; ``embedder`` and ``entropy`` are needed only if chosen."""
    blocks: list[FeatureBlock] = []
    for fam in families:
        if fam == "random":
            blocks.append(FeatureBlock(fam, ["random"], random_features(texts, seed)))
        elif fam == "length":
            blocks.append(FeatureBlock(fam, ["log_length"], length_features(texts)))
        elif fam == "structural":
            blocks.append(FeatureBlock(fam, list(STRUCTURAL_NAMES), structural_features(texts)))
        elif fam == "embedding":
            if embedder is None:
                raise ConfigError("families: 'embedding' needs an embedder (--embedder)")
            E = np.asarray(embedder(texts), dtype=float)
            blocks.append(FeatureBlock(fam, [f"emb{k}" for k in range(E.shape[1])], E,
                                       components=min(embedding_components, E.shape[1])))
        elif fam == "entropy":
            if entropy is None:
                raise ConfigError("families: 'entropy' needs at least one scorer (--scorer MODEL@URL)")
            names, H = entropy(texts)
            blocks.append(FeatureBlock(fam, list(names), np.asarray(H, dtype=float)))
        else:
            raise ConfigError(f"families: unknown family {fam!r}; choose from {', '.join(FAMILIES)}")
    return blocks


def describe(blocks: Sequence[FeatureBlock]) -> dict[str, Any]:
    return {b.family: {"columns": len(b.names), "pca": b.components} for b in blocks}
