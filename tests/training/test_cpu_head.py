"""The CPU head (components/training/native_head.py): on a one-process CPU run SFT and DPO score only the labelled
positions through PyTorch's kernels, and DPO runs each pair's common prompt once; their loss, every logged metric
and the adapter's gradient are those of TRL's fused head, which scores every position of every row whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from components.training import data, trainers
from components.training.config import DPOSettings, SFTSettings
from components.training.datasets import to_records
from tests.training.conftest import text_episodes
from tests.training.test_trainers import LORA, job, schedule

FIELDS = ("log_probs", "entropy", "mean_logits", "is_top1")


def _step(trainer, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, list[float]]]:
    trainer.model.train()
    trainer.model.zero_grad()
    trainer._metrics["train"].clear()
    loss = trainer.compute_loss(trainer.model, dict(batch))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    # num_tokens is a running count over the trainer's steps, not a figure of this one
    return loss.detach(), grads, {k: list(v) for k, v in trainer._metrics["train"].items() if k != "num_tokens"}


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_loss_metrics_and_gradient_are_those_of_trls_fused_head(method, tiny_model, tiny_chat, tmp_path: Path):
    from trl.trainer.utils import add_fused_lm_head

    episodes = text_episodes(4)
    if method == "sft":
        rows = to_records(data.sft_examples(episodes, tiny_chat))
        settings = SFTSettings(packing=True, schedule=schedule(batch_size=4), lora=LORA)
    else:
        rows = to_records(data.across_episode_pairs(episodes, tiny_chat, per_task=1))
        settings = DPOSettings(schedule=schedule(batch_size=2), lora=LORA)
    trainer = trainers.build_trainer(job(method, tiny_model, tmp_path, settings), rows, [])
    causal = trainer.model.get_base_model()
    assert causal.forward.__func__.__code__.co_filename.endswith("native_head.py")
    batch = next(iter(trainer.get_train_dataloader()))
    labelled = (batch["labels"] != -100).sum() if method == "sft" else batch["completion_mask"].sum()
    assert 0 < labelled < batch["input_ids"].numel()  # some positions are not scored: the head skips them

    widths: list[tuple[int, int]] = []
    hook = causal.model.register_forward_pre_hook(lambda m, a, kw: widths.append(tuple(kw["input_ids"].shape)),
                                                  with_kwargs=True)
    loss, grads, metrics = _step(trainer, batch)
    hook.remove()
    rows, width = batch["input_ids"].shape
    if method == "dpo":  # per pair, policy and reference: the prompt once, then both rows' rest on its cache
        prompts = [w for r, w in widths if r == 1]
        assert len(prompts) == (rows // 2) * 2 and all(0 < w < width for w in prompts)  # pairs x (policy, ref)
        assert all(r == 2 and w < width for r, w in widths if r != 1)
    else:
        assert widths == [(rows, width)]
    add_fused_lm_head(causal, outputs=FIELDS)  # TRL's own head again
    want_loss, want_grads, want_metrics = _step(trainer, batch)

    torch.testing.assert_close(loss, want_loss, atol=1e-5, rtol=1e-5)
    assert grads.keys() == want_grads.keys() and any(g.abs().sum() > 0 for g in grads.values())
    for name, grad in grads.items():
        torch.testing.assert_close(grad, want_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    assert metrics.keys() == want_metrics.keys() and {"entropy", "mean_token_accuracy"} <= metrics.keys()
    for key, values in metrics.items():
        assert values == pytest.approx(want_metrics[key], abs=1e-4), key
