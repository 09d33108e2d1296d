"""What a model's reply commits to, once its reasoning is set aside.

Reasoning models (DeepSeek-R1, QwQ, Qwen3 and their distills) write their thinking into the reply between
``<think>`` and ``</think>`` when the server runs no reasoning parser, as ``vllm serve`` does by default.
That thinking drafts answers, options, verdicts and items it then rejects ("so the answer is (B)? Let me
check C"), so every reader of a reply (the probe graders, the judge's and the rewriter's parsers) reads
only what follows the last closing tag. A reply that opens its reasoning and never closes it (cut at
``max_tokens``, or stopped) has no answer at all. Chat templates that put the opening tag into the prompt
leave only the closing one in the reply; that is read the same way.
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


__all__ = ["final_part"]
