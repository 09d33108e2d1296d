"""How the simulated world writes: probe answers, rewritten children, judge replies.

Everything here is a pure function of its inputs and a uniform draw ``u`` (or a
``random.Random``), so the server stays deterministic: the same request yields the
same text however many times it was attempted.
"""

from __future__ import annotations

import hashlib
import random
import re
import string

EVALUATORS = ("math", "multiple_choice", "code")

_WS = re.compile(r"\s+")
_INT = re.compile(r"(?<![\w.])\d{1,6}(?![\w.])")


def text_key(text: str) -> str:
    """Identity of an item in the world: a hash of its whitespace-normalised text."""
    norm = _WS.sub(" ", text).strip()
    return hashlib.blake2b(norm.encode(), digest_size=12).hexdigest()


def uniform(*parts: object) -> float:
    """A uniform draw in [0, 1) that depends only on ``parts`` (not on call order or process)."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0**64


def rng_for(*parts: object) -> random.Random:
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(h, "big"))


def extract_tag(text: str, tag: str) -> str | None:
    """Content of the first ``<tag ...>...</tag>`` block, or None. Attributes on the tag are allowed."""
    blocks = extract_tags(text, tag)
    return blocks[0] if blocks else None


def extract_tags(text: str, tag: str) -> list[str]:
    """The first ``<tag ...>`` block read to each of its closing tags in turn: the block as the tags
    pair up first, then longer readings. An item's own text may hold ``</problem>`` (an item about
    markup), and a real model reads such a block whole; the caller keeps the reading that makes sense
    (a known item, JSON that parses)."""
    start = text.find("<" + tag)
    while start >= 0:
        after = start + len(tag) + 1
        if after < len(text) and text[after] in "> \n\t":
            break
        start = text.find("<" + tag, after)
    if start < 0:
        return []
    open_end = text.find(">", start)
    if open_end < 0:
        return []
    close, found = "</" + tag + ">", []
    end = text.find(close, open_end)
    while end >= 0:
        found.append(text[open_end + 1 : end].strip("\n"))
        end = text.find(close, end + len(close))
    return found


def letters(n: int) -> str:
    return string.ascii_uppercase[:n]


# -- probe answers --------------------------------------------------------------------------------


def wrong_math_answer(true: str, avoid: str, u: float) -> str:
    """A different integer (or a plainly different expression when the answer is not an integer)."""
    try:
        value = int(true.strip())
    except ValueError:
        return f"{true.strip()} + {1 + int(u * 9)}"
    step = 1 + int(u * 97)
    for k in range(step, step + 200):
        cand = str(value + k if value + k <= 999 or value < 0 else value - k)
        if cand.lstrip("0") != true.strip().lstrip("0") and cand.lstrip("0") != avoid.strip().lstrip("0"):
            return cand
    return str(value + 1000)


def math_response(answer: str, correct: bool, u: float) -> str:
    openings = (
        "Let me work through the problem step by step.",
        "We set up the relevant quantities and simplify.",
        "First, restate what is being asked, then compute.",
        "Consider the constraints one at a time.",
    )
    lead = openings[int(u * len(openings))]
    mood = "Checking the computation once more confirms it." if correct else "This seems consistent."
    return f"{lead}\nAfter carrying out the algebra, the result follows.\n{mood}\nTherefore the final answer is \\boxed{{{answer}}}."


def mc_response(letter: str) -> str:
    return f"Weighing each option against the question, the best supported one is ({letter}).\nThe answer is ({letter})"


def wrong_letter(true: str, avoid: str, n_options: int, u: float) -> str:
    pool = [c for c in letters(max(n_options, 2)) if c != true and c != avoid] or [
        c for c in letters(max(n_options, 2)) if c != true
    ]
    return pool[int(u * len(pool))]


def code_response(prompt: str, body: str) -> str:
    return f"Here is a complete implementation.\n\n```python\n{prompt.rstrip()}\n{body.rstrip()}\n```\n"


def wrong_code_body(entry_point: str) -> str:
    # A plausible-looking stub: it returns None, which no HumanEval-style check accepts.
    return f"    # TODO: handle the general case of {entry_point}\n    return None\n"


# -- rewriter: children that read as visible rewrites of their parents ----------------------------

_LEADS = (
    "Consider the following variant.",
    "Here is a modified version of a known problem.",
    "Read carefully: the setting has changed.",
    "A new scenario is described below.",
    "The following question has been adapted.",
    "Suppose the situation is altered as follows.",
    "Work on this revised problem.",
    "A related question, with new details.",
)
_TAILS = (
    "Assume all quantities are exact.",
    "State only the final result.",
    "Note that the conditions above are all required.",
    "Take every stated value at face value.",
    "No additional assumptions are needed.",
    "Give the answer in simplest form.",
    "Be careful with the edge cases.",
    "All given information is relevant.",
)


def rewrite_text(text: str, rng: random.Random) -> str:
    """A readable rewrite: a new lead sentence, shifted integers, a closing sentence."""

    def shift(m: re.Match) -> str:
        v = int(m.group(0))
        return str(v + rng.choice((1, 2, 3, 4, 5, 7))) if v > 1 else m.group(0)

    body = _INT.sub(shift, text)
    return f"{rng.choice(_LEADS)} {body.strip()} {rng.choice(_TAILS)}"


def rewrite_docstring(prompt: str, rng: random.Random) -> str:
    """Code items: keep the signature, add a sentence to the docstring (tests and solution stay valid)."""
    for quote in ('"""', "'''"):
        i = prompt.find(quote)
        if i >= 0:
            line_start = prompt.rfind("\n", 0, i) + 1
            indent = prompt[line_start:i]
            note = f"{rng.choice(_LEADS)} {rng.choice(_TAILS)}"
            j = i + 3
            return f"{prompt[:j]} {note}\n{indent}{prompt[j:].lstrip(' ')}"
    return f"# {rng.choice(_LEADS)} {rng.choice(_TAILS)}\n{prompt}"


