"""How real models dress their replies: the forms the world's replies take, none of which changes what a
reply commits to.

The world decides what a probe answers, what child the rewriter writes and what the judge says
(``roles``); this module decides only how that is written. Real models reason aloud between ``<think>``
tags before they commit (drafting answers, options, verdicts and items they then drop), put their answer
in bold or after a label rather than in the one form a grader was first written for, fence code with or
without a language and follow it with a usage example, leave LaTeX's backslashes single inside the JSON
they were asked for, add a trailing comma, and run out of tokens before they answer. A world that wrote
every reply in one plain form would be kinder than any real model (DESIGN.md): the readers of replies
(``benchfill.replies``, the graders, ``prompts.parse_child`` and ``parse_verdict``) would only ever be
tried by hand-written unit tests, never by a run.

Each reply takes one of its role's habits with probability ``rate`` (``World.reply_habits``; 0 keeps every
reply plain), drawn from a stream of its own, so a form never moves any other draw: with readers that read
every form right, a run's figures are the same at every rate. A reply cut short is drawn only among wrong
answers (a probe that runs out of tokens gives no answer, which grades wrong), so no figure moves with it.
How long a wrong answer reasons has a heavy tail (``reasoning_tokens``): past 512 tokens, the reply reasons
aloud before it answers, and past the request's ``max_tokens`` it is cut there. At the default cap of 4096 a
hundredth of ``rate`` of the wrong answers run past it (0.3% at the default rate: a few in every run, each
counted in the report, and far below the share at which a run warns of a probe), at 16384 a quarter of
that, and a request that sets no cap is cut at a 32768-token context. As a real decode, the reply under a cap
is the start of the reply without one.

The rate is a judgement call: no published figure says how often a model's reply strays from the form a
prompt asks for. 0.3 (the default) puts most habits into every run of a few hundred calls.
"""

from __future__ import annotations

import json
import re

from benchfill.sim import texts

DEFAULT_RATE = 0.3
CUT_SHARE = 0.01  # of ``rate``: the chance that a wrong answer runs past 4096 tokens
CONTEXT = 32768  # tokens: where a reply is cut when the request sets no cap
LONG = 512  # tokens: a wrong answer that reasons longer writes its reasoning out (``long_reply``)

# A LaTeX command, as the rewriter would write it on a page (the slip leaves its backslash single in JSON)
_LATEX = re.compile(r"\\\\(?=[A-Za-z]{2,}|[(){}\[\],;:!| ])")


class Cut(str):
    """A reply the model did not finish: its server reports ``finish_reason`` "length"."""

    __slots__ = ()


def pick(rate: float, u: float, forms: int) -> int | None:
    """Which of ``forms`` habits a reply takes (None: the plain form), from its own uniform draw ``u``."""
    if rate <= 0.0 or u >= rate:
        return None
    return min(int(u / rate * forms), forms - 1)


def reasoning_tokens(rate: float, u: float) -> float:
    """How long a wrong answer reasons, from its own uniform draw ``u``: a Pareto tail of index 1, scaled so
    that P(longer than 4096) = ``rate`` x ``CUT_SHARE``."""
    return float("inf") if u <= 0.0 else 4096.0 * rate * CUT_SHARE / u


def cut_chance(rate: float, max_tokens: int | None) -> float:
    """The chance that a wrong answer runs past ``max_tokens`` (never more than the chance it reasons past
    ``LONG`` at all: a tighter cap cuts the short plain replies only where they are longer than it)."""
    return rate * CUT_SHARE * 4096 / max(max_tokens or CONTEXT, LONG)


def think(final: str, draft: str) -> str:
    """``final`` after a closed reasoning block that drafts ``draft``."""
    return f"<think>\n{draft}\n</think>\n\n{final}"


# -- probes ---------------------------------------------------------------------------------------


def math(plain: str, answer: str, decoy: str, form: int | None) -> str:
    """A math answer committing to ``answer``; ``decoy`` is a wrong value it drafts and drops."""
    if form is None:
        return plain
    if form % 4 >= 2 and ("\n" in answer or re.search(r"\.(?!\d)", answer)):
        form = 1  # a sentence's end inside the answer ("i.e. 5") would end an unboxed one early: boxed, as form only
    return (
        think(plain, f"Maybe the answer is \\boxed{{{decoy}}}. That fails the last condition; recompute."),
        f"We compute step by step.\n1. The first quantity is {decoy}.\n2. Adjusting it gives the result.\n\n"
        f"**Final Answer:** $\\boxed{{{answer}}}$",
        f"Working through the cases, the candidate {decoy} is ruled out.\n\nTherefore, the answer is {answer}.",
        f"Each case is checked in turn (case 1 gives {decoy}, which is then excluded).\n\nAnswer: {answer}",
    )[form % 4]


