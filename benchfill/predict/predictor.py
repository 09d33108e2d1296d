"""A trained difficulty predictor: fit on labelled items, saved as JSON, scoring one item dict at a time.

The stated uncertainty of a prediction is the sd of the out-of-fold residuals z(beta) - zhat from the
cross-validation run at training time (K-fold over the training items): an honest spread of the error on
items the model had not seen. Predictions are given on three scales: z (standardized within the
benchmark, what the model learns), b (the benchmark's IRT difficulty, b = mean_b + sd_b z) and the [0, 1]
axis of the coverage tools ((b - b_min) / (b_max - b_min)), each with its sd.
"""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchfill.errors import ConfigError, DataError
from benchfill.predict.entropy import EntropyFeatures, Scorer, progress_lines
from benchfill.predict.evaluate import CrossValidation, cross_validate, make_splits
from benchfill.predict.features import build_blocks
from benchfill.predict.models import DifficultyModel
from benchfill.predict.target import (
    TEXT_FIELDS,
    FieldFallbackWarning,
    LabelledItems,
    item_text,
    resolve_text_fields,
)

FORMAT = "benchfill-difficulty-predictor/1"
log = logging.getLogger("benchfill.predict")


@dataclass
class Prediction:
    z: float  # predicted z(beta)
    sd: float  # its uncertainty: the cross-validated residual sd
    benchmark: str | None = None
    difficulty: float | None = None  # b on the benchmark's IRT scale
    difficulty_sd: float | None = None
    axis: float | None = None  # the coverage tools' normalized difficulty in [0, 1] (not clipped)
    axis_sd: float | None = None
    # features of the item's text beyond the training items' range by more than 3 training sds (CLIP_SDS):
    # clipped there, so the prediction extrapolates and its error may well exceed sd
    beyond_training: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Predictor:
    families: list[str]
    model: DifficultyModel
    residual_sd: float
    embedder: str = "hashing"
    scorers: list[str] = field(default_factory=list)
    seed: int = 0
    text_field: str | None = None
    options_field: str | None = None
    scales: dict[str, dict[str, float]] = field(default_factory=dict)
    cv: dict[str, Any] = field(default_factory=dict)
    _embed: Callable | None = field(default=None, repr=False)
    _entropy: EntropyFeatures | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # each scorer as MODEL@URL, refused with credentials in its URL: to_dict writes them to a file
        for s in self.scorers:
            Scorer.parse(s, where="scorer")

    def _features(self):
        if "embedding" in self.families and self._embed is None:
            from benchfill.predict.embed import get_embedder

            self._embed = get_embedder(self.embedder)
        if "entropy" in self.families and self._entropy is None:
            self._entropy = EntropyFeatures([Scorer.parse(s) for s in self.scorers])
        return self._embed, self._entropy

    def with_scorer(self, cache: str | None = None, progress: Callable[[str], None] | None = None,
                    concurrency: int | None = None) -> Predictor:
        """How the scorers are asked: keep their answers in ``cache`` (JSON lines; a rerun asks only for the
        rest), say how far they are through ``progress`` (a real scorer answers an item in seconds; a scorer
        silent for a minute is named there too), and ask
        ``concurrency`` items at a time (default 8; 1 makes a server's answers repeatable, see
        docs/predict.md). No-op without the entropy family."""
        if "entropy" in self.families:
            self._entropy = EntropyFeatures([Scorer.parse(s) for s in self.scorers], cache=cache,
                                            concurrency=concurrency or 8,
                                            on_progress=progress_lines(progress) if progress else None,
                                            on_stall=progress)
        return self

    def warm_up(self) -> Predictor:
        """Load the embedding model (if any) now, so the first scored item does not pay for it."""
        embed, _ = self._features()
        if embed is not None:
            embed(["warm up"])
        return self

    def predict_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self._predict(texts)[0]

    def _predict(self, texts: Sequence[str]) -> tuple[np.ndarray, list[list[str]]]:
        embed, entropy = self._features()
        blocks = build_blocks(texts, self.families, seed=self.seed, embedder=embed, entropy=entropy)
        return self.model.predict(blocks), self.model.beyond(blocks)

    def predict_items(self, items: Sequence[dict[str, Any]], benchmark: str | None = None) -> list[Prediction]:
        if benchmark is None and len(self.scales) == 1:
            benchmark = next(iter(self.scales))
        if benchmark is not None and benchmark not in self.scales:
            raise ConfigError(f"benchmark {benchmark!r}: the predictor was trained on {', '.join(self.scales)}")
        # one field for all the items, never a per-item mix; another than the trained-on one is said
        # (FieldFallbackWarning), and a choice that is not clear-cut is a DataError
        fields = resolve_text_fields(items, self.text_field, self.options_field)
        for note in fields.notes:
            warnings.warn(note, FieldFallbackWarning, stacklevel=2)
        texts = [item_text(it, fields.text_field, fields.options_field) for it in items]
        z, beyond = self._predict(texts)
        out = []
        for zi, far in zip(z, beyond, strict=True):
            p = Prediction(z=float(zi), sd=self.residual_sd, benchmark=benchmark, beyond_training=far)
            if benchmark is not None:
                sc = self.scales[benchmark]
                p.difficulty = sc["mean"] + sc["sd"] * p.z
                p.difficulty_sd = sc["sd"] * p.sd
                span = sc["b_max"] - sc["b_min"]
                if span > 0:
                    p.axis = (p.difficulty - sc["b_min"]) / span
                    p.axis_sd = p.difficulty_sd / span
            out.append(p)
        return out

    def predict_item(self, item: dict[str, Any], benchmark: str | None = None) -> Prediction:
        """One item dict (the benchmark's fields, e.g. ``{"problem": ...}``) -> its predicted difficulty."""
        if not isinstance(item, dict):  # predict_items would name it items[0], of a list this caller never passed
            raise DataError(f"item: expected a dict of the item's fields, got {type(item).__name__}")
        return self.predict_items([item], benchmark)[0]

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "families": self.families, "embedder": self.embedder, "scorers": self.scorers,
                "seed": self.seed, "text_field": self.text_field, "options_field": self.options_field,
                "residual_sd": self.residual_sd, "scales": self.scales, "cv": self.cv,
                "model": self.model.to_dict()}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # a temp file of its own (not NAME.tmp): two saves to one path at once each rename a whole file
        from benchfill.outputs import named, shared_mode, temp_path

        tmp = temp_path(path.parent, path.name)  # a killed save's is removed by the next
        try:
            tmp.write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")
            os.chmod(tmp, shared_mode())  # mkstemp makes 0600; a predictor is for sharing
            os.replace(tmp, path)
        except OSError as exc:
            named(exc, path)
            raise
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Predictor:
        path = Path(path)
        from benchfill.data import loads_json, read_text

        try:
            d = loads_json(read_text(path))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: not a predictor file: {exc.msg}") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise DataError(f"{path}: not a predictor file (format is not {FORMAT})")
        check_predictor_dict(d, path)
        try:
            return cls(families=list(d["families"]), model=DifficultyModel.from_dict(d["model"]),
                       residual_sd=float(d["residual_sd"]), embedder=d["embedder"], scorers=list(d["scorers"]),
                       seed=int(d["seed"]), text_field=d.get("text_field"), options_field=d.get("options_field"),
                       scales=d["scales"], cv=d.get("cv", {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{path}: predictor field {exc} missing or malformed") from None
        except ConfigError as exc:  # a scorer with credentials in its URL, written before they were refused
            raise DataError(f"{path}: {exc}") from None


def check_predictor_dict(d: dict[str, Any], where: str | Path) -> None:
    """Refuse a predictor file whose parts do not fit together, naming the field (DataError).

    A file edited by hand or cut short must fail when it is loaded, in one line, not at the first
    prediction with a matmul error: the families, the embedder, the scales, and the model's transforms
    and coefficients are checked against each other.
    """
    from benchfill.predict.embed import EMBEDDERS, EMBEDDING_DIMS
    from benchfill.predict.entropy import SUMMARY_NAMES
    from benchfill.predict.features import FAMILIES, STRUCTURAL_NAMES

    def bad(name: str, what: str) -> DataError:
        return DataError(f"{where}: field {name!r} {what}")

    families = d.get("families")
    if not isinstance(families, list) or not families or not all(isinstance(f, str) for f in families):
        raise bad("families", "missing" if families is None else "must be a non-empty list of feature families")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown or len(set(families)) != len(families):
        raise bad("families", f"names {'unknown family ' + repr(unknown[0]) if unknown else 'a family twice'}; "
                  f"choose from {', '.join(FAMILIES)}")
    embedder = d.get("embedder")
    if embedder not in EMBEDDERS:
        raise bad("embedder", f"is {embedder!r}; choose from {', '.join(EMBEDDERS)}")
    scorers = d.get("scorers")
    if not isinstance(scorers, list) or not all(isinstance(s, str) for s in scorers):
        raise bad("scorers", "must be a list of MODEL@URL strings")
    if ("entropy" in families) != bool(scorers):
        raise bad("scorers", "must name a scorer exactly when the 'entropy' family is used")
    if not isinstance(d.get("seed"), int) or isinstance(d.get("seed"), bool):
        raise bad("seed", f"is {d.get('seed')!r}, not an integer")
    sd = d.get("residual_sd")
    if not _is_number(sd) or sd < 0 or math.isinf(sd):  # NaN passes: a cross-validation without a residual
        raise bad("residual_sd", f"is {sd!r}, not a number >= 0")
    for name in ("text_field", "options_field"):
        if d.get(name) is not None and not isinstance(d[name], str):
            raise bad(name, f"is {d[name]!r}, not a field name")
    scales = d.get("scales")
    if not isinstance(scales, dict):
        raise bad("scales", "must map each benchmark to its mean, sd, b_min and b_max")
    for bench, sc in scales.items():
        for key in ("mean", "sd", "b_min", "b_max"):
            v = sc.get(key) if isinstance(sc, dict) else None
            if not _is_number(v) or not math.isfinite(v):
                raise bad(f"scales.{bench}.{key}", "missing" if v is None else f"is {_json(v)}, not a finite number")
        # b = mean + sd z and axis = (b - b_min) / (b_max - b_min): a zero sd or span makes every item alike
        if sc["sd"] <= 0:
            raise bad(f"scales.{bench}.sd", f"is {sc['sd']!r}; it must be > 0")
        if sc["b_min"] >= sc["b_max"]:
            raise bad(f"scales.{bench}.b_min", f"is {sc['b_min']!r}, not below b_max {sc['b_max']!r}")

    model = d.get("model")
    if not isinstance(model, dict):
        raise bad("model", "missing or not an object")
    if model.get("regressor", "ridge") != "ridge":
        raise bad("model.regressor", f"is {model.get('regressor')!r}; only a ridge predictor is saved")
    for key in ("alpha", "intercept"):
        if not _is_number(model.get(key)) or not math.isfinite(model[key]):
            raise bad(f"model.{key}", f"is {model.get(key)!r}, not a finite number")
    if model.get("families") != families:
        raise bad("families", f"{families} differ from the families the model was fitted on, {model.get('families')}")
    widths = {"random": 1, "length": 1, "structural": len(STRUCTURAL_NAMES), "embedding": EMBEDDING_DIMS[embedder],
              "entropy": len(SUMMARY_NAMES) * (len(scorers) + len(scorers) * (len(scorers) - 1) // 2)}
    transforms = model.get("transforms")
    if not isinstance(transforms, list) or len(transforms) != len(families):
        raise bad("model.transforms", f"must hold one transform per family ({len(families)})")
    n_coef = 0
    for k, (fam, tr) in enumerate(zip(families, transforms, strict=True)):
        name = f"model.transforms[{k}]"
        cols = widths[fam]
        for key in ("mean", "scale"):
            v = tr.get(key) if isinstance(tr, dict) else None
            if not _is_list(v, cols):
                raise bad(f"{name}.{key}", f"must be {cols} numbers (the {fam!r} family's columns)")
            _check_entries(v, f"{name}.{key}", bad)
        if (tr.get("lo") is None) != (tr.get("hi") is None):  # the training range: both or neither
            raise bad(f"{name}.{'lo' if tr.get('lo') is None else 'hi'}", "missing where the other bound is given")
        for key in ("lo", "hi"):
            if tr.get(key) is not None:
                if not _is_list(tr[key], cols):
                    raise bad(f"{name}.{key}", f"must be null or {cols} numbers (the {fam!r} family's columns)")
                _check_entries(tr[key], f"{name}.{key}", bad)
        comps = tr.get("components")
        if comps is None:
            n_coef += cols
        elif isinstance(comps, list) and comps and len(comps) <= cols and all(_is_list(r, cols) for r in comps):
            for r, row in enumerate(comps):
                _check_entries(row, f"{name}.components[{r}]", bad)
            n_coef += len(comps)
        else:
            raise bad(f"{name}.components", f"must be null or rows of {cols} numbers")
    coef = model.get("coef")
    if not _is_list(coef, n_coef):
        size = len(coef) if isinstance(coef, list) else type(coef).__name__
        raise bad("model.coef", f"has {size} entries where the transforms give {n_coef} columns")
    _check_entries(coef, "model.coef", bad)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_list(v: Any, n: int) -> bool:
    return isinstance(v, list) and len(v) == n


def _check_entries(v: list[Any], name: str, bad: Callable[[str, str], DataError]) -> None:
    """Every entry a finite number: a null, NaN or string among them would make every prediction NaN or fail
    in numpy, and the count alone says nothing of which entry is wrong."""
    k = next((k for k, x in enumerate(v) if not (_is_number(x) and math.isfinite(x))), None)
    if k is not None:
        raise bad(name, f"has a non-number at index {k}: {_json(v[k])}; every entry must be a finite number")


def _json(v: Any) -> str:
    """A value as the file spells it (null, NaN, "x"), not as Python does."""
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def fold_count(n_items: int, folds: int) -> int:
    """K for K-fold over ``n_items``: ``folds``, or fewer so that each fold holds out three items or more (its
    rank correlation needs them). Fewer is said as a warning on the ``benchfill.predict`` logger (the CLI
    writes it as ``benchfill: warning: ...``), worded alike whether ``folds`` was chosen or is the default;
    below 2 it is left to the caller to refuse."""
    k = min(folds, n_items // 3)
    if 2 <= k < folds:
        log.warning("%d items allow at most %d folds of three or more; K-fold uses %d folds, not %d",
                    n_items, k, k, folds)
    return k


def train(
    labelled: LabelledItems,
    families: Sequence[str],
    *,
    embedder: str = "hashing",
    scorers: Sequence[str] = (),
    regressor: str = "ridge",
    folds: int = 10,
    seed: int = 0,
    text_field: str | None = None,
    options_field: str | None = None,
    progress: Callable[[str], None] | None = None,
    scorer_cache: str | None = None,
    scorer_concurrency: int | None = None,
) -> tuple[Predictor, CrossValidation]:
    """Cross-validate (K-fold, for the residual sd), then fit on every labelled item.

    ``scorer_cache``, ``scorer_concurrency``: how the scorers are asked (``Predictor.with_scorer``).
    ``text_field``: the field the predictor reads new items through; at least one training item must have it."""
    for what, names in (("families", families), ("scorers", scorers)):  # a bare string is a list of its letters
        if isinstance(names, (str, bytes)):
            raise ConfigError(f"{what}: expected a list of names, got str {names!r} (write [{names!r}])")
    if text_field is not None:
        if not isinstance(text_field, str):
            raise ConfigError(f"text_field: expected a field name (a string), got {type(text_field).__name__}")
        # The texts were read already (a missing field falls back to another), so a name no training item
        # has would only be saved, and every item scored later read through a field the training never saw.
        # Items pooled without their raw fields ({}) cannot tell, and are not asked.
        if any(labelled.items) and not any(isinstance(it.get(text_field), str) for it in labelled.items):
            have = sorted({f for it in labelled.items for f, v in it.items() if isinstance(v, str)} &
                          set(TEXT_FIELDS))
            raise ConfigError(f"text_field: no training item has a text field {text_field!r}"
                              + (f" (they have {', '.join(repr(f) for f in have)})" if have else ""))
    pred = Predictor(families=list(families), model=DifficultyModel(regressor=regressor, seed=seed),
                     residual_sd=float("nan"), embedder=embedder, scorers=list(scorers), seed=seed,
                     text_field=text_field, options_field=options_field, scales=dict(labelled.scales))
    embed, entropy = pred.with_scorer(scorer_cache, progress, scorer_concurrency)._features()
    blocks = build_blocks(labelled.texts, families, seed=seed, embedder=embed, entropy=entropy)
    k = fold_count(len(labelled), folds)
    if k < 2:
        raise DataError(f"{len(labelled)} items are too few to train a predictor: its stated error comes from "
                        "K-fold, which needs at least 6 (two folds of three held-out items or more)")
    cv = cross_validate(blocks, labelled.z, labelled.benchmark, make_splits("kfold", len(labelled), folds=k, seed=seed),
                        make_model=lambda: DifficultyModel(regressor=regressor, seed=seed), progress=progress)
    if np.isnan(cv.fold_rho).all():  # every fold predicted one value for all its items: it ranks nothing
        raise DataError(f"{len(labelled)} items: the families {', '.join(families)} give the same features for "
                        "every item (identical or empty texts?), so the predictor would rank nothing; nothing saved")
    pred.residual_sd = cv.residual_sd(labelled.z)
    pred.cv = cv.summary()
    pred.model.fit(blocks, labelled.z)
    return pred, cv
