"""Prompt templates: strict loading, a user override directory, fillers and reply parsers.

Templates are ``.txt`` files with ``str.format`` placeholders (``{name}``; a literal
brace is written ``{{`` or ``}}``). The defaults ship beside this module, as
``benchfill/prompts/*.txt``; a file of the same name in ``user_dir`` (or ``$BENCHFILL_PROMPTS_DIR``)
replaces the default. Rendering is strict both ways: a placeholder without a
value and a value without a placeholder are both ``ConfigError``s, so a typo in
an override fails at once instead of sending a half-filled prompt to a paid model.

Section tags and reply formats are fixed in docs/contracts.md (the simulated
world parses them): ``<problem>``, ``<options>``, ``<parent>``,
``<target_difficulty>``, ``<reference difficulty="D">``, ``<item>``; replies
``<child>{json}</child>`` and ``<verdict>valid|invalid</verdict><reason>..</reason>``.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import string
import threading
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from importlib.resources import files
from pathlib import Path
from typing import Any

from benchfill.errors import ConfigError
from benchfill.hub import ID_COLUMNS  # (light: datasets is imported only to read one)
from benchfill.replies import final_parts, reasoning_closes

PROMPTS_DIR_ENV = "BENCHFILL_PROMPTS_DIR"
_NAME = re.compile(r"[A-Za-z0-9_\-]+")


class MalformedReply(ValueError):
    """A rewriter or judge reply that does not follow the expected format."""


def _template_path(name: str, user_dir: str | os.PathLike | None) -> tuple[str, str]:
    """(text, where it came from) for template ``name``."""
    stem = name.removesuffix(".txt")
    if not _NAME.fullmatch(stem):
        raise ConfigError(f"prompt name {name!r}: use letters, digits, '_' or '-' only")
    override = user_dir if user_dir is not None else os.environ.get(PROMPTS_DIR_ENV)
    if override:
        candidate = Path(override) / f"{stem}.txt"
        held = _held(override)
        if held is not None:  # a run holds the folder as it was when it began
            if candidate.name in held:
                return _decoded(held[candidate.name], candidate), str(candidate)
        elif candidate.is_file():
            return _read(candidate), str(candidate)
    default = files(__name__) / f"{stem}.txt"
    if default.is_file():
        return default.read_text(encoding="utf-8"), f"benchfill/prompts/{stem}.txt"
    searched = f"{override} and the defaults" if override else "the defaults"
    raise ConfigError(f"prompt {stem!r}: no file {stem}.txt in {searched}")


def _read(path: Path) -> str:
    from benchfill.data import read_text  # a byte-order mark dropped; another encoding named in one line
    from benchfill.errors import DataError

    try:
        return read_text(path)
    except DataError as exc:
        raise ConfigError(str(exc)) from None


def _decoded(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None


# A run holds its override folder's templates as they were when it began (``held_overrides``): edited during
# the run, they had reached its later calls, and its id (their digest) changed between its folder and its report.
_HELD: dict[str, tuple[int, dict[str, bytes]]] = {}  # resolved folder -> (runs holding it, {file name: bytes})
_HELD_LOCK = threading.Lock()


def _templates_in(folder: Path) -> dict[str, bytes]:
    """The template files of an override folder (``*.txt``, not hidden), by name."""
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir())
            if f.name.endswith(".txt") and not f.name.startswith(".") and f.is_file()}


def _held(override: str | os.PathLike) -> dict[str, bytes] | None:
    with _HELD_LOCK:
        got = _HELD.get(str(Path(override).resolve()))
    return None if got is None else got[1]


@contextlib.contextmanager
def held_overrides(user_dir: str | os.PathLike | None = None) -> Iterator[None]:
    """Hold the override folder's templates (``BENCHFILL_PROMPTS_DIR``) as they are now, for as long as the
    block runs (a run): its calls and its id read them so, whatever is edited meanwhile. Runs at once in one
    process share the first one's hold."""
    override = user_dir if user_dir is not None else os.environ.get(PROMPTS_DIR_ENV)
    if not override or not Path(override).is_dir():
        yield
        return
    key = str(Path(override).resolve())
    with _HELD_LOCK:
        n, held = _HELD.get(key, (0, None))
        _HELD[key] = (n + 1, held if held is not None else _templates_in(Path(override)))
    try:
        yield
    finally:
        with _HELD_LOCK:
            n, held = _HELD[key]
            if n <= 1:
                del _HELD[key]
            else:
                _HELD[key] = (n - 1, held)