# Where the simulated rewriter's own checks begin in an invalid child's tests: a child of that child is
# rewritten from the tests before them (``unwrapped_tests``). Each check binds the one before it as a default
# argument, so that wrapping twice (a child of an invalid child) cannot make ``check`` call itself.
SIM_TESTS_MARK = "\n\n\n# (simulated: the rewriter's tests of an invalid child)\n"


def invalid_code_test(test: str) -> str:
    """Wrap the tests with an expectation the reference solution cannot meet (an invalid child)."""
    return (
        f"{unwrapped_tests(test).rstrip()}{SIM_TESTS_MARK}"
        "def check(candidate, _inner=check):\n"
        "    _inner(candidate)\n"
        "    assert candidate.__name__ == 'not_' + candidate.__name__\n"
    )


def agreeing_code(solution: str, entry_point: str) -> tuple[str, str]:
    """An invalid child whose tests were written to its own wrong solution: (solution, tests wrapper
    suffix). The solution marks itself; the tests demand the mark, so it passes them and a right
    solution (any probe's, but one that makes the same slip) does not. Running the reference against its
    own tests cannot tell."""
    return (f"{solution.rstrip()}\n\n\n{entry_point}._sim_reference = True\n",
            f"{SIM_TESTS_MARK}"
            "def check(candidate, _inner=check):\n"
            "    _inner(candidate)\n"
            "    assert getattr(candidate, '_sim_reference', False)\n")


# The mark of the version before (its checks rebound ``check`` by a global): a resumed run's world holds
# invalid children it wrote.
_OLD_TESTS_MARK = "\n\n\n_sim_original_check = check\n\n\n"


def unwrapped_tests(test: str) -> str:
    """The tests as they were before the simulated rewriter's checks of an invalid child were added."""
    found = [i for i in (test.find(SIM_TESTS_MARK), test.find(_OLD_TESTS_MARK)) if i >= 0]
    return test[:min(found)] + "\n" if found else test


def malformed_child(fields_json: str) -> str:
    """A rewriter reply a caller must repair or retry: the child JSON is cut off."""
    return f"Here is the rewritten item.\n<child>{fields_json[: max(len(fields_json) // 2, 1)]}"


def child_reply(fields_json: str) -> str:
    return f"I rewrote the parent toward the target difficulty.\n<child>{fields_json}</child>"


_VALID_REASONS = (
    "The statement is self-consistent and the reference answer follows from it.",
    "Checked the reference answer against the conditions; it holds.",
)
_INVALID_REASONS = (
    "The reference answer does not follow from the statement.",
    "Recomputing gives a different result than the stated answer.",
)


def judge_reason(valid: bool, u: float) -> str:
    reasons = _VALID_REASONS if valid else _INVALID_REASONS
    return reasons[int(u * len(reasons))]


def judge_reply(valid: bool, u: float) -> str:
    verdict = "valid" if valid else "invalid"
    return f"<verdict>{verdict}</verdict>\n<reason>{judge_reason(valid, u)}</reason>"
