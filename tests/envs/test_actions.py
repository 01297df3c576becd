"""parse_action: what model output is read as which action."""

from __future__ import annotations

from components.envs.actions import InspectData, ParseError, RunCode, SubmitAnswer, find_actions, parse_action


def test_bare_json_object():
    a = parse_action('{"type": "submit_answer", "answer": 42.5}')
    assert isinstance(a, SubmitAnswer) and a.answer == 42.5


def test_json_fence_with_prose_around():
    action = '{"type": "inspect_data", "path": "a.db", "column": "t.drug", "value": "aspirin"}'
    text = f"I will look at the data.\n```json\n{action}\n```\nThanks."
    a = parse_action(text)
    assert isinstance(a, InspectData) and (a.path, a.column, a.value) == ("a.db", "t.drug", "aspirin")


def test_json_inline_in_prose():
    a = parse_action('Final: {"type": "submit_answer", "answer": ["a", "b"]} done')
    assert isinstance(a, SubmitAnswer) and a.answer == ["a", "b"]


def test_python_fence_is_run_code():
    a = parse_action("Let me check.\n```python\nimport pandas as pd\nprint({'type': 1})\n```")
    assert isinstance(a, RunCode) and a.code == "import pandas as pd\nprint({'type': 1})"


def test_run_code_as_json_keeps_newlines():
    a = parse_action('{"type": "run_code", "code": "x = 1\\nprint(x)"}')
    assert isinstance(a, RunCode) and a.code == "x = 1\nprint(x)"


def test_code_then_a_submit_runs_the_code_as_the_docstring_says():
    # the model has not seen the code's output yet: the first action in the reply is the one taken
    fenced = '```python\nprint(1)\n```\n```json\n{"type": "submit_answer", "answer": 1}\n```'
    bare = '```python\nprint(1)\n```\nSo the answer is {"type": "submit_answer", "answer": 1}'
    for text in (fenced, bare):
        a = parse_action(text)
        assert isinstance(a, RunCode) and a.code == "print(1)", text
        assert [type(x) for x in find_actions(text)] == [RunCode, SubmitAnswer]


def test_a_submit_before_the_code_is_the_submit():
    fenced = '```json\n{"type": "submit_answer", "answer": 2}\n```\n```python\nprint(1)\n```'
    bare = '{"type": "submit_answer", "answer": 2}\n```python\nprint({"type": "run_code"})\n```'
    for text in (fenced, bare):
        a = parse_action(text)
        assert isinstance(a, SubmitAnswer) and a.answer == 2, text


def test_two_json_actions_take_the_first_and_braces_in_code_are_not_actions():
    text = 'First {"type": "inspect_data", "path": "a.csv"} then {"type": "submit_answer", "answer": 3}'
    assert isinstance(parse_action(text), InspectData)
    code = '```python\nx = {"type": "submit_answer", "answer": 9}\nprint(x)\n```'
    assert [type(x) for x in find_actions(code)] == [RunCode]


def test_deeply_nested_json_is_a_parse_error_not_a_crash():
    assert isinstance(parse_action("{" + '"a":[' * 100_000), ParseError)
    assert isinstance(parse_action('{"type": "submit_answer", "answer": ' + "[" * 100_000 + "]" * 100_000 + "}"),
                      (SubmitAnswer, ParseError))


def test_submit_code_answer_as_string():
    a = parse_action('{"type": "submit_answer", "answer": "def f(x):\\n    return x"}')
    assert isinstance(a, SubmitAnswer) and a.answer.startswith("def f")


def test_failures_say_what_was_wrong():
    assert "no JSON action" in parse_action("the answer is 5").problem
    unknown = parse_action('{"type": "explode"}')
    assert isinstance(unknown, ParseError) and "type" in unknown.problem
    missing = parse_action('{"type": "inspect_data"}')
    assert isinstance(missing, ParseError) and "path" in missing.problem
    extra = parse_action('{"type": "run_code", "code": "1", "shell": true}')
    assert isinstance(extra, ParseError) and "shell" in extra.problem
    assert isinstance(parse_action("```\n\n```"), ParseError)
    assert isinstance(parse_action('{"type": "run_code", "code": ""}'), ParseError)