_BUILT_IN_SOLVERS = ("math", "multiple_choice", "code")
_REPLY_TAGS = {"rewriter": "<child>", "judge": "<verdict>"}
# What a solver template of a spec's own is given beyond {problem}, by the spec's grader
OWN_SOLVER_EXTRAS = {"multiple_choice": "options", "code": "entry_point"}


def overrides_digest(user_dir: str | os.PathLike | None = None) -> str | None:
    """The sha256 of the prompt templates of the user's own (``BENCHFILL_PROMPTS_DIR``, or ``user_dir``) that a
    run may read: the rewriter's, the judge's and the solvers' (``solver_*.txt``), each file's name and content in
    name order; None where no such folder, or no such file in it, is given. Other files there (notes, a
    misspelt name, which ``check_overrides`` warns of) are none of a run's. The run id and a release's card carry
    it: another wording is another search."""
    import hashlib

    override = user_dir if user_dir is not None else os.environ.get(PROMPTS_DIR_ENV)
    if not override:
        return None
    folder = Path(override)
    held = _held(folder)  # first: a held folder removed or renamed meanwhile is still the run's
    if held is None and not folder.is_dir():
        return None  # (a folder that is not there is refused by check_overrides, before any work)
    templates = held if held is not None else _templates_in(folder)
    used = {n: b for n, b in templates.items() if n in ("rewriter.txt", "judge.txt") or n.startswith("solver_")}
    if not used:
        return None
    h = hashlib.sha256()
    for n, b in sorted(used.items()):
        h.update(n.encode() + b"\0" + b + b"\0")
    return h.hexdigest()


def check_overrides(user_dir: str | os.PathLike | None = None) -> list[str]:
    """Refuse, before any work, an override folder a run cannot use: one that does not exist (its overrides
    would be passed over in silence), or a template in it whose placeholders are not those its filler
    gives (found only at the first call otherwise, after the run's folder and fit were made). Returns a
    warning for each ``.txt`` file there that overrides no prompt (a misspelt name). A ``solver_NAME``
    file is a solver template of its own (a spec's ``solver_prompt``), which is filled with ``problem``, and
    ``options`` or ``entry_point`` where it names them and the spec's grader has them."""
    override = user_dir if user_dir is not None else os.environ.get(PROMPTS_DIR_ENV)
    if not override:
        return []
    folder = Path(override)
    if not folder.is_dir():
        named = str(override) if user_dir is not None else f"{PROMPTS_DIR_ENV} {override}"
        raise ConfigError(f"{named}: no such folder; its prompt overrides would be passed over (unset it to use "
                          "the built-in prompts)")
    defaults = {p.name.removesuffix(".txt"): p for p in files(__name__).iterdir() if p.name.endswith(".txt")}
    warnings = []
    for f in sorted(folder.iterdir()):
        stem = f.name.removesuffix(".txt")
        if not f.name.endswith(".txt") or stem.startswith("."):
            continue
        if not f.is_file():
            raise ConfigError(f"{f}: a folder where a prompt template goes")
        if stem in defaults:
            want = placeholders(defaults[stem].read_text(encoding="utf-8"))
            allowed = want
        elif stem.startswith("solver_") and _NAME.fullmatch(stem):
            # a solver of its own: the question, and the options or the entry point where the grader has them
            want, allowed = {"problem"}, {"problem", *OWN_SOLVER_EXTRAS.values()}
        else:
            warnings.append(f"{f}: overrides no prompt (they are {', '.join(sorted(defaults))}, or solver_NAME "
                            "for a spec's solver_prompt); it is not used")
            continue
        text = _read(f)
        got = placeholders(text, str(f))
        said = [f"{what} {', '.join('{' + n + '}' for n in sorted(names))}"
                for what, names in (("missing", want - got), ("unknown", got - allowed)) if names]
        if said:
            uses = (f"the built-in {stem} uses {', '.join(sorted(want)) or 'none'}" if stem in defaults else
                    "a solver of its own takes problem, and options (multiple choice) or entry_point (code)")
            raise ConfigError(f"{f}: {'; '.join(said)} ({uses}; a literal brace is written {{{{ or }}}})")
        tag = _REPLY_TAGS.get(stem)
        if tag and tag not in text.lower():
            # a real model answers as the prompt asks, and every reply would be unreadable (the simulated
            # models answer in the tags whatever the prompt says: a sim rehearsal would not show it)
            raise ConfigError(f"{f}: does not ask for the reply's {tag}...{tag.replace('<', '</')} tags, which "
                              "its reply is read from (docs/contracts.md)")
    return warnings


