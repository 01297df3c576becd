"""The diag profile's evaluation backend: hf unless a profile says vllm, its options checked against the backend's
own config when the profile loads, with one line naming the file and the field."""

from __future__ import annotations

import pytest
import yaml

from components.common.io import RecordError
from components.profile.config import CONFIG_DIR, load_config


def with_evaluate(tmp_path, **evaluate):
    raw = yaml.safe_load((CONFIG_DIR / "diag-smoke.yaml").read_text())
    raw["diag"]["evaluate"] |= evaluate
    path = tmp_path / "diag-x.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_shipped_diag_profiles_evaluate_on_hf():
    for name in ("diag-smoke", "diag-demo"):
        e = load_config(name).diag.evaluate
        assert (e.policy, e.policy_options) == ("hf", {})


def test_a_profile_may_evaluate_on_vllm_with_the_backends_options(tmp_path):
    e = load_config(with_evaluate(tmp_path, policy="vllm", policy_options={"enforce_eager": True})).diag.evaluate
    assert (e.policy, e.policy_options) == ("vllm", {"enforce_eager": True})


@pytest.mark.parametrize(("evaluate", "says"), [
    ({"policy": "vllm", "policy_options": {"enforce_eagr": True}}, "diag.evaluate.policy_options.enforce_eagr"),
    ({"policy": "hf", "policy_options": {"max_batch": 0}}, "diag.evaluate.policy_options.max_batch"),
    ({"policy": "vllm", "policy_options": {"base_url": "http://127.0.0.1:8000"}}, "would play one model"),
    ({"policy": "vllm", "policy_options": {"model": "x"}}, "diag.evaluate.policy_options.model"),
    ({"policy": "openai"}, "diag.evaluate.policy"),
])
def test_bad_evaluation_policies_fail_on_one_line_naming_the_file_and_field(tmp_path, evaluate, says):
    path = with_evaluate(tmp_path, **evaluate)
    with pytest.raises(RecordError) as err:
        load_config(path)
    text = str(err.value)
    assert says in text and str(path) in text and "\n" not in text
