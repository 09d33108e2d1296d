"""The evaluator registry: names, options, user registration, spec field look-up."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchfill.errors import ConfigError, DataError
from benchfill.evaluators import EVALUATORS, Evaluator, Grade, get_evaluator, register


def test_builtins_registered_by_name():
    assert {"math", "multiple_choice", "code"} <= set(EVALUATORS)
    for name in ("math", "multiple_choice", "code"):
        assert get_evaluator(name).name == name


def test_unknown_name_is_config_error_listing_known_names():
    with pytest.raises(ConfigError, match=r"unknown name 'maths'.*code, math, multiple_choice"):
        get_evaluator("maths")


def test_bad_option_is_config_error():
    with pytest.raises(ConfigError, match="'code'.*bad options"):
        get_evaluator("code", no_such_option=1)


def test_user_registered_evaluator():
    @register("exact_match")
    class ExactMatch(Evaluator):
        def grade(self, response, item, spec=None):
            ok = response.strip() == item["answer"]
            return Grade(ok, response.strip(), "exact" if ok else "differs")

    try:
        ev = get_evaluator("exact_match")
        assert ev.name == "exact_match"
        assert ev.grade_many([" yes ", "no"], {"answer": "yes"}, None) == [
            Grade(True, "yes", "exact"),
            Grade(False, "no", "differs"),
        ]
        assert ev.chance({"answer": "yes"}) == 0.0
    finally:
        EVALUATORS.pop("exact_match")


def test_spec_fields_from_plain_object_and_missing_field_named():
    spec = SimpleNamespace(answer_field="solution_value", options_field=None)
    ev = get_evaluator("math")
    assert ev.grade(r"\boxed{12}", {"id": "q1", "solution_value": "12"}, spec).correct
    with pytest.raises(DataError, match=r"item 'q1'.*'solution_value'"):
        ev.grade(r"\boxed{12}", {"id": "q1", "answer": "12"}, spec)


def test_chance_levels():
    assert get_evaluator("math").chance({"answer": "1"}) == 0.0
    assert get_evaluator("code").chance({}) == 0.0
    assert get_evaluator("multiple_choice").chance({"options": ["a", "b", "c", "d"]}) == 0.25