def load_prompt(name: str, user_dir: str | os.PathLike | None = None) -> str:
    """The text of template ``name`` (``"rewriter"`` or ``"rewriter.txt"``), user override first."""
    return _template_path(name, user_dir)[0]


def placeholders(template: str, where: str = "template") -> set[str]:
    """The variable names a template uses; positional, attribute and index fields are refused."""
    names = set()
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc} (write a literal brace as '{{{{' or '}}}}')") from None
    for _, field, _, _ in parsed:
        if field is None:
            continue
        if not field.isidentifier():
            raise ConfigError(f"{where}: placeholder {{{field}}} must be a plain name (a literal brace, as in "
                              "\\boxed{{}}, is written {{ or }})")
        names.add(field)
    return names


def render(name: str, user_dir: str | os.PathLike | None = None, optional: tuple[str, ...] = (),
           **variables: Any) -> str:
    """Template ``name`` filled with ``variables``; a missing or unused variable is an error, but for those
    named in ``optional``, which the template may leave out."""
    template, where = _template_path(name, user_dir)
    wanted = placeholders(template, where)
    variables = {k: v for k, v in variables.items() if k in wanted or k not in optional}
    missing = sorted(wanted - variables.keys())
    if missing:
        raise ConfigError(f"{where}: missing variable {missing[0]!r} (needs {', '.join(sorted(wanted)) or 'none'})")
    unused = sorted(variables.keys() - wanted)
    if unused:
        raise ConfigError(
            f"{where}: unused variable {unused[0]!r} (template uses {', '.join(sorted(wanted)) or 'none'})"
        )
    return template.format(**variables)


# --- fillers -----------------------------------------------------------------------------------


def _field(spec: Any, attr: str, default: str) -> str:
    return (getattr(spec, attr, None) if spec is not None else None) or default


_CONTENT = ("text_field", "answer_field", "options_field", "tests_field", "entry_point_field")


def id_fields(spec: Any = None, item: dict | None = None) -> set[str]:
    """The fields that name an item rather than make it: ``id``, the spec's ``id_field``, and a dataset's id
    column that holds the item's id (an ``hf:`` dataset's ``task_id``); never a field the spec reads as
    content (an ``id_field`` naming the text or the entry point hid the text from the rewriter, and
    overwrote every child's with its id)."""
    names = {"id", *([spec.id_field] if getattr(spec, "id_field", None) else [])}
    if item is not None and "id" in item:
        # (or null: a child's numbered id column, new_child)
        names |= {c for c in ID_COLUMNS if c in item and (item[c] is None or str(item[c]) == str(item["id"]))}
    content = {getattr(spec, a, None) for a in _CONTENT} if spec is not None else set()
    return names - content