def multiple_choice(plain: str, letter: str, decoy: str, form: int | None) -> str:
    """A multiple-choice answer committing to ``letter``; ``decoy`` is an option it drafts and drops."""
    if form is None:
        return plain
    return (
        think(plain, f"The answer is ({decoy})? No: ({decoy}) ignores one condition. Check the others."),
        f"Weighing the options, ({decoy}) is tempting but wrong.\n\n**Answer: {letter}**",
        f"Comparing the options one by one leaves a single survivor.\n\n$\\boxed{{{letter}}}$",
        f"Option ({decoy}) can be ruled out first.\n\nAnswer: ({letter})",
    )[form % 4]


def code(plain: str, program: str, entry_point: str, form: int | None) -> str:
    """A code answer whose solution is ``program`` (the prompt and its body)."""
    if form is None:
        return plain
    draft = f"```python\ndef {entry_point}(*args):\n    return None\n```"
    return (
        think(plain, f"A first sketch:\n{draft}\nThat returns nothing useful; write the real one."),
        f"Here is the implementation.\n\n```python\n{program.rstrip()}\n```\n\nExample usage:\n\n"
        f"```python\nprint({entry_point})\n```\n",
        f"```\n{program.rstrip()}\n```",
        f"Sure. The function below handles the general case.\n\n```py\n{program.rstrip()}\n```\n\n"
        "It runs in linear time.",
    )[form % 4]


def long_reply(draft: str, final: str, cut: bool) -> str:
    """A reply that reasons at length, ``draft`` (which may name the right answer in passing) in a reasoning
    block, then commits to ``final``; ``cut``: it ran out of tokens first, and is its start alone (``Cut``)."""
    start = (f"<think>\nLet me think about this carefully. {draft} Let me double-check each step again, "
             "since the earlier reasoning might have an error in the")
    return Cut(start) if cut else f"{start} last step. It holds.\n</think>\n\n{final}"


# -- rewriter and judge ---------------------------------------------------------------------------


def child(fields: dict, form: int | None, latex: bool) -> str:
    """A rewriter reply carrying the child ``fields``; ``latex``: the benchmark's text is LaTeX, where a
    model leaves the backslashes of its commands single inside JSON."""
    body = json.dumps(fields, ensure_ascii=False)
    plain = texts.child_reply(body)
    if form is None:
        return plain
    form %= 4
    if form == 0:
        return think(plain, 'The parent sits below the target. Draft: {"problem": "a harder version"}. '
                            "Add a step rather than larger numbers.")
    if form == 1:
        if latex and "\\\\\\\\" not in body:  # a LaTeX line break (\\) would be ambiguous left single
            body = _LATEX.sub(lambda m: "\\", body)
        if not latex:
            return f"<child>\n```json\n{json.dumps(fields, ensure_ascii=False, indent=2)}\n```\n</child>"
        return f"Here is the rewritten item.\n\n<child>\n{body}\n</child>"
    if form == 2:
        pretty = json.dumps(fields, ensure_ascii=False, indent=2)
        return f"<child>\n```json\n{pretty[:-2]},\n}}\n```\n</child>"  # a trailing comma
    return f"{plain}\n\nThe change asks for one more step of reasoning than the parent needs."


def verdict(plain: str, valid: bool, reason: str, form: int | None) -> str:
    """A judge reply saying ``valid`` (plain: the form the prompt asks for)."""
    if form is None:
        return plain
    said, other = ("valid", "invalid") if valid else ("invalid", "valid")
    return (
        think(plain, f"At first sight <verdict>{other}</verdict>? Recheck the reference answer."),
        f"<verdict>**{said}**</verdict>\n<reason>{reason}</reason>",
        f"<reason>{reason}</reason>\n<verdict>{said}</verdict>",
        f"Checking the item.\n\n<verdict>{said.capitalize()}</verdict>\n\n<reason>{reason}</reason>",
    )[form % 4]


__all__ = ["CUT_SHARE", "Cut", "DEFAULT_RATE", "LONG", "child", "code", "cut_chance", "long_reply", "math",
           "multiple_choice", "pick", "reasoning_tokens", "think", "verdict"]
