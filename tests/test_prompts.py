"""Prompt templates: strict rendering, user overrides, the contract's tags, reply parsers."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from benchfill.errors import ConfigError
from benchfill.evaluators import get_evaluator
from benchfill.prompts import (
    MalformedReply,
    format_judge_prompt,
    format_rewriter_prompt,
    format_solver_prompt,
    load_prompt,
    parse_child,
    parse_verdict,
    placeholders,
    render,
)

DEFAULTS = ["solver_math", "solver_multiple_choice", "solver_code", "rewriter", "judge"]
MATH_SPEC = SimpleNamespace(
    text_field="problem", answer_field="answer", evaluator="math", solver_prompt="math"
)
MC_SPEC = SimpleNamespace(
    text_field="question",
    answer_field="answer",
    options_field="options",
    evaluator="multiple_choice",
    solver_prompt="multiple_choice",
)
CODE_SPEC = SimpleNamespace(
    text_field="prompt",
    answer_field="canonical_solution",
    tests_field="test",
    entry_point_field="entry_point",
    evaluator="code",
    solver_prompt="code",
)


def _first(shared_data, bench):
    with open(shared_data / bench / "items.jsonl") as fh:
        return json.loads(fh.readline())


@pytest.mark.parametrize("name", DEFAULTS)
def test_defaults_ship_and_parse(name):
    text = load_prompt(name)
    assert text == load_prompt(name + ".txt")
    assert placeholders(text)  # every default takes at least one variable


def test_missing_and_unused_variables_are_errors():
    with pytest.raises(ConfigError, match=r"prompts/solver_math.txt: missing variable 'problem'"):
        render("solver_math")
    with pytest.raises(ConfigError, match=r"solver_math.txt: unused variable 'answer'"):
        render("solver_math", problem="1+1?", answer="2")
    assert "<problem>\n1+1?\n</problem>" in render("solver_math", problem="1+1?")


def test_unknown_template_and_bad_names():
    with pytest.raises(ConfigError, match=r"prompt 'nope': no file nope.txt"):
        load_prompt("nope")
    with pytest.raises(ConfigError, match="letters, digits"):
        load_prompt("../etc/passwd")


def test_user_dir_overrides_by_file_name(tmp_path, monkeypatch):
    (tmp_path / "judge.txt").write_text("Judge {item} strictly; reply <verdict>valid</verdict>. {{literal}}")
    out = render("judge", user_dir=tmp_path, item="X")
    assert out == "Judge X strictly; reply <verdict>valid</verdict>. {literal}"
    # the environment variable works the same way; other templates fall back to the defaults
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(tmp_path))
    assert load_prompt("judge").startswith("Judge {item}")
    assert load_prompt("rewriter") == load_prompt("rewriter", user_dir=tmp_path / "absent")
    # a filler fed through an override that lacks a variable the filler passes fails loudly
    with pytest.raises(ConfigError, match=r"judge.txt: unused variable 'answer_field'"):
        format_judge_prompt({"problem": "p", "answer": "1"})


def test_a_solver_of_its_own_shows_the_options_and_reads_the_hugging_face_layout(tmp_path):
    # a spec's own multiple-choice template could not name {options} ("unknown {options}", citing a
    # built-in that does not exist), and without it the probes saw no options; the Hugging Face layout
    # {"text": [...], "label": [...]} was shown as "A. text / B. label" and refused by the grader
    from benchfill.prompts import check_overrides

    (tmp_path / "solver_cot.txt").write_text("Q: {problem}\n{options}\nThink, then write \\boxed{{X}}.")
    assert check_overrides(tmp_path) == []
    own = SimpleNamespace(**{**vars(MC_SPEC), "solver_prompt": "cot", "options_field": "choices"})
    arc = {"id": "a1", "question": "Which is a metal?", "answer": "3",
           "choices": {"text": ["wood", "glass", "iron", "wool"], "label": ["1", "2", "3", "4"]}}
    assert format_solver_prompt(arc, own, tmp_path) == (
        "Q: Which is a metal?\nA. wood\nB. glass\nC. iron\nD. wool\nThink, then write \\boxed{X}.")
    mc = get_evaluator("multiple_choice")
    assert mc.grade("The answer is (C)", arc, own).correct and not mc.grade("The answer is (A)", arc, own).correct
    assert mc.reference_fault(arc, own) is None and mc.chance(arc, own) == 0.25
    # a template that leaves {options} out is filled without them; an unknown name is still refused
    (tmp_path / "solver_bare.txt").write_text("Q: {problem}")
    assert format_solver_prompt(arc, SimpleNamespace(**{**vars(own), "solver_prompt": "bare"}), tmp_path) == (
        "Q: Which is a metal?")
    (tmp_path / "solver_typo.txt").write_text("Q: {problem} {option}")
    with pytest.raises(ConfigError, match=r"unknown \{option\} \(a solver of its own takes problem"):
        check_overrides(tmp_path)
    (tmp_path / "solver_typo.txt").write_text("Write \\boxed{}")
    with pytest.raises(ConfigError, match=r"boxed\{\{\}\}, is written"):
        check_overrides(tmp_path)


def test_an_override_that_does_not_ask_for_the_reply_tags_is_refused(tmp_path):
    from benchfill.prompts import check_overrides, load_prompt

    text = load_prompt("judge").replace("<verdict>valid</verdict> or <verdict>invalid</verdict>", "valid or invalid")
    (tmp_path / "judge.txt").write_text(text)
    with pytest.raises(ConfigError, match=r"judge.txt: does not ask for the reply's <verdict>...</verdict> tags"):
        check_overrides(tmp_path)
    (tmp_path / "judge.txt").write_text(load_prompt("judge"))
    (tmp_path / "rewriter.txt").write_text(load_prompt("rewriter").replace("<child>", "<item>").replace("</child>", "</item>"))
    with pytest.raises(ConfigError, match=r"rewriter.txt: does not ask for the reply's <child>"):
        check_overrides(tmp_path)


def test_a_solver_of_its_own_naming_what_its_grader_lacks_is_refused_before_any_work(tmp_path, monkeypatch):
    from benchfill.benchmarks import BenchmarkSpec

    (tmp_path / "solver_mine.txt").write_text("{problem}\n{options}")
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(tmp_path))
    math_own = BenchmarkSpec(name="m", evaluator="math", solver_prompt="mine")
    with pytest.raises(ConfigError, match=r"spec.toml: field solver_prompt 'mine': .*names \{options\}, which a math"):
        math_own.check_runnable("spec.toml")
    BenchmarkSpec(name="c", evaluator="multiple_choice", text_field="question", options_field="options",
                  solver_prompt="mine").check_runnable("spec.toml")


def test_broken_override_is_named(tmp_path):
    (tmp_path / "solver_math.txt").write_text("Solve {problem} and write {x.y}")
    with pytest.raises(ConfigError, match=r"solver_math.txt: placeholder \{x.y\} must be a plain name"):
        render("solver_math", user_dir=tmp_path, problem="p")
    (tmp_path / "solver_math.txt").write_text("Solve {problem and a stray brace")
    with pytest.raises(ConfigError, match=r"solver_math.txt: .*literal brace"):
        render("solver_math", user_dir=tmp_path, problem="p")


def test_solver_prompts_on_real_items(shared_data):
    aime = _first(shared_data, "aime24")
    text = format_solver_prompt(aime, MATH_SPEC)
    assert f"<problem>\n{aime['problem'].strip()}\n</problem>" in text and r"\boxed{}" in text

    mmlu = _first(shared_data, "mmlu-pro")
    text = format_solver_prompt(mmlu, MC_SPEC)
    options = re.search(r"<options>\n(.*)\n</options>", text, re.DOTALL).group(1).splitlines()
    assert len(options) == len(mmlu["options"])
    assert options[0] == f"A. {mmlu['options'][0]}" and options[-1].startswith("ABCDEFGHIJ"[len(options) - 1])
    assert "The answer is (X)" in text

    he = _first(shared_data, "humaneval")
    text = format_solver_prompt(he, CODE_SPEC)
    assert he["prompt"] in text and "```python" in text and he["entry_point"] in text


def test_rewriter_prompt_follows_the_contract(shared_data):
    with open(shared_data / "aime25" / "items.jsonl") as fh:
        items = [json.loads(line) for line in fh][:5]
    parent = items[0]
    references = [(items[1], 0.48), (items[2], 0.62), (items[3], 0.50), (items[4], 0.60)]
    text = format_rewriter_prompt(parent, 0.55, references, MATH_SPEC)
    assert "<target_difficulty>5.5</target_difficulty>" in text
    shown = re.search(r"<parent>\n(.*?)\n</parent>", text, re.DOTALL).group(1)
    assert json.loads(shown) == {"problem": parent["problem"], "answer": parent["answer"]}
    blocks = re.findall(r'<reference difficulty="([0-9.]+)">\n(.*?)\n</reference>', text, re.DOTALL)
    assert [d for d, _ in blocks] == ["4.8", "5.0", "6.0", "6.2"]  # easiest first
    assert json.loads(blocks[0][1])["answer"] == items[1]["answer"]
    assert 'field "answer"' in text and "<child>" in text
    # the 0-10 scale rounds half up from the decimal the caller wrote
    assert "<target_difficulty>4.2</target_difficulty>" in format_rewriter_prompt(parent, 0.415, [])
    assert "<target_difficulty>10.0</target_difficulty>" in format_rewriter_prompt(parent, 1.0, [])


def test_judge_prompt_holds_the_child(shared_data):
    child = {"problem": "Find 2+3.", "answer": "5"}
    text = format_judge_prompt(child, MATH_SPEC)
    assert json.loads(re.search(r"<item>\n(.*?)\n</item>", text, re.DOTALL).group(1)) == child
    assert "<verdict>valid</verdict>" in text and "<reason>" in text


def test_parse_child_tolerates_prose_and_fences():
    reply = (
        "Sure! Here is a harder version.\n<child>\n```json\n"
        '{"problem": "Find the sum of all bases $b>9$ ...", "answer": "70"}\n```\n</child>\nHope this helps.'
    )
    assert parse_child(reply, required=["problem", "answer"]) == {
        "problem": "Find the sum of all bases $b>9$ ...",
        "answer": "70",
    }
    # a draft then a final child: the last one counts
    two = '<child>{"problem": "draft", "answer": "1"}</child> on second thought <child>{"problem": "final", "answer": "2"}</child>'
    assert parse_child(two)["problem"] == "final"


def test_parse_child_reads_latex_a_model_left_unescaped():
    # Models often write LaTeX into JSON as on a page; json.loads alone turned \frac into a form feed and
    # "rac", \times into a tab and "imes", \binom into a backspace, \neq into a line break, with no error,
    # and refused \sqrt outright
    reply = (
        r'<child>{"problem": "Find $\frac{1}{2} \times \binom{4}{2}$ for $x \neq 3$, $\sqrt{2}$, \(a\),'
        r' \underline{y}, $\theta$, $\rho \right)$.", "answer": "\frac{3}{4}"}</child>'
    )
    child = parse_child(reply, required=("problem", "answer"))
    assert child["problem"] == (
        "Find $\\frac{1}{2} \\times \\binom{4}{2}$ for $x \\neq 3$, $\\sqrt{2}$, \\(a\\),"
        " \\underline{y}, $\\theta$, $\\rho \\right)$."
    )
    assert child["answer"] == "\\frac{3}{4}"
    # escapes that are not LaTeX stay escapes: a line break before a word, a tab, a quote, a code point
    mixed = r'<child>{"problem": "One\nThen \nuance\tab \"q\" \u00e9 \sqrt{x}", "answer": "1"}</child>'
    assert parse_child(mixed)["problem"] == 'One\nThen \nuance\tab "q" \u00e9 \\sqrt{x}'
    # a code item's line breaks, written into the string as they are
    code = '<child>{"prompt": "def f(x):\n    return x\n", "answer": "1"}</child>'
    assert parse_child(code)["prompt"] == "def f(x):\n    return x\n"


def test_parse_child_reads_what_models_write_around_the_json():
    want = {"problem": "x", "answer": "1"}
    for reply in [
        '<child>{"problem": "x", "answer": "1",}</child>',  # a trailing comma
        "<child>{'problem': 'x', 'answer': '1'}</child>",  # a Python dict's quotes
        '<child id="c1">{"problem": "x", "answer": "1"}</child>',
        '<child>{"problem": "x", "answer": "1"} (sets like {a} are fine)</child>',  # a brace in prose after it
        # a reasoning model's draft child inside its thinking is not its answer
        '<think>I could write <child>{"problem": "draft", "answer": "0"}</child></think>\n<child>{"problem": "x", "answer": "1"}</child>',
    ]:
        assert parse_child(reply) == want, reply
    # a Python dict holding LaTeX: Python would read \frac's \f as a form feed, so it is asked for again
    with pytest.raises(MalformedReply, match="invalid JSON"):
        parse_child(r"<child>{'problem': 'Compute $\frac{1}{2} \times 3$', 'answer': '3'}</child>")
    assert parse_child(r"<child>{'problem': 'Line one.\nLine two', 'answer': '4'}</child>")["problem"] == "Line one.\nLine two"
    with pytest.raises(MalformedReply, match="never closes"):
        parse_child('<think>draft <child>{"problem": "draft", "answer": "0"}</child> but wait,')
    # a reply that doubles its other backslashes meant a line break before "u"; mixed ones still read
    # \theta and \times as LaTeX (a tab never begins "heta")
    assert parse_child(r'<child>{"problem": "Let x be real.\nu = x+1", "answer": "1"}</child>')["problem"] == (
        "Let x be real.\nu = x+1")
    mixed = r'<child>{"problem": "$\\frac{1}{2}$, $\theta \times 2$, \nu = 1", "answer": "1"}</child>'
    assert parse_child(mixed)["problem"] == "$\\frac{1}{2}$, $\\theta \\times 2$, \nu = 1"
    single = r'<child>{"problem": "$\sqrt{2}$, $\nu$, {\rm m}", "answer": "1"}</child>'
    assert parse_child(single)["problem"] == "$\\sqrt{2}$, $\\nu$, {\\rm m}"


def test_parse_child_keeps_well_escaped_items_as_they_are(shared_data):
    # a reply that escapes as json.dumps does reads back unchanged: every item of these sets, and an
    # mmlu-pro question whose display math opens on a line break before "u" ("$$\n" then "u^{\prime}")
    for bench in ("aime24", "aime25", "amc23", "humaneval"):
        with open(shared_data / bench / "items.jsonl") as fh:
            for line in fh:
                item = {k: v for k, v in json.loads(line).items() if isinstance(v, (str, int, float, list))}
                assert parse_child(f"<child>{json.dumps(item, ensure_ascii=False)}</child>") == item, bench
    spring = {"question": "satisfies\n$$\nu^{\\prime \\prime}+\\frac{1}{4} u=k g(t)\n$$", "answer": "B"}
    assert parse_child(f"<child>{json.dumps(spring)}</child>") == spring
    # mmlu-pro 10552, with no LaTeX at all: a line that begins "e^M"
    strings = {"question": "defined recursively as follows.\ne^M= e, and\nif w is a string", "answer": "A"}
    assert parse_child(f"<child>{json.dumps(strings)}</child>") == strings


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ('{"problem": "x", "answer": "1"}', "no <child>"),
        ("<child>no json here</child>", "no JSON object"),
        ('<child>{"problem": "x", "answer": }</child>', "invalid JSON"),
        ("<child>[1, 2]</child>", "no JSON object"),
        ('<child>{"problem": "x"}</child>', "lacks field 'answer'"),
        ("", "no <child>"),
    ],
)
def test_parse_child_malformed(reply, message):
    with pytest.raises(MalformedReply, match=message):
        parse_child(reply, required=("problem", "answer"))
    assert issubclass(MalformedReply, ValueError)


def test_parse_verdict_reads_what_models_write():
    assert parse_verdict("<verdict>**valid**</verdict>") == (True, "")
    assert parse_verdict('<verdict>"invalid"</verdict><reason>r</reason>') == (False, "r")
    assert parse_verdict("<verdict>valid.</verdict>") == (True, "")
    assert parse_verdict("<think>I'd say <verdict>valid</verdict>.</think><verdict>invalid</verdict>")[0] is False
    with pytest.raises(MalformedReply, match="never closes"):
        parse_verdict("<think>I'd reply <verdict>valid</verdict>. But 3 times 7 is")


def test_parse_verdict():
    assert parse_verdict("<verdict>valid</verdict>\n<reason>Answer 70 checks out.</reason>") == (
        True,
        "Answer 70 checks out.",
    )
    assert parse_verdict("Thinking...\n<verdict> INVALID </verdict><reason>The answer\n is 71.</reason>") == (
        False,
        "The answer is 71.",
    )
    assert parse_verdict("<verdict>valid</verdict>") == (True, "")
    with pytest.raises(MalformedReply, match="no <verdict>"):
        parse_verdict("It looks valid to me.")
    with pytest.raises(MalformedReply, match="'maybe'"):
        parse_verdict("<verdict>maybe</verdict>")


def test_solver_prompt_and_evaluator_agree_on_reply_format(shared_data):
    """A reply in the format the solver prompt asks for is what the evaluator grades."""
    mmlu = _first(shared_data, "mmlu-pro")
    prompt = format_solver_prompt(mmlu, MC_SPEC)
    asked = re.search(r'"(The answer is \(X\))"', prompt).group(1)
    reply = "Reasoning.\n" + asked.replace("X", mmlu["answer"])
    assert get_evaluator("multiple_choice").grade(reply, mmlu, MC_SPEC).correct
    aime = _first(shared_data, "aime24")
    assert r"\boxed{}" in format_solver_prompt(aime, MATH_SPEC)
    assert get_evaluator("math").grade(f"Work.\n\\boxed{{{aime['answer']}}}", aime, MATH_SPEC).correct


def test_an_override_folder_a_run_cannot_use_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    # A misspelt placeholder was found at the run's first rewrite, after its folder and fit were made, and
    # --dry-run passed it; a UTF-16 file was a traceback; a folder that does not exist, or a misspelt file
    # name, left the built-in prompts in use without a word.
    from benchfill.cli import main
    from benchfill.prompts import check_overrides

    over = tmp_path / "prompts"
    over.mkdir()
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(over))
    assert check_overrides() == []
    (over / "rewritter.txt").write_text("x")
    assert check_overrides() == [f"{over / 'rewritter.txt'}: overrides no prompt (they are judge, rewriter, "
                                 "solver_code, solver_math, solver_multiple_choice, or solver_NAME for a spec's "
                                 "solver_prompt); it is not used"]
    (over / "solver_terse.txt").write_text("Answer: {problem}")  # a spec's own solver template: fine
    assert len(check_overrides()) == 1
    rewriter = load_prompt("rewriter")
    for text, said in ((rewriter.replace("{parent}", "{parnet}"), r"missing \{parent\}; unknown \{parnet\}"),
                       (rewriter + "\nstray { brace", r"rewriter\.txt: expected '}' before end of string \(write a literal"),
                       (rewriter.replace("{references}", ""), r"missing \{references\} \(the built-in rewriter uses")):
        (over / "rewriter.txt").write_text(text)
        with pytest.raises(ConfigError, match=said):
            check_overrides()
    (over / "rewriter.txt").write_text(rewriter.replace("{parent}", "{parnet}"))
    runs = tmp_path / "runs"
    for extra in ([], ["--dry-run"]):
        assert main(["run", "--benchmark", "demo", "--gaps", "1", "--runs-dir", str(runs), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "rewriter.txt: missing {parent}" in err, err
    assert not runs.exists()  # nothing made
    (over / "rewriter.txt").write_text(rewriter, encoding="utf-16")
    with pytest.raises(ConfigError, match=r"rewriter\.txt: not a UTF-8 text file"):
        check_overrides()
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"^BENCHFILL_PROMPTS_DIR .*nowhere: no such folder"):
        check_overrides()


def test_a_child_carries_the_parents_content_fields_only(shared_data):
    # aime24's references carried their AoPS solutions and urls (a 26,643-token prompt in one run), the
    # child was asked to write a solution and a url, and whatever fields the rewriter added shipped unreviewed
    from benchfill.prompts import new_child

    with open(shared_data / "aime24" / "items.jsonl") as fh:
        items = [json.loads(line) for line in fh]
    text = format_rewriter_prompt(items[0], 0.5, [(it, 0.4 + 0.01 * i) for i, it in enumerate(items[1:17])], MATH_SPEC)
    refs = re.findall(r'<reference difficulty="[0-9.]+">\n(.*?)\n</reference>', text, re.DOTALL)
    assert len(refs) == 16 and all(set(json.loads(r)) == {"problem", "answer"} for r in refs)
    assert "the same fields (problem, answer)" in text and '"solution":' in text.split("</parent>")[0]
    assert sum(map(len, refs)) < 0.25 * sum(len(json.dumps(it, ensure_ascii=False)) for it in items[1:17])
    reply = {"problem": "Find y.", "answer": "4", "solution": "easy", "url": "https://x", "difficulty": 6.1}
    assert new_child(reply, "bf-g0", MATH_SPEC, items[0]) == {"problem": "Find y.", "answer": "4", "id": "bf-g0"}
    # a spec that reads one of them (a code benchmark whose answer is its "solution") keeps it
    coded = SimpleNamespace(**{**vars(MATH_SPEC), "answer_field": "solution"})
    parent = {"id": "p", "problem": "Write f.", "solution": "def f(): pass", "url": "u"}
    assert new_child({"problem": "Write g.", "solution": "def g(): pass", "url": "u"}, "c", coded, parent) == {
        "problem": "Write g.", "solution": "def g(): pass", "id": "c"}
    # as does one whose grader reads one beyond the spec's named fields (its worked solution, say)
    from benchfill.evaluators import EVALUATORS, Evaluator, register

    @register("with_solution")
    class WithSolution(Evaluator):
        item_fields = (("solution_field", "solution"),)

    try:
        graded = SimpleNamespace(**{**vars(MATH_SPEC), "evaluator": "with_solution"})
        parent = {"id": "p", "problem": "Find x.", "answer": "3", "solution": "x = 3"}
        assert new_child({"problem": "Find y.", "answer": "4", "solution": "y = 4"}, "c", graded, parent) == {
            "problem": "Find y.", "answer": "4", "solution": "y = 4", "id": "c"}
        assert "the same fields (problem, answer, solution)" in format_rewriter_prompt(parent, 0.5, [], graded)
    finally:
        EVALUATORS.pop("with_solution", None)


def test_a_childs_options_lettered_by_the_rewriter_lose_their_letters_where_the_parents_have_none():
    # "A. 12" was shown to the probes as "A. A. 12" (the solver prompt letters the options) and released so
    from benchfill.prompts import new_child

    parent = {"id": "p", "question": "q", "options": ["12", "15", "18"], "answer": "B"}
    child = new_child({"question": "q2", "options": ["A. 12", "B. 15", "(C) 18"], "answer": "B"}, "c", MC_SPEC, parent)
    assert child["options"] == ["12", "15", "18"]
    assert "A. 12\nB. 15\nC. 18" in format_solver_prompt(child, MC_SPEC)
    # letters out of order are text, and a benchmark whose own options carry letters keeps them
    odd = ["A. 12", "C. 15", "x"]
    assert new_child({"question": "q2", "options": odd, "answer": "B"}, "c", MC_SPEC, parent)["options"] == odd
    own = dict(parent, options=["A) 12", "B) 15"])
    assert new_child({"question": "q2", "options": ["A) 13", "B) 16"], "answer": "B"}, "c", MC_SPEC, own)["options"] == [
        "A) 13", "B) 16"]


def test_a_datasets_id_column_is_hidden_and_renamed_as_id_is():
    # an hf: dataset's ids come from its task_id column (the spec names no id_field): shown, the rewriter
    # copied the parent's into the child
    from benchfill.prompts import new_child

    parent = {"id": "2025-I-13", "task_id": "2025-I-13", "problem": "Find x.", "answer": "3", "year": "2025"}
    text = format_rewriter_prompt(parent, 0.5, [(dict(parent, id="a", task_id="a"), 0.4)], MATH_SPEC)
    assert "task_id" not in text and '"year": "2025"' in text
    child = new_child({"problem": "Find y.", "answer": "4", "task_id": "2025-I-13", "year": "2025"}, "bf-g0", MATH_SPEC,
                      parent)
    assert child == {"problem": "Find y.", "answer": "4", "year": "2025", "id": "bf-g0", "task_id": "bf-g0"}
    # numbered ids (MMLU-Pro's question_id, MBPP's task_id): the child's is null, not a text among numbers
    numbered = {"id": "70", "question_id": 70, "problem": "Find x.", "answer": "3"}
    assert new_child({"problem": "Find z.", "answer": "5", "question_id": 70}, "bf-g1", MATH_SPEC, numbered) == {
        "problem": "Find z.", "answer": "5", "id": "bf-g1", "question_id": None}
    # the spec's own id_field takes the child's id even where its ids are numbers: a release is read back by it
    keyed = SimpleNamespace(**{**vars(MATH_SPEC), "id_field": "question_id"})
    assert new_child({"problem": "Find z.", "answer": "5"}, "bf-g1", keyed, numbered)["question_id"] == "bf-g1"
    # a column named like one but holding something else is content
    other = dict(parent, task_id="arithmetic")
    assert '"task_id": "arithmetic"' in format_rewriter_prompt(other, 0.5, [], MATH_SPEC)


def test_a_misnamed_override_is_a_warning_that_quiet_keeps(tmp_path, monkeypatch, capsys):
    # It went through the progress printer: a bare "warning: ..." line, gone under --quiet, and never in a
    # library caller's log.
    from benchfill.cli import main

    over = tmp_path / "prompts"
    over.mkdir()
    (over / "rewritter.txt").write_text("x")
    monkeypatch.setenv("BENCHFILL_PROMPTS_DIR", str(over))
    assert main(["run", "--benchmark", "demo", "--gaps", "1", "--rounds", "1", "--parents", "2", "--children", "2",
                 "--sim-probes", "6", "--runs-dir", str(tmp_path / "runs"), "--quiet"]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if "rewritter" in ln]
    assert said == [f"benchfill: warning: {over / 'rewritter.txt'}: overrides no prompt (they are judge, rewriter, "
                    "solver_code, solver_math, solver_multiple_choice, or solver_NAME for a spec's solver_prompt); "
                    "it is not used"]