# Fields that describe the parent, not a child: its worked solution (a rewriter's new one would ship in the
# release unreviewed, as the review page shows the text and answer), its source URL, and its answer's index
# (a release derives it from the key). A child does not carry them, a reference is shown without them (an
# aime24 reference's AoPS solutions made its rewriter prompt ten times longer), unless the spec reads one.
PARENT_ONLY = ("solution", "url", "answer_index")


def parent_only_fields(spec: Any = None) -> set[str]:
    """``PARENT_ONLY`` less the fields the spec or its grader reads (a code benchmark's answer may be its
    "solution")."""
    content = {getattr(spec, a, None) for a in _CONTENT} if spec is not None else set()
    if getattr(spec, "evaluator", None):
        from benchfill.evaluators import spec_item_fields

        try:
            content |= set(spec_item_fields(spec))
        except ConfigError:  # a grader not registered here: the spec's own fields decide
            pass
    return set(PARENT_ONLY) - content


def content_of(item: dict, spec: Any = None) -> dict:
    """The item without its ids (``id_fields``): what a rewriter or judge is shown of it. Ids are bookkeeping,
    not content: shown one, a rewriter copied the parent's own id column into the child, and a release held
    two rows with one id."""
    hidden = id_fields(spec, item)
    return {k: v for k, v in item.items() if k not in hidden}


def _item_json(item: dict, spec: Any = None) -> str:
    """The item's own fields as JSON (``content_of``)."""
    return json.dumps(content_of(item, spec), ensure_ascii=False, indent=2)


def new_child(reply: dict, child_id: str, spec: Any = None, parent: dict | None = None) -> dict:
    """A rewriter's child under its own id: any id it wrote dropped, and the parent's id columns (the
    spec's ``id_field``, a dataset's ``task_id``) set to that id too (a dataset's numbered one to null): the
    user's id column names the new item, never its parent."""
    hidden = id_fields(spec, parent)
    # A dataset's own id column whose ids are numbers (MMLU-Pro's question_id) takes none (null) rather than a
    # text id among numbers, which loads with no type in `datasets`. The spec's id_field always takes the id:
    # a release read back as items is keyed by it (null there, two children were one id "None").
    named = {"id", getattr(spec, "id_field", None)}
    own = {k: (child_id if k in named or parent is None or isinstance(parent.get(k, ""), str) else None)
           for k in hidden}
    # Only the parent's own fields: one the rewriter adds (its own "difficulty", an "explanation") is not
    # the benchmark's and would ship unreviewed; nor one that describes the parent (PARENT_ONLY).
    stale = parent_only_fields(spec)
    kept = {k: v for k, v in reply.items()
            if k not in hidden and k not in stale and (parent is None or k in parent)}
    options = _field(spec, "options_field", "options")
    if isinstance(kept.get(options), list) and not _lettered(parent.get(options) if parent else None):
        if _lettered(kept[options]):  # "A. 12": the solver prompt letters the options itself ("A. A. 12")
            kept[options] = [_LABEL.sub("", o, count=1) for o in kept[options]]
    return {**kept, **own}


_LABEL = re.compile(r"^\s*\(?[A-Ja-j][.):]\s+")


def _lettered(options: Any) -> bool:
    """Whether every option is a string that begins with its own letter, in order ("A. 12", "(B) 15")."""
    if not isinstance(options, list) or len(options) < 2:
        return False
    return all(isinstance(o, str) and (m := _LABEL.match(o)) is not None
               and m.group(0).strip("( ").upper()[0] == string.ascii_uppercase[i] for i, o in enumerate(options))


