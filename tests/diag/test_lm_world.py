"""The LM world model on the tiny model: DiagGym serialization with the loss on the results only, the diagnosis
switch, truncation from the oldest exams, real TRL training and merge, and batched simulation through the hf policy.
Steps are few and sequences short, so the file runs on a busy CPU."""

from __future__ import annotations

import pytest

from components.diag.env import DiagEnv
from components.diag.lm_world import (
    DIAGNOSIS_LINE,
    SEPARATOR,
    WORLD_FILE,
    LMWorldConfig,
    LMWorldModel,
    SimulationRequest,
    case_events,
    fit_prompt,
    prompt_ids,
    prompt_text,
    result_loss,
    result_text,
    train_world_model,
    world_rows,
)
from components.diag.world import WorldModel, exam_block
from components.training.config import LoraSettings, Schedule, SFTSettings
from components.training.models import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def cases(train):
    return train[:3]


def split(row):
    """(prompt ids, completion ids) of a row whose loss mask is zeros then ones."""
    mask = row["loss_mask"]
    start = mask.index(1)
    assert mask == [0] * start + [1] * (len(mask) - start)
    return row["input_ids"][:start], row["input_ids"][start:]


def by_id(cases):
    return {c.case_id: c for c in cases}


# ------------------------------------------------------------------------------------------------ serialization
def test_the_loss_is_on_the_result_tokens_and_the_end_marker_only(cases, tokenizer):
    data = world_rows(cases, tokenizer, max_length=100_000)
    assert len(data.rows) == data.examples == sum(len(c.events) for c in cases) and not data.dropped
    for row in data.rows:
        case = by_id(cases)[row["task_id"]]
        k = int(row["episode_id"].rsplit("/", 1)[1])
        events = case_events(case)
        prompt, completion = split(row)
        assert completion[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(completion[:-1]) == events[k].result  # exactly the recorded result
        assert tokenizer.decode(prompt) == prompt_text(case, events[k].exam, events[:k])
        assert tokenizer.decode(prompt).endswith(exam_block(events[k].exam, ""))


def test_the_diagnosis_switch_adds_the_diagnosis_line_and_nothing_else(cases, tokenizer):
    case = cases[0]
    events = case_events(case)
    off = prompt_text(case, events[2].exam, events[:2])
    on = prompt_text(case, events[2].exam, events[:2], condition_on_diagnosis=True)
    profile = case.profile.strip()
    assert on == off.replace(profile, profile + "\n" + DIAGNOSIS_LINE.format(case.diagnosis), 1)
    assert case.diagnosis not in off
    rows_off = world_rows([case], tokenizer, max_length=100_000).rows
    rows_on = world_rows([case], tokenizer, max_length=100_000, condition_on_diagnosis=True).rows
    for a, b in zip(rows_off, rows_on, strict=True):
        (pa, ca), (pb, cb) = split(a), split(b)
        assert ca == cb  # the same completion, under the same loss
        assert tokenizer.decode(pb) == tokenizer.decode(pa).replace(
            profile, profile + "\n" + DIAGNOSIS_LINE.format(case.diagnosis), 1)


def test_fit_prompt_leaves_out_the_oldest_blocks_first():
    assert fit_prompt([1], [[2, 2], [3], [4, 4]], [9], budget=6) == ([1, 3, 4, 4, 9], 1)
    assert fit_prompt([1], [[2, 2], [3], [4, 4]], [9], budget=100) == ([1, 2, 2, 3, 4, 4, 9], 0)
    assert fit_prompt([1], [[2, 2], [3], [4, 4]], [9], budget=3) == ([1, 9], 3)
    assert fit_prompt([1, 1], [[2]], [9], budget=2) is None


def test_truncation_drops_the_oldest_exams_and_never_cuts_the_result(cases, tokenizer):
    def n(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    # one less than the longest example with no earlier exam: that one is dropped, many others are truncated
    max_length = max(n(prompt_text(c, e.exam, [])) + n(e.result) + 1 for c in cases for e in case_events(c)) - 1
    data = world_rows(cases, tokenizer, max_length=max_length)
    assert data.truncated > 0 and data.dropped > 0  # both happen at this length
    assert len(data.rows) + data.dropped == data.examples
    kept = set()
    for row in data.rows:
        case = by_id(cases)[row["task_id"]]
        k = int(row["episode_id"].rsplit("/", 1)[1])
        kept.add((case.case_id, k))
        events = case_events(case)
        prompt, completion = split(row)
        assert len(row["input_ids"]) <= max_length
        assert tokenizer.decode(completion[:-1]) == events[k].result
        # the prompt is the newest contiguous run of earlier exams; one more would not have fit
        start = next(j for j in range(k + 1) if tokenizer.decode(prompt) == prompt_text(case, events[k].exam,
                                                                                          events[j:k]))
        if start > 0:
            longer = prompt_text(case, events[k].exam, events[start - 1:k])
            assert n(longer) + len(completion) > max_length
    for case in cases:  # what was dropped could not fit even with no earlier exam
        for k, event in enumerate(case_events(case)):
            if (case.case_id, k) not in kept:
                assert n(prompt_text(case, event.exam, [])) + n(event.result) + 1 > max_length


def test_result_text_stops_at_a_separator_or_a_next_exam():
    assert result_text(" Value: 3" + SEPARATOR + "Exam name:\nX") == "Value: 3"
    assert result_text("NO GROWTH.\nExam name:\nLipase") == "NO GROWTH."


# ------------------------------------------------------------------------------------------------ training
@pytest.fixture(scope="module")
def trained(tiny_model, cases, tmp_path_factory):
    settings = SFTSettings(packing=True, lora=LoraSettings(r=8, alpha=16, dropout=0.0),
                           schedule=Schedule(max_steps=3, batch_size=2, max_length=512, learning_rate=2e-2,
                                             warmup_ratio=0.0, precision="fp32", logging_steps=1, save_steps=1000))
    return train_world_model(cases[:2], str(tiny_model), tmp_path_factory.mktemp("lm-world"), settings,
                             condition_on_diagnosis=True)


def test_a_few_lora_steps_lower_the_loss_on_the_results_and_merge_into_a_checkpoint(trained, tiny_model, cases,
                                                                                   tokenizer):
    assert trained.result.global_step == 3
    assert trained.model_dir.name == "merged" and (trained.model_dir / "model.safetensors").is_file()
    assert not (trained.model_dir / "adapter_config.json").exists()
    assert trained.data["rows"] > 0 and trained.data["rows"] + trained.data["dropped"] == trained.data["examples"]
    rows = world_rows(cases[:2], tokenizer, max_length=512, condition_on_diagnosis=True).rows[:6]
    before, after = result_loss(tiny_model, rows), result_loss(trained.model_dir, rows)
    assert after < before - 0.02, (before, after)
    assert (trained.model_dir / WORLD_FILE).is_file()


def test_the_trained_checkpoint_simulates_through_the_hf_policy_as_it_was_trained(trained, cases):
    world = LMWorldModel.from_checkpoint(trained.model_dir, max_new_tokens=6)
    try:
        assert world.config.condition_on_diagnosis  # read from the checkpoint
        assert isinstance(world, WorldModel)
        out = world.simulate(cases[0], "Complete blood count", [])
        assert isinstance(out, str)
        request = world.request(0, SimulationRequest(cases[0], "CBC", ()))  # a synonym asks for the catalogue exam
        text = world.tokenizer.decode(request.prompt_token_ids)
        assert text.endswith(exam_block("Complete blood count", "")) and DIAGNOSIS_LINE.format(cases[0].diagnosis) in text
    finally:
        world.close()


# ------------------------------------------------------------------------------------------------ simulation
@pytest.fixture(scope="module")
def policy(tiny_model):
    from components.policies.registry import PolicyConfig, build_policy

    p = build_policy(PolicyConfig(backend="hf", options={"model": str(tiny_model)}))
    yield p
    p.close()


def requests_of(cases):
    out = []
    for case in cases[:2]:
        events = case_events(case)
        out += [SimulationRequest(case, "Lactate", ()), SimulationRequest(case, "Basic metabolic panel", events[:2]),
                SimulationRequest(case, "Chest X-ray", events[:1], seed=1)]
    return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_simulate_many_gives_each_request_what_simulate_gives_it_alone(policy, tokenizer, cases, temperature):
    world = LMWorldModel(policy, tokenizer, LMWorldConfig(max_new_tokens=6, temperature=temperature))
    reqs = requests_of(cases)
    batched = world.simulate_many(reqs)
    alone = [world.simulate(r.case, r.exam, r.history, seed=r.seed) for r in reqs]
    assert batched == alone and all(isinstance(t, str) for t in batched)
    assert not getattr(policy, "_kv", {})  # each request's keys and values are released: no next turn comes


def test_the_environment_plays_with_the_lm_world_model(policy, tokenizer, cases):
    env = DiagEnv(LMWorldModel(policy, tokenizer, LMWorldConfig(max_new_tokens=4)))
    env.reset(cases[0])
    step = env.step('{"type": "order_exams", "exams": ["Lactate", "CBC"]}')
    assert [p.exam for p in env.history] == ["Lactate", "Complete blood count"]
    assert exam_block("Lactate", env.history[0].result) in step.observation.text
    assert env.episode.metadata["world_model"] == "lm"


def test_a_chat_text_policy_is_refused(tokenizer):
    class TextPolicy:
        backend, model_id, uses_tokens, max_context = "openai", "m", False, None

    with pytest.raises(ValueError, match="chat"):
        LMWorldModel(TextPolicy(), tokenizer)  # type: ignore[arg-type]


def test_a_prompt_too_long_for_the_context_keeps_the_newest_exams(policy, tokenizer, cases):
    case = cases[0]
    history = case_events(case)
    assert len(history) > 2
    room = len(prompt_ids(tokenizer, case, "Lactate", history[-2:], 1 << 30)[0])  # the last two exams just fit
    world = LMWorldModel(policy, tokenizer, LMWorldConfig(max_length=room + 100, max_new_tokens=100))
    ids = world.request(0, SimulationRequest(case, "Lactate", history)).prompt_token_ids
    assert len(ids) == room
    assert tokenizer.decode(ids) == prompt_text(case, "Lactate", history[-2:])


def test_the_fidelity_card_batches_the_lm_world_model_and_reads_the_same_results(policy, tokenizer, cases):
    from components.diag.fidelity import evaluate_fidelity

    world = LMWorldModel(policy, tokenizer, LMWorldConfig(max_new_tokens=6))
    calls: list[int] = []

    class OneAtATime:  # the same model without simulate_many: one request per call
        name = "lm"

        def simulate(self, case, exam, history, *, seed=0):
            calls.append(1)
            return world.simulate(case, exam, history, seed=seed)

    held = cases[:2]
    batched = evaluate_fidelity(world, held, batch=4)
    alone = evaluate_fidelity(OneAtATime(), held)
    assert batched.results == alone.results == len(calls) > 4
    assert batched.model_dump(exclude={"seconds"}) == alone.model_dump(exclude={"seconds"})
