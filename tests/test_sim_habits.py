"""The simulated world writes as real models do (benchfill/sim/habits.py), and benchfill reads every form.

A habit is form only: at any rate the world's draws (what a probe answers, which child the rewriter
writes, what the judge says) are the same, so a run's figures do not move with it, provided every reader
(the graders, parse_child, parse_verdict) reads every form as the world meant it. These tests pin both.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from benchfill import prompts
from benchfill.benchmarks import registered_spec
from benchfill.config import ProbeConfig, RetryConfig
from benchfill.evaluators import get_evaluator
from benchfill.probes import ProbePanel, RolloutClient
from benchfill.sim import SimServer, World, habits, roles, texts
from benchfill.store import Store


def load(shared_data, name: str, limit: int) -> list[dict]:
    with open(shared_data / name / "items.jsonl") as fh:
        return [json.loads(line) for line in fh][:limit]


def test_pick_spreads_the_rate_over_the_forms_and_zero_keeps_every_reply_plain():
    draws = [k / 10_000 for k in range(10_000)]
    picked = [habits.pick(0.3, u, 4) for u in draws]
    assert sum(f is None for f in picked) == 7_000
    assert [sum(f == k for f in picked) for k in range(4)] == [750] * 4
    assert all(habits.pick(0.0, u, 4) is None for u in draws)


@pytest.mark.parametrize("evaluator, data, text_field, answer_field", [
    ("math", "aime24", "problem", "answer"),
    ("multiple_choice", "mmlu-pro", "question", "answer"),
    ("code", "humaneval", "prompt", "canonical_solution"),
])
def test_every_answer_form_is_graded_as_the_world_meant_it(shared_data, evaluator, data, text_field, answer_field):
    items = load(shared_data, data, 6 if evaluator == "code" else 20)
    world = World.from_items(items, evaluator=evaluator, text_field=text_field, answer_field=answer_field, seed=2)
    grader = get_evaluator(evaluator)
    for item in world.items.values():
        for form in (None, 0, 1, 2, 3):
            for correct in (True, False):
                reply = roles._answer_text(world, item, correct, 0.41, False, form)
                assert grader.grade(reply, item.fields).correct == correct, (form, reply[-300:])
                if not correct:  # a wrong answer that reasons at length first: its reasoning names the right one
                    long = habits.long_reply(roles._draft(world, item), reply, cut=False)
                    assert not grader.grade(long, item.fields).correct, long[-300:]
                    # cut while it reasons, it gives no answer, and is the start of the reply it would have been
                    cut = habits.long_reply(roles._draft(world, item), reply, cut=True)
                    assert isinstance(cut, habits.Cut) and long.startswith(cut)
                    assert not grader.grade(cut, item.fields).correct


def test_forms_never_move_a_draw(shared_data):
    items = load(shared_data, "aime24", 12)
    plain, dressed = (World.from_items(items, evaluator="math", text_field="problem", answer_field="answer",
                                       seed=5, reply_habits=rate) for rate in (0.0, 1.0))
    for item in items[:6]:
        a, b = plain.lookup(item["problem"]), dressed.lookup(item["problem"])
        for probe in plain.probes[::3]:
            ra, na = roles.solve(plain, probe, "p", "h" + item["id"], a, 3, 16)
            rb, nb = roles.solve(dressed, probe, "p", "h" + item["id"], b, 3, 16)
            assert na == nb and ra != rb
            assert not any(isinstance(r, habits.Cut) for r in ra)
    parent = {k: items[0][k] for k in ("id", "problem", "answer")}
    prompt = prompts.format_rewriter_prompt(parent, 0.8, [], registered_spec("aime24"))
    kids = [prompts.parse_child(roles.rewrite(w, prompt, "h", s, 1, [False])[0])
            for w in (plain, dressed) for s in range(8)]
    assert kids[:8] == kids[8:]


# Real benchmarks' LaTeX as a rewriter copies it into the JSON it is asked for with the backslashes left
# single: MMLU-Pro glues commands to the next word and writes prices in \textcent, AIME draws in TikZ
GLUED = [
    r"For the reaction Na_(_1) + (1/2)Cl_2(g) \rightleftharpoonsNaCl_(s), find the enthalpy.",
    r"Define \textquotedblleftlabor\textquotedblright in economic terms.",
    r"A tile costs 9 (3/4) \textcent per 9 inch tile; how much for 40 tiles?",
    "Draw it: \\begin{tikzpicture}\n  \\node[above] at (A) {$A$};\n\\end{tikzpicture} Find $\\theta$.",
    r"Compute \nablaf in cylindrical coordinates, and \tfrac{1}{2}\times 3.",
    r"The historian wrote that he had eaten him[,] which was prohibited, [sic,] as the law said.",
]


@pytest.mark.parametrize("text", GLUED)
@pytest.mark.parametrize("form", [None, 0, 1, 2, 3])
def test_every_child_form_is_read_back_to_the_same_item(text, form):
    child = {"problem": text, "answer": "12", "note": 'a "quoted" word, and a list [1, 2,]'}
    reply = habits.child(child, form, latex=True)
    assert prompts.parse_child(reply) == child, reply


def test_the_latex_slip_leaves_single_backslashes_that_json_alone_misreads():
    child = {"problem": GLUED[0], "answer": "3"}
    reply = habits.child(child, 1, latex=True)
    assert "\\rightleftharpoonsNaCl" in reply and "\\\\" not in reply
    body = reply[reply.index("<child>") + 7:reply.index("</child>")]
    assert json.loads(body, strict=False)["problem"] != GLUED[0]  # \r read as a carriage return
    assert prompts.parse_child(reply)["problem"] == GLUED[0]


@pytest.mark.parametrize("valid", [True, False])
def test_every_verdict_form_is_read_as_said(valid):
    for form in (None, 0, 1, 2, 3):
        reply = habits.verdict(texts.judge_reply(valid, 0.2), valid, texts.judge_reason(valid, 0.2), form)
        said, reason = prompts.parse_verdict(reply)
        assert said == valid and reason == texts.judge_reason(valid, 0.2), reply


def test_probe_rollouts_through_the_server_read_every_form_and_count_the_cut_ones(shared_data, tmp_path):
    """The probes' real client against the served world, every reply in a habit: the graded answers are the
    world's, and the replies that ran out of tokens are counted as such (finish_reason "length")."""
    items = load(shared_data, "aime24", 10)
    spec = registered_spec("aime24")
    world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", seed=9,
                             reply_habits=1.0)
    no_wait = RetryConfig(max_attempts=3, initial_wait_s=0, max_wait_s=0, jitter_s=0)

    async def go(url):
        panel = ProbePanel([ProbeConfig(name=p, base_url=url, model=p, trials=8) for p in world.probes], no_wait)
        async with RolloutClient(Store(tmp_path / "s.db"), panel, spec, get_evaluator("math")) as rc:
            return await rc.rollouts(items, seed=4), rc.stats

    with SimServer(world) as srv:
        results, stats = asyncio.run(go(srv.base_url))
        served = srv.stats["models"]
    assert sum(r.correct for r in results) == sum(served[p]["correct"] for p in world.probes)
    cut = sum(served[p].get("cut_replies", 0) for p in world.probes)
    assert stats.cut == cut > 0
    wrong = sum(r.trials - r.correct for r in results)
    assert cut < 3 * habits.cut_chance(1.0, 4096) * wrong  # a hundredth of the wrong answers, at this rate