def _scale(z: float) -> str:
    """A normalized difficulty in [0, 1] on the 0-10 prompt scale (Appendix E.1), one decimal.

    The paper gives no precision; one decimal is ours. On a large benchmark the largest gaps can be under
    0.01 z wide, and the target and the references on either side then show one number. Two decimals were
    measured against one and were no better (docs/sim-rewriter.md, "Two decimals on the prompt's scale")."""
    # Decimal from the shortest repr, so 0.415 shows as 4.2 (half up), not float's 4.1499...
    return str((Decimal(repr(float(z))) * 10).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def format_solver_prompt(item: dict, spec: Any = None, user_dir: str | os.PathLike | None = None) -> str:
    """The question a probe model answers, from the spec's solver template."""
    evaluator = _field(spec, "evaluator", "math")
    solver = _field(spec, "solver_prompt", evaluator)
    default_text = {"code": "prompt", "multiple_choice": "question"}.get(solver, "problem")
    text_name = _field(spec, "text_field", default_text)
    if text_name not in item:
        raise ConfigError(f"item {item.get('id', '?')!r}: missing text field {text_name!r}")
    variables: dict[str, Any] = {"problem": str(item[text_name]).strip()}
    own = solver not in _BUILT_IN_SOLVERS
    if solver == "multiple_choice" or (own and evaluator == "multiple_choice"):
        from benchfill.data import options_of

        # a list, or the Hugging Face layout {"text": [...], "label": [...]} (its labels were shown as options)
        options = options_of(item.get(_field(spec, "options_field", "options"))) or []
        letters = string.ascii_uppercase
        variables["options"] = "\n".join(f"{letters[i]}. {opt}" for i, opt in enumerate(options))
    elif solver == "code" or (own and evaluator == "code"):
        variables["problem"] = str(item[text_name])  # leading indentation is code
        variables["entry_point"] = item.get(_field(spec, "entry_point_field", "entry_point"), "the function")
    # a solver of its own takes {problem}, and {options} or {entry_point} where it names them
    extras = tuple(OWN_SOLVER_EXTRAS.values()) if own else ()
    return render(f"solver_{solver}", user_dir, optional=extras, **variables)


def format_rewriter_prompt(
    parent: dict,
    target_z: float,
    references: list[tuple[dict, float]],
    spec: Any = None,
    user_dir: str | os.PathLike | None = None,
) -> str:
    """The rewriter's prompt: parent, target and nearby references (items with their z), easiest first."""
    stale = parent_only_fields(spec)
    blocks = [
        f'<reference difficulty="{_scale(z)}">\n{_item_json({k: v for k, v in item.items() if k not in stale}, spec)}'
        "\n</reference>"
        # by z to 9 decimals, then in the caller's order (a stable sort): two items answered alike differ in z
        # by float noise alone, which is the machine's BLAS kernel's, and would order the prompt differently
        for item, z in sorted(references, key=lambda pair: round(pair[1], 9))
    ]
    fields = [k for k in parent if k not in id_fields(spec, parent) and k not in stale]
    return render(
        "rewriter",
        user_dir,
        parent=_item_json(parent, spec),
        target=_scale(target_z),
        references="\n\n".join(blocks) if blocks else "(none)",
        fields=", ".join(fields),
        text_field=_field(spec, "text_field", "problem"),
        answer_field=_field(spec, "answer_field", "answer"),
    )


def format_judge_prompt(child: dict, spec: Any = None, user_dir: str | os.PathLike | None = None) -> str:
    """The validity judge's prompt for one child item."""
    return render(
        "judge",
        user_dir,
        item=_item_json(child, spec),
        text_field=_field(spec, "text_field", "problem"),
        answer_field=_field(spec, "answer_field", "answer"),
    )


# --- reply parsers -----------------------------------------------------------------------------

_CHILD = re.compile(r"<child(?:\s[^>]*)?>(.*?)</child>", re.DOTALL | re.IGNORECASE)
_CHILD_OPEN = re.compile(r"<child(?:\s[^>]*)?>", re.IGNORECASE)
_CHILD_CLOSE = re.compile(r"</child>", re.IGNORECASE)  # as _CHILD closes a block
_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n?|\n?\s*```\s*$")
# "<verdict>**valid**</verdict>", "<verdict>"valid"</verdict>", "<verdict>valid.</verdict>" read as valid
_VERDICT = re.compile(r"<verdict>[\s*\"'`]*([A-Za-z]+)[\s*\"'`.!]*</verdict>", re.IGNORECASE)
_REASON = re.compile(r"<reason>(.*?)</reason>", re.DOTALL | re.IGNORECASE)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text[:80] + ("..." if len(text) > 80 else "")


