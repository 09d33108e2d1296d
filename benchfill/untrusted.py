"""Untrusted text (a benchmark's ids and items, an LLM's output, a reviewer's reason, a run id) in what
benchfill writes: Markdown (report.md, a release's dataset card and CHANGELOG.md) and a terminal.

In Markdown such text may hold a ``|`` that adds a table column, a newline that ends a row or opens a
heading, raw HTML that a renderer (the Hugging Face Hub's, GitHub's) shows or runs, or backticks that close
a code span; in a terminal, an escape sequence that retitles or recolours it. Each helper keeps it one
literal piece of text where it is put.
"""

from __future__ import annotations

import re
from html import escape

__all__ = ["controls_in", "md_code", "md_text", "terminal"]

_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")  # what opens a form: emphasis, code, link, tag, cell


def _one_line(s: object) -> str:
    # newlines, tabs and runs of spaces: one space; any other control or bidi override as its escape, as
    # terminal() prints it: report.md is read with cat as often as with a renderer, and an id holding ESC ] 0;
    # retitled the terminal (a right-to-left override reorders the text around it on the Hub, too)
    return terminal(" ".join(str(s).split()))


def md_text(s: object) -> str:
    """``s`` as literal inline text, in prose or a table cell: one line, Markdown's punctuation
    backslash-escaped (no emphasis, link, heading, HTML tag or table column forms), ``&`` as an entity, a
    control character as its escape."""
    return _MD_SPECIAL.sub(r"\\\1", _one_line(s).replace("&", "&amp;"))


def md_code(s: object, *, table: bool = False) -> str:
    """``s`` as an inline code span: one line, fenced by more backticks than any run inside it (CommonMark),
    so nothing in it closes the span; HTML in a code span is shown, not run; a control character as its escape. ``table``: ``|`` escaped, which
    GitHub's tables need even inside code."""
    body = _one_line(s)
    if table:
        body = body.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"


# C0 and C1 controls, DEL, the bidirectional marks, overrides and isolates, and the line and paragraph
# separators: what makes a terminal do things, reorders the text around it, or breaks a line
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal(s: object) -> str:
    """A name from the user's data (an item or model id) as printed: a control character (an escape sequence
    can retitle or recolour the terminal, a newline splits a row) or a bidi override written as its escape,
    ``\\x1b``, ``\\n``, ``\\u202e``, so what is printed is what is there."""
    return _UNSHOWN.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(s))


def html(s: object) -> str:
    """Text from the user's data as a web page shows it: escaped, with what ``terminal`` escapes written as its
    code point, ``[U+202E]`` (a bidi override had the page show "\u202e21" as "12"), but the line breaks and
    tabs a text keeps."""
    return _UNSHOWN.sub(lambda m: m[0] if m[0] in "\t\n\r" else f"[U+{ord(m[0]):04X}]", escape(str(s)))


def controls_in(s: str) -> bool:
    """Does ``s`` hold a control character or a bidi override (what ``terminal`` writes as an escape)? A name a
    person types (a reviewer's) has none, and one that does is refused rather than stored."""
    return _UNSHOWN.search(s) is not None
