"""What a model's reply commits to, once its reasoning is set aside.

Reasoning models (DeepSeek-R1, QwQ, Qwen3 and their distills) write their thinking into the reply between
``<think>`` and ``</think>`` when the server runs no reasoning parser, as ``vllm serve`` does by default.
That thinking drafts answers, options, verdicts and items it then rejects ("so the answer is (B)? Let me
check C"), so every reader of a reply (the probe graders, the judge's and the rewriter's parsers) reads
only what follows the last closing tag. A reply that opens its reasoning and never closes it (cut at
``max_tokens``, or stopped) has no answer at all. Chat templates that put the opening tag into the prompt
leave only the closing one in the reply; that is read the same way.

The answer itself may hold a closing tag: a child item about reasoning models, or code that splits a
reply at ``</think>``. Read from the last tag, such an answer is cut in two. ``final_parts`` lists what
follows each closing tag, the last first, so that a structured reader (the rewriter's child, a code
block) that finds nothing whole after the last tag can read from an earlier one. It falls back only
where the last tag leaves nothing it could read, so a reply it reads today is read the same.
"""

from __future__ import annotations

import re

_CLOSE = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.IGNORECASE)
_OPEN = re.compile(r"\s*<(?:think|thinking|reasoning)\s*>", re.IGNORECASE)


def final_part(reply: str) -> str:
    """``reply`` after its last closing reasoning tag; empty where reasoning opens and never closes."""
    closes = list(_CLOSE.finditer(reply))
    if closes:
        return reply[closes[-1].end():]
    if _OPEN.match(reply):
        return ""
    return reply


def reasoning_closes(text: str) -> list[re.Match]:
    """The closing reasoning tags in ``text``."""
    return list(_CLOSE.finditer(text))


def final_parts(reply: str) -> list[str]:
    """What follows each closing reasoning tag of ``reply``, from the last tag back to the first, and then
    the whole reply where it does not open with reasoning (its only closing tags may be the answer's own);
    ``[final_part(reply)]`` where it has none."""
    closes = list(_CLOSE.finditer(reply))
    if not closes:
        return [final_part(reply)]
    parts = [reply[m.end():] for m in reversed(closes)]
    return parts if _OPEN.match(reply) else [*parts, reply]


__all__ = ["final_part", "final_parts", "reasoning_closes"]