# LaTeX commands a model writes inside a JSON string without doubling the backslash, whose first letter
# makes a valid JSON escape: "\frac" would decode as a form feed and "rac", "\times" as a tab and "imes",
# "\neq" as a line break and "eq", with no error. Only common math commands that begin with n, r or t are
# listed, as those are also real escapes: a line break before "nuance" stays one. The two-letter ones are
# also a line break before a variable ("\nu = x+1" may be a line starting "u = x+1"), so they are read as
# LaTeX only in a reply that leaves other backslashes single. \b and \f are always read as a backslash, as
# no benchmark's text holds a backspace or a form feed.
_LATEX_NRT = frozenset(
    "nabla natural ne neg neq nexists ngeq nleq nmid nolimits not notin nparallel nsubseteq nu newline "
    "rangle rbrace rbrack rceil rfloor rho right rightarrow rightleftharpoons rightharpoonup rm rvert rVert "
    "tan tanh tau tbinom text textbf textit textnormal textrm textsf texttt textstyle tfrac therefore theta "
    "thinspace tilde times to top triangle triangleleft triangleright tt "
    # text-mode symbols (MMLU-Pro's prices are in \textcent) and TikZ, which AIME's figures are drawn in
    "textcent textdegree textdollar textperthousand textsuperscript textsubscript textendash textemdash "
    "textbullet textbackslash textasciitilde textmu textregistered texttrademark textcopyright "
    "textquotedblleft textquotedblright textsterling textsection texttheta textphi textasteriskcentered "
    "nearrow node norm newcommand renewcommand noindent nonumber normalsize raisebox ref rule tiny today".split()
)
# MMLU-Pro glues commands to the next word ("\nablaf", "\textquotedblleftlabor"): a word that begins with one
# of the longer commands is that command, as no line break starts "abla" or "ewline". A tab does start a
# word of code or prose ("\tfraction = x % 1", "\textra" in tab-indented code): \t-commands count as a prefix
# only at seven letters or more ("\textquotedblleft", "\therefore"), where no word begins so.
_LATEX_NRT_LONG = tuple(sorted((c for c in _LATEX_NRT if len(c) >= (7 if c[0] == "t" else 5)), key=len,
                               reverse=True))
_HEX = frozenset("0123456789abcdefABCDEF")
_SINGLE = re.compile(r'(?<!\\)(?:\\\\)*\\(?:[^"\\/nrtu]|u(?![0-9a-fA-F]{4}))')


def _mend_backslashes(text: str) -> str:
    r"""``text`` with the backslashes a model left single inside JSON strings doubled.

    Models write LaTeX (and regular expressions) into JSON as they would on a page. ``\\``, ``\"``, ``\/``,
    ``\uXXXX`` and a ``\n``, ``\r`` or ``\t`` that does not begin a LaTeX command stay escapes; every
    other backslash in a string (``\sqrt``, ``\(``, ``\frac``, ``\times``) is taken as the character
    itself. json-repair 0.64.4 mends ``\frac`` but leaves ``\times``, ``\binom`` and ``\neq`` as a
    tab, a backspace and a newline, hence this scanner.
    """
    if "\\" not in text:
        return text
    # a backslash that cannot be an escape (\sqrt, \(, \frac's \f) shows a model that leaves them single
    leaves_single = _SINGLE.search(text) is not None
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if c == '"':
            in_string = not in_string
        elif c == "\\" and in_string and i + 1 < n:
            nxt = text[i + 1]
            if nxt in '\\"/' or (nxt == "u" and len(text[i + 2 : i + 6]) == 4 and set(text[i + 2 : i + 6]) <= _HEX):
                out.append(text[i : i + 2])
                i += 2
                continue
            if nxt in "nrt":
                j = i + 1
                while j < n and text[j].isascii() and text[j].isalpha():
                    j += 1
                word = text[i + 1 : j]
                latex = (word in _LATEX_NRT or word.startswith(_LATEX_NRT_LONG)
                         # a carriage return never precedes a letter in a benchmark's text
                         or (nxt == "r" and len(word) > 2))
                if not latex or (len(word) == 2 and not leaves_single):
                    out.append(text[i : i + 2])
                    i += 2
                    continue
            out.append("\\\\")
            i += 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _without_trailing_commas(text: str) -> str:
    """``text`` with each comma that closes a JSON object or array dropped; a string's own ", ]" kept (an
    MMLU-Pro quotation reads "him[,] which")."""
    out, start, in_string = [], 0, False
    for m in re.finditer(r'\\.|"|,(?=\s*[}\]])', text, re.DOTALL):
        token = m.group()
        if token == '"':
            in_string = not in_string
        elif token == "," and not in_string:
            out.append(text[start:m.start()])
            start = m.end()
    out.append(text[start:])
    return "".join(out)


