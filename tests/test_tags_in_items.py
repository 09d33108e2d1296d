"""Item text that holds the tags the prompts and replies are read by (``</think>``, ``</child>``, ``</problem>``,
``</parent>``): an item about reasoning models, or code that splits a reply at ``</think>``, is read whole, and a
reasoning model's drafts are still never read as its answer."""

from __future__ import annotations

import json

import pytest

from benchfill.evaluators.code_tests import extract_code
from benchfill.prompts import (
    MalformedReply,
    format_judge_prompt,
    format_rewriter_prompt,
    format_solver_prompt,
    parse_child,
)
from benchfill.replies import final_part, final_parts


def _child(problem: str) -> str:
    return f"<child>{json.dumps({'problem': problem, 'answer': '1'})}</child>"


@pytest.mark.parametrize("problem", [
    "A chat model ends its reasoning with </think> before it answers. How many tags?",
    "Close the element: </child>. How many tags?",
    "Open <child> and close </child>, then </think> and </reasoning>.",
])
def test_a_child_holding_the_tags_is_read_whole_with_or_without_reasoning_before_it(problem):
    assert parse_child(_child(problem))["problem"] == problem
    # a reasoning block before it, holding a draft child of its own: the draft is not the answer
    reply = f"<think>\nDraft: {_child('draft')}. No.\n</think>\n\n{_child(problem)}"
    assert parse_child(reply)["problem"] == problem
    # the chat template opened the reasoning, so only its closing tag is in the reply
    assert parse_child(f"Draft: {_child('draft')}. No.\n</think>\n{_child(problem)}")["problem"] == problem


def test_a_draft_in_the_reasoning_is_never_read_as_the_answer():
    # before the fix these were refused; they still are: the tag outside any child ends the reasoning
    for reply in (f"Draft: {_child('draft')} </think> no child after all",
                  f"<think>Draft: {_child('draft')}</think> none",
                  f"<think>Draft: {_child('draft')} and it never closes"):
        with pytest.raises(MalformedReply):
            parse_child(reply)
    # the last child after the reasoning wins, as before
    assert parse_child(f"<think>{_child('draft')}</think>{_child('first')} then {_child('last')}")["problem"] == "last"
    # a malformed final child is reported (a repair turn), never replaced by a draft before it or an earlier child
    bad = '<child>{"problem": "FINAL" "answer": "2"}</child>'
    for reply in (f"Let me draft {_child('DRAFT')} no, harder.</think>\n{bad}", f"{_child('FIRST')} better:\n{bad}",
                  f"<think>Draft {_child('DRAFT')}</think>\n{bad}"):
        with pytest.raises(MalformedReply, match="invalid JSON inside <child>"):
            parse_child(reply)
    # ... nor by a draft that holds the tag itself, where no child, or no whole one, follows the reasoning
    draft = _child("What does </think> mark?")
    for reply in (f"Draft {draft} too easy.</think>\nI could not write a harder one.",
                  f"<think>The tag </think> ends it. Draft {draft} no.</think>\nSorry.",
                  f'Draft {draft} no.</think>\n<child>{{"problem": "FINAL", "answer": "y"}}'):
        with pytest.raises(MalformedReply):
            parse_child(reply)


def test_final_parts_lists_the_last_reading_first_and_the_whole_reply_only_where_no_reasoning_opens():
    assert final_parts("a </think> b </think> c") == [" c", " b </think> c", "a </think> b </think> c"]
    assert final_parts("<think>a</think> b </think> c") == [" c", " b </think> c"]
    assert final_parts("plain") == ["plain"] and final_part("<think>a</think> b") == " b"


def test_code_that_splits_at_the_reasoning_tag_is_graded_as_written():
    code = 'def f(s):\n    return s.split("</think>")[-1]\n'
    fenced = f"```python\n{code}```"
    assert extract_code(fenced, "f") == code
    assert extract_code(f"<think>\nsketch:\n```python\ndef f(s): return 0\n```\n</think>\n\n{fenced}", "f") == code
    # a reasoning's sketch is still not the answer where nothing fenced follows it
    assert "return 0" not in extract_code("<think>\n```python\ndef f(s): return 0\n```\n</think>\nno code", "f")
    # ... nor where the reasoning mentions the tag, or its sketch quotes it
    assert "return 0" not in extract_code("<think>draft\n```python\ndef f(s): return 0\n```\nmention </think> more "
                                          "</think> final", "f")
    assert "split" not in extract_code('<think>\n```python\ndef f(s): return s.split("</think>")\n```\n</think> final',
                                       "f")
    # a sketch that quotes the tag, in the reasoning: the final code is graded, and a final without code is no code
    sketch = '<think>Sketch:\n```python\ndef f(r): return r.split("</think>")[-1]\n```\nUse partition.</think>\n'
    final = "def f(r):\n    return r.rpartition(TAG)[2]\n"
    assert extract_code(f"{sketch}```python\n{final}```\n", "f") == final
    assert "split" not in extract_code(f"{sketch}I cannot solve this.", "f")


def _world(items, evaluator="math"):
    from benchfill.sim import World

    return World.from_items(items, evaluator=evaluator, text_field="problem", answer_field="answer", n_probes=3,
                            seed=0)


def test_the_simulated_world_reads_a_problem_a_parent_and_an_item_holding_their_closing_tags():
    from benchfill.sim import roles

    items = [{"id": "t", "problem": "Markup: the text ends </problem> here, and </parent>, </item>. What is 2+2?",
              "answer": "4"},
             {"id": "u", "problem": "What is 3+3?", "answer": "6"}]
    world = _world(items)
    for it in items:
        prompt = format_solver_prompt(it)
        assert roles.prompt_item(world, prompt, [{"role": "user", "content": prompt}]).fields["problem"] == it["problem"]
    parent = {"problem": items[0]["problem"], "answer": "4"}
    rewriter = format_rewriter_prompt(parent, 0.5, [({"problem": "What is 3+3?", "answer": "6"}, 0.2)])
    assert roles._json_block(rewriter, "parent")["problem"] == items[0]["problem"]
    assert roles._json_block(format_judge_prompt(parent), "item")["problem"] == items[0]["problem"]


def test_a_verdict_whose_reason_quotes_the_reasoning_tag_is_read_and_a_draft_verdict_still_is_not():
    from benchfill.prompts import parse_verdict

    assert parse_verdict("<verdict>valid</verdict><reason>it asks where </think> goes</reason>") == (
        True, "it asks where </think> goes")
    reply = "<think>I'd say <verdict>invalid</verdict>.</think>\n<verdict>valid</verdict><reason>ends at </think></reason>"
    assert parse_verdict(reply) == (True, "ends at </think>")
    for reply in ("<think>draft <verdict>valid</verdict></think> none", "draft <verdict>valid</verdict> </think> none"):
        with pytest.raises(MalformedReply):
            parse_verdict(reply)
    # a verdict quoted in the reason is the item's text, not the judge's verdict
    assert parse_verdict("<think>x</think><verdict>invalid</verdict><reason>The item writes <verdict>valid</verdict> "
                         "in its text</reason>")[0] is False