def test_a_larger_token_cap_cuts_fewer_replies():
    assert habits.cut_chance(0.3, 4096) == pytest.approx(0.003)
    assert habits.cut_chance(0.3, 16384) == pytest.approx(0.00075)
    assert habits.cut_chance(0.3, None) == pytest.approx(0.000375) and habits.cut_chance(0.0, 512) == 0
    assert habits.cut_chance(0.3, 1024) == pytest.approx(0.012)
    # below LONG, every wrong answer that reasons at length is cut, and no more: the plain ones are short
    assert habits.cut_chance(1.0, 16) == habits.cut_chance(1.0, habits.LONG) == pytest.approx(0.08)
    assert habits.reasoning_tokens(0.3, 0.003) == pytest.approx(4096) and habits.reasoning_tokens(0.3, 0.0) > 1e300


def test_an_answer_holding_a_full_stop_is_written_boxed_so_its_grade_stays_the_worlds():
    # "Answer: i.e. 5" would end at "i.e": the unboxed forms fall back to the boxed one for such an answer
    grader = get_evaluator("math")
    for answer in ("i.e. 5", "\\text{St. Louis}", "3.5"):
        plain = texts.math_response(answer, True, 0.3)
        for form in (None, 0, 1, 2, 3):
            assert grader.grade(habits.math(plain, answer, "9", form), {"answer": answer}).correct, (answer, form)


def test_a_valid_reply_whose_code_holds_real_tabs_reads_back_as_written():
    # the prefix rule had read a tab before "fraction" as \tfrac and one before "extra" as a \text command
    tabbed = {"prompt": "def split(x):\n\tfraction = x % 1\n\tbinomial = 2\n\treturn fraction", "answer": "0"}
    assert prompts.parse_child("<child>" + json.dumps(tabbed) + "</child>") == tabbed
    regex = '<child>{"prompt": "import re\\ndef f(s):\\n\\textra = re.findall(r\'\\d+\', s)", "answer": "0"}</child>'
    assert prompts.parse_child(regex)["prompt"] == "import re\ndef f(s):\n\textra = re.findall(r'\\d+', s)"


def test_the_servers_count_of_cut_replies_is_what_the_client_sees(shared_data):
    # a stop string that ends a reply before it runs out makes it no cut one (63 counted, 0 said "length")
    import openai

    items = load(shared_data, "aime24", 6)
    world = World.from_items(items, evaluator="math", text_field="problem", answer_field="answer", seed=9,
                             reply_habits=1.0)

    async def ask(url, stop):
        async with openai.AsyncOpenAI(base_url=url, api_key="sk-test", max_retries=0) as c:
            got = await asyncio.gather(*(c.chat.completions.create(
                model="sim-probe-01", messages=[{"role": "user", "content": it["problem"]}], n=16, seed=3,
                stop=stop, max_tokens=512) for it in items))  # at 512 tokens, 8% of the wrong answers run out
        return sum(ch.finish_reason == "length" for r in got for ch in r.choices)

    for stop in (None, ["Let"]):
        with SimServer(world) as srv:
            said = asyncio.run(ask(srv.base_url, stop))
            assert srv.stats["models"]["sim-probe-01"].get("cut_replies", 0) == said
        assert (said > 0) == (stop is None)