def _object_in(body: str) -> Any:
    """The JSON object that ``body`` opens with (text after it ignored), read leniently: mended
    backslashes, raw line breaks in strings, then a trailing comma or a Python dict's quotes."""
    text = _mend_backslashes(body)
    decoder = json.JSONDecoder(strict=False)  # a code item's line breaks, written into the string as they are
    try:
        return decoder.raw_decode(text)[0]
    except json.JSONDecodeError as exc:
        first = exc
    except RecursionError:  # a reply nested too deeply stopped the whole search with a traceback
        raise MalformedReply("JSON inside <child> nested too deeply") from None
    try:
        return decoder.raw_decode(_without_trailing_commas(text))[0]
    except json.JSONDecodeError:
        pass
    except RecursionError:
        raise MalformedReply("JSON inside <child> nested too deeply") from None
    value = None
    # Python reads \frac's \f as a form feed: a reply holding a backslash other than \n or a quote's is asked again
    if re.search(r"\\(?![n'\"\\])", body) is None:
        try:  # {'problem': '...', 'answer': '3'}: a Python literal, never evaluated as code
            value = ast.literal_eval(body[: body.rfind("}") + 1])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            value = None
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return value
    raise MalformedReply(f"invalid JSON inside <child>: {first.msg} at char {first.pos}") from None


def _none_in(reply: str, said: str, tags: str) -> str:
    if reply.strip() and not said.strip():
        return f"no {tags}: the reply's reasoning (<think>) never closes, so it gives no answer"
    return f"no {tags} in reply: {_short(said)!r}"


def parse_child(reply: str, required: tuple[str, ...] | list[str] = ()) -> dict:
    """The child item in a rewriter reply (the last ``<child>`` block after any reasoning), with its
    ``required`` fields.

    Read after the last reasoning tag first, as ever. Only where that reading holds no child can a child whose
    own text holds ``</think>`` be read whole: from an earlier reasoning tag (or the whole reply, where it does not
    open its reasoning), as a block that holds every reasoning tag after where it is read from (a tag outside it
    ended the reasoning, and what came before, drafts included, is never read), and where its tags pair up
    wrongly (it holds ``</child>``) only as one JSON object that fills it. A malformed final child is reported:
    a repair turn, never a draft in its place."""
    reply = reply or ""
    parts = final_parts(reply)
    blocks = _CHILD.findall(parts[0])
    try:
        if not blocks:
            raise MalformedReply(_none_in(reply, parts[0], "<child>...</child>"))
        return _child_of(blocks[-1], required)
    except MalformedReply as exc:
        first = exc
    for k, said in enumerate(parts):  # (the first reading again too: a block holding </child>, to the last one)
        tags = [m.start() for m in reasoning_closes(said)]
        for (start, end), widened in _child_spans(said):
            if (widened or k > 0) and all(start <= t < end for t in tags):
                try:
                    return _child_of(said[start:end], required, whole=widened)
                except MalformedReply:
                    pass
    raise first


