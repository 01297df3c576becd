"""Stock `GRPOTrainer(environment_factory=...)` trains through MedGym's TRL environment: 2 optimizer steps on the tiny
random model, its tool calls run in the real sandbox, its rewards are the checker's verdicts.

A random model never writes a tool call, so its sampling is steered with transformers' own `sequence_bias` (a
generation setting GRPOConfig passes through): every completion is the same submit_answer call with one fixed
answer, the truth of one task and not of the other. Everything else is the stock trainer on real parts, and the
reward can then come only from comparing that answer with each task's hidden truth: 1 on one task, 0 on the other.
"""

from __future__ import annotations

import json

import pytest

from components.adapters.trl_env import trl_dataset, trl_environment_factory
from tests.adapters.conftest import FEMALE_MEAN_AGE

pytestmark = pytest.mark.slow


def forced_completion_bias(tokenizer, text: str, bias: float = 50.0) -> dict[tuple[int, ...], float]:
    """`sequence_bias` that makes sampling write `text` after the assistant header: each token is biased after the
    shortest run of tokens before it that no other position of the text shares."""
    head = tokenizer("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    seq = head + tokenizer(text, add_special_tokens=False)["input_ids"]
    for width in range(1, 12):
        keys = [tuple(seq[max(0, i - width):i + 1]) for i in range(len(head), len(seq))]
        nexts: dict[tuple[int, ...], set[int]] = {}
        for key in keys:
            nexts.setdefault(key[:-1], set()).add(key[-1])
        if all(len(v) == 1 for v in nexts.values()):
            return dict.fromkeys(keys, bias)
    raise AssertionError("no context width makes the text unambiguous")


@pytest.fixture
def one_thread():
    """A model this small runs op by op: threads only contend (minutes instead of seconds on a busy machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_stock_grpo_trainer_trains_two_steps_on_checker_rewards(settings, tiny_model, tmp_path, one_thread, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    # SmolLM2's template drops tool calls; TRL's ChatML template with tools uses the same special tokens
    tokenizer.chat_template = qwen2_5_chat_template
    answer = f"{FEMALE_MEAN_AGE:.2f}"  # the "age" task's truth within its tolerance; wrong for "sodium"
    call = json.dumps({"name": "submit_answer", "arguments": {"answer": answer}})
    bias = forced_completion_bias(tokenizer, f"<tool_call>\n{call}\n</tool_call><|im_end|>")

    episodes = []
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=160, max_tool_calling_iterations=1, learning_rate=1e-4, logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, bf16=False, shuffle_dataset=False, seed=0,
        generation_kwargs={"sequence_bias": bias},
    )
    trainer = GRPOTrainer(model=str(tiny_model), args=args, processing_class=tokenizer,
                          train_dataset=trl_dataset(settings, repeat=4),
                          environment_factory=trl_environment_factory(settings, episode_sink=episodes.append))
    trainer.train()

    assert trainer.state.global_step == 2
    logged = [h["rewards/MedGymToolEnv/mean"] for h in trainer.state.log_history if "rewards/MedGymToolEnv/mean" in h]
    assert len(logged) == 2
    assert len(episodes) == 8, "2 steps x 2 tasks x 2 generations, each rollout one episode"
    for ep in episodes:  # every reward is the checker's verdict on the submitted answer
        assert ep.submitted and ep.submitted_answer == answer and ep.check is not None
        assert ep.reward == float(ep.check.correct) == float(ep.task_id == "age")
    assert logged == [0.5, 0.5]  # per step: the two "age" rollouts right, the two "sodium" ones wrong
    # the steered completions agree within each group, so the advantages (and the gradient) are zero: this proves
    # the wiring (tool call -> sandbox -> checker -> reward -> optimizer step), not learning
    assert all(h["tools/call_frequency"] == 1.0 and h["tools/failure_frequency"] == 0.0
               for h in trainer.state.log_history if "tools/call_frequency" in h)
