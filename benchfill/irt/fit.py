"""A fitted IRT scale: abilities, difficulties, and the map from b to z in [0, 1].

The normalization is fixed by the benchmark the scale was fitted on, so that a
new item calibrated later lands on the same axis (possibly outside [0, 1]).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, overload

import numpy as np

from benchfill import locks
from benchfill.coverage import z_of
from benchfill.matrix import first_repeat
from benchfill.outputs import named, shared_mode, temp_path


@dataclass
class IrtFit:
    model: str  # "1pl" or "2pl"
    engine: str  # "map" or "nuts"
    models: tuple[str, ...]
    item_ids: tuple[str, ...]
    ability: np.ndarray  # theta_j, shape (n_models,)
    ability_se: np.ndarray  # posterior sd (nuts) or Laplace standard error (map)
    difficulty: np.ndarray  # b_i, shape (n_items,)
    difficulty_se: np.ndarray
    chance: np.ndarray  # guessing floor g_i, shape (n_items,)
    discrimination: np.ndarray | None = None  # a_i for 2PL
    b_min: float = field(default=float("nan"))
    b_max: float = field(default=float("nan"))
    # Posterior draws (nuts only): shape (n_draws, n_items) / (n_draws, n_models).
    difficulty_draws: np.ndarray | None = None
    ability_draws: np.ndarray | None = None
    log_likelihood: float = float("nan")  # at the point estimate, for BIC
    diagnostics: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None

    def __post_init__(self) -> None:
        if np.isnan(self.b_min) or np.isnan(self.b_max):
            self.b_min = float(np.min(self.difficulty))
            self.b_max = float(np.max(self.difficulty))

    def __repr__(self) -> str:  # the default printed every id and array: 99,000 characters on mmlu-pro
        draws = "" if self.difficulty_draws is None else f", {len(self.difficulty_draws)} draws"
        return (f"IrtFit({self.model} by {self.engine}, {self.n_models} models x {self.n_items} items, "
                f"b in [{self.b_min:.3g}, {self.b_max:.3g}]{draws}, seed={self.seed})")

    @property
    def n_items(self) -> int:
        return len(self.item_ids)

    @property
    def n_models(self) -> int:
        return len(self.models)

    @overload
    def normalize(self, b: float) -> float: ...
    @overload
    def normalize(self, b: np.ndarray) -> np.ndarray: ...
    def normalize(self, b: np.ndarray | float) -> np.ndarray | float:
        """z = (b - b_min) / (b_max - b_min) on this benchmark's scale; not clipped."""
        b = z_of(b, "b", "a difficulty or an array of difficulties")
        span = self.b_max - self.b_min
        if span <= 0:
            # Every item at one difficulty: the scale degenerates; put them all mid-axis.
            return 0.5 if np.ndim(b) == 0 else np.full(np.shape(b), 0.5)
        return (b - self.b_min) / span

    @overload
    def denormalize(self, z: float) -> float: ...
    @overload
    def denormalize(self, z: np.ndarray) -> np.ndarray: ...
    def denormalize(self, z: np.ndarray | float) -> np.ndarray | float:
        return self.b_min + z_of(z, "z", "a normalized difficulty or an array of them") * (self.b_max - self.b_min)

    @property
    def z(self) -> np.ndarray:
        return self.normalize(self.difficulty)

    @property
    def z_draws(self) -> np.ndarray | None:
        """Each posterior draw normalized by its own min and max, as in Appendix C.6."""
        if self.difficulty_draws is None:
            return None
        d = self.difficulty_draws
        lo = d.min(axis=1, keepdims=True)
        span = d.max(axis=1, keepdims=True) - lo
        return np.where(span > 0, (d - lo) / np.where(span > 0, span, 1.0), 0.5)

    def in_order(self, item_ids: tuple[str, ...] | list[str]) -> IrtFit:
        """This fit with its items in the order ``item_ids`` gives (the same items): a response file
        whose rows come in another order describes the same benchmark. The scale is unchanged."""
        if tuple(item_ids) == self.item_ids:
            return self
        where = {i: k for k, i in enumerate(self.item_ids)}
        if len(item_ids) != len(where) or set(item_ids) != set(where):  # a KeyError, or a subset taken silently
            from benchfill.errors import DataError

            given, seen = set(item_ids), set()
            twice = [i for i in item_ids if i in seen or seen.add(i)]
            odd = [i for i in item_ids if i not in where] or [i for i in self.item_ids if i not in given] or twice
            raise DataError(f"item_ids: not this fit's {len(where)} items in another order (e.g. {odd[0]!r})")
        idx = np.array([where[i] for i in item_ids], dtype=int)

        def take(a: np.ndarray | None, axis: int = 0) -> np.ndarray | None:
            return None if a is None else np.take(a, idx, axis=axis)

        return replace(self, item_ids=tuple(item_ids), difficulty=take(self.difficulty),
                       difficulty_se=take(self.difficulty_se), chance=take(self.chance),
                       discrimination=take(self.discrimination), difficulty_draws=take(self.difficulty_draws, 1))

    # -- persistence -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        def arr(x: np.ndarray | None) -> list | None:
            return None if x is None else np.asarray(x).tolist()

        return {
            "model": self.model,
            "engine": self.engine,
            "models": list(self.models),
            "item_ids": list(self.item_ids),
            "ability": arr(self.ability),
            "ability_se": arr(self.ability_se),
            "difficulty": arr(self.difficulty),
            "difficulty_se": arr(self.difficulty_se),
            "chance": arr(self.chance),
            "discrimination": arr(self.discrimination),
            "b_min": self.b_min,
            "b_max": self.b_max,
            "log_likelihood": self.log_likelihood,
            "diagnostics": self.diagnostics,
            "seed": self.seed,
        }

    def save(self, path: str | Path) -> None:
        """Write the fit as JSON, and its posterior draws, if any, beside it as ``<path>.draws-<sha>.npz``.

        The JSON names its draws file by the draws' own hash and is renamed into place last, so a crash at
        any moment leaves either the old fit with its own draws or the new one with its own: never one
        fit paired with another's posterior. The draws file of the fit it replaces is removed after, and no
        other: a fit moved away keeps its own (named after this path), and a user's file of the pattern stays."""
        from benchfill.errors import ConfigError

        path = Path(path)
        if path.name in ("", ".", "..") or path.is_dir():  # (pathlib's "has an empty name" named no argument)
            raise ConfigError(f"{path}: a folder; give the file to write the fit to")
        try:
            self._save(path)
        except OSError as exc:  # said of the file asked for, not of a temp or lock file beside it
            beside = exc.filename is not None and Path(os.path.abspath(exc.filename)).parent == Path(
                os.path.abspath(path)).parent
            if beside and exc.filename != str(path) and exc.errno is not None:
                raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
            raise

    def _save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # two saves to one path at once take turns: each removes the draws files its fit does not name,
        # which would otherwise take the other's, named by the JSON that lands last
        with locks.transient(path.with_name(f".{path.name}.lock")):
            # temp files of their own (not NAME.tmp): two saves to one path at once each rename whole files
            tmp = temp_path(path.parent, path.name)  # a killed save's is removed by the next
            replaced = _draws_named(path)
            d = self.to_dict()
            draws_tmp = None
            try:
                if self.difficulty_draws is not None:
                    buf = io.BytesIO()  # hashed as written, not read back from disk
                    np.savez_compressed(buf, difficulty=self.difficulty_draws, ability=self.ability_draws)
                    data = buf.getvalue()
                    d["draws_file"] = f"{path.name}.draws-{hashlib.sha256(data).hexdigest()[:16]}.npz"
                    draws_tmp = temp_path(path.parent, f"{path.name}.draws")
                    draws_tmp.write_bytes(data)
                    os.chmod(draws_tmp, shared_mode())
                    draws_tmp.replace(path.with_name(d["draws_file"]))  # a new name: the old pair stays whole
                # NaN and Infinity are not JSON (jq and most parsers refuse them): an undefined figure, such as
                # R-hat over too few draws or a Laplace se that does not exist, is written as null
                tmp.write_text(json.dumps(_finite_or_none(d), indent=1, allow_nan=False) + "\n")
                os.chmod(tmp, shared_mode())
                tmp.replace(path)
            except OSError as exc:
                named(exc, path)
                raise
            finally:
                tmp.unlink(missing_ok=True)
                if draws_tmp is not None:
                    draws_tmp.unlink(missing_ok=True)
            if replaced is not None and replaced.name != d.get("draws_file") and not _named_beside(replaced, path):
                replaced.unlink(missing_ok=True)  # the replaced fit's posterior, which no copy of it names

    @classmethod
    def load(cls, path: str | Path) -> IrtFit:
        """The fit ``save`` wrote; a file that is not one raises ``DataError`` naming it and the field."""
        from benchfill.errors import DataError

        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # (nested too deeply)
            raise DataError(f"{path}: not a readable fit ({_why(exc)})") from None
        fit = cls.from_dict(d, source=str(path))
        named = d.get("draws_file") if isinstance(d, dict) else None
        if named:
            draws = path.with_name(str(named))
            if not draws.is_file():
                raise DataError(f"{path}: its posterior draws {draws.name} are missing")
        else:  # a fit saved before draws were named: <path>.draws.npz, for a NUTS fit only
            draws = path.with_name(path.name + ".draws.npz")
            if fit.engine != "nuts" or not draws.exists():
                return fit
        try:
            with np.load(draws) as z:
                fit.difficulty_draws = np.asarray(z["difficulty"], dtype=float)
                fit.ability_draws = np.asarray(z["ability"], dtype=float)
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"{draws}: not readable posterior draws ({_why(exc)})") from None
        if fit.difficulty_draws.ndim != 2 or fit.difficulty_draws.shape[1] != fit.n_items or (
                fit.ability_draws.ndim != 2 or fit.ability_draws.shape[1] != fit.n_models):
            raise DataError(f"{draws}: draws of shape {fit.difficulty_draws.shape} / {fit.ability_draws.shape} "
                            f"do not match the fit's {fit.n_items} items and {fit.n_models} models")
        return fit

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "fit", **kw: Any) -> IrtFit:
        """The fit ``to_dict`` wrote (``kw``: its posterior draws, kept apart). A malformed one raises
        ``DataError`` naming ``source`` and the field at fault."""
        from benchfill.errors import DataError

        if not isinstance(d, dict):
            raise DataError(f"{source}: not a fit (a JSON object was expected, found {type(d).__name__})")
        missing = [k for k in ("model", "engine", "models", "item_ids", "ability", "ability_se", "difficulty",
                               "difficulty_se", "chance", "b_min", "b_max") if k not in d]
        if missing:
            raise DataError(f"{source}: not a fit: field {missing[0]!r} is missing")

        def names(key: str) -> tuple[str, ...]:
            v = d[key]
            if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                raise DataError(f"{source}: field {key!r} must be a list of strings")
            return tuple(v)

        models, item_ids = names("models"), names("item_ids")

        def numbers(key: str, n: int, of: str, *, finite: bool = True) -> np.ndarray:
            v = d[key]
            try:
                a = np.asarray(v, dtype=float)
            except (TypeError, ValueError):
                raise DataError(f"{source}: field {key!r} must be a list of numbers") from None
            if a.shape != (n,):
                raise DataError(f"{source}: field {key!r} has {a.size} values for {n} {of}")
            if finite and not np.isfinite(a).all():
                raise DataError(f"{source}: field {key!r} holds a value that is not a finite number")
            return a

        def scalar(key: str) -> float:
            v = d[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise DataError(f"{source}: field {key!r} must be a finite number, found {v!r}")
            return float(v)

        if d["model"] not in ("1pl", "2pl") or d["engine"] not in ("map", "nuts"):
            raise DataError(f"{source}: fields 'model' and 'engine' must be 1pl/2pl and map/nuts, "
                            f"found {d['model']!r} and {d['engine']!r}")
        for key, ids in (("models", models), ("item_ids", item_ids)):
            twice = first_repeat(ids)
            if twice is not None:  # a gap or a difficulty would be read off the wrong item
                raise DataError(f"{source}: field {key!r} names {twice!r} twice")
        difficulty = numbers("difficulty", len(item_ids), "items")
        chance = numbers("chance", len(item_ids), "items")
        outside = np.flatnonzero(~((chance >= 0) & (chance < 1)))
        if outside.size:  # the guessing floor is a probability, and a floor of 1 leaves nothing to learn
            i = int(outside[0])
            raise DataError(f"{source}: field 'chance' of item {item_ids[i]!r} is {chance[i]:g}, not in [0, 1)")
        b_min, b_max = scalar("b_min"), scalar("b_max")
        # The scale is the fitted benchmark's own: z = 0 at its easiest item and 1 at its hardest. A pair that
        # is not its difficulties' min and max (swapped, equal, shifted) would place every item wrongly.
        if difficulty.size and not (_same(b_min, difficulty.min()) and _same(b_max, difficulty.max())):
            raise DataError(f"{source}: fields 'b_min' and 'b_max' ({b_min:g}, {b_max:g}) are not the lowest and "
                            f"highest of field 'difficulty' ({difficulty.min():g}, {difficulty.max():g})")
        disc = d.get("discrimination")
        return cls(
            model=d["model"],
            engine=d["engine"],
            models=models,
            item_ids=item_ids,
            ability=numbers("ability", len(models), "models"),
            ability_se=numbers("ability_se", len(models), "models", finite=False),
            difficulty=difficulty,
            difficulty_se=numbers("difficulty_se", len(item_ids), "items", finite=False),
            chance=chance,
            discrimination=None if disc is None else numbers("discrimination", len(item_ids), "items"),
            b_min=b_min,
            b_max=b_max,
            log_likelihood=_number_or_nan(d.get("log_likelihood")),
            diagnostics=d.get("diagnostics", {}),
            seed=d.get("seed"),
            **kw,
        )


def _same(a: float, b: float) -> bool:
    """Equal up to the rounding a JSON round trip or a hand-copied digit string could leave."""
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _finite_or_none(obj: Any) -> Any:
    """``obj`` with every float that is not finite made None (null in JSON)."""
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _number_or_nan(v: Any) -> float:
    """A saved scalar that may be null (written for NaN) or absent, as a float."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("nan")


def _why(exc: BaseException) -> str:
    """An exception as a short reason for a one-line error."""
    lines = str(exc).splitlines()
    text = getattr(exc, "strerror", None) or (lines[0] if lines else "")
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def _draws_named(path: Path) -> Path | None:
    """The draws file the fit at ``path`` names (one of benchfill's ``<name>.draws-<sha>.npz`` beside it), if
    there is such a fit."""
    try:
        named = json.loads(path.read_text(encoding="utf-8")).get("draws_file")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    if not isinstance(named, str) or "/" in named or not named.startswith(f"{path.name}.draws-"):
        return None
    return path.with_name(named)


def _named_beside(draws: Path, path: Path) -> bool:
    """Whether another fit in the folder names ``draws`` (``cp fit.json fit.bak.json`` before a refit: the copy
    lost its posterior with the fit it was copied from)."""
    for other in path.parent.glob("*.json"):
        try:
            if other != path and other.stat().st_size < 1 << 20 and draws.name in other.read_text(errors="replace"):
                return True
        except OSError:
            continue
    return False