def _child_spans(said: str) -> list[tuple[tuple[int, int], bool]]:
    """Where the child may be, and whether the span is widened: the last block as the tags pair up, then from
    each opening tag (the last first) to the last closing one."""
    blocks = list(_CHILD.finditer(said))
    if not blocks:
        return []
    spans = [(blocks[-1].span(1), False)]
    last_close = list(_CHILD_CLOSE.finditer(said))[-1].start()
    for opening in reversed(list(_CHILD_OPEN.finditer(said))):
        span = (opening.end(), last_close)
        if opening.end() <= last_close and span != spans[0][0] and (span, True) not in spans:
            spans.append((span, True))
    return spans


def _child_of(block: str, required: tuple[str, ...] | list[str], whole: bool = False) -> dict:
    """The child in one block. ``whole``: a widened block, taken only as one JSON object that fills it."""
    body = _FENCE.sub("", block.strip())
    start = body.find("{")
    if start < 0 or body.rfind("}") < start:
        raise MalformedReply(f"no JSON object inside <child>: {_short(body)!r}")
    if whole:
        text = body.strip()
        child = _whole_object(text) if text.startswith("{") and text.endswith("}") else None
        if child is None:
            raise MalformedReply(f"no one JSON object fills <child>: {_short(body)!r}")
    else:
        child = _object_in(body[start:])
    if not isinstance(child, dict):
        raise MalformedReply("<child> must hold a JSON object")
    missing = [name for name in required if name not in child]
    if missing:
        raise MalformedReply(f"child item lacks field {missing[0]!r}")
    return child


def _whole_object(text: str) -> Any:
    """``text`` read as one JSON value from end to end (leniently, as ``_object_in``), or None."""
    mended = _mend_backslashes(text)
    for candidate in (mended, _without_trailing_commas(mended)):
        try:
            return json.loads(candidate, strict=False)
        except (json.JSONDecodeError, RecursionError):
            continue
    return None


def parse_verdict(reply: str) -> tuple[bool, str]:
    """(valid, reason) from a judge reply; the last ``<verdict>`` after any reasoning wins (one quoted inside a
    ``<reason>`` is the item's text, not a verdict), the reason may be empty. Only where no verdict follows the
    last reasoning tag is a reply read from an earlier one, where every later tag lies inside a ``<reason>`` (a
    reason that quotes ``</think>``); a draft verdict in the reasoning is never read."""
    reply = reply or ""
    parts = final_parts(reply)
    said = parts[0]
    for part in parts[1:] if not _verdicts(said) else ():
        quoted = [m.span(1) for m in _REASON.finditer(part)]
        if _verdicts(part) and all(any(a <= t.start() < b for a, b in quoted) for t in reasoning_closes(part)):
            said = part
            break
    verdicts = _verdicts(said)
    if not verdicts:
        raise MalformedReply(_none_in(reply, said, "<verdict>...</verdict>"))
    verdict = verdicts[-1].lower()
    if verdict not in ("valid", "invalid"):
        raise MalformedReply(f"verdict must be 'valid' or 'invalid', got {verdicts[-1]!r}")
    reasons = _REASON.findall(said)
    return verdict == "valid", (" ".join(reasons[-1].split()) if reasons else "")


def _verdicts(said: str) -> list[str]:
    """The verdicts of ``said`` outside its reasons (a reason may quote the item's own ``<verdict>``)."""
    return _VERDICT.findall(_REASON.sub("", said))


__all__ = [
    "MalformedReply",
    "PROMPTS_DIR_ENV",
    "format_judge_prompt",
    "format_rewriter_prompt",
    "format_solver_prompt",
    "held_overrides",
    "load_prompt",
    "overrides_digest",
    "parse_child",
    "parse_verdict",
    "placeholders",
    "render",
]
