"""GRPO's shared-prompt forward (components/rl/shared_prompt.py): each distinct prompt of a micro-batch runs once and
its episodes' completions run on its keys and values; the log-probs, entropies and the adapter's gradient are those
of TRL's own forward, which reads every episode whole."""

from __future__ import annotations

import pytest
import torch

from components.rl.shared_prompt import prompt_groups, trainer_class


def _trainer(tiny_model, tmp_path):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    from components.training.models import load_tokenizer

    # gradient checkpointing off, as components.rl.grpo sets it by default: TRL's default (on) runs the stock forward
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, use_cpu=True,
                      bf16=False, report_to=[], disable_dropout=True, max_steps=1, gradient_checkpointing=False)
    return trainer_class()(model=str(tiny_model), reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                           args=args, train_dataset=Dataset.from_list([{"prompt": "a"}, {"prompt": "b"}]),
                           processing_class=load_tokenizer(str(tiny_model)),
                           peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))


def _batch(pad: int):
    """Five episodes of two prompts, interleaved as TRL's shuffle leaves them: prompts left-padded to a common
    length, completions right-padded (a completion that ended early, one that is mostly padding)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(3, 90, (5,), generator=g), torch.randint(3, 90, (8,), generator=g)
    prompts = [a, b, a, a, b]
    lengths = [6, 3, 6, 1, 4]
    width = max(len(p) for p in prompts)
    ids, mask = [], []
    for p, n in zip(prompts, lengths, strict=True):
        c = torch.randint(3, 90, (n,), generator=g)
        ids.append(torch.cat([torch.full((width - len(p),), pad), p, c, torch.full((6 - n,), pad)]))
        mask.append(torch.cat([torch.zeros(width - len(p)), torch.ones(len(p) + n), torch.zeros(6 - n)]))
    return torch.stack(ids), torch.stack(mask).long(), 6


def test_rows_group_by_their_prompt_without_padding():
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 5, 6], [0, 0, 5, 6], [0, 7, 8, 9]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]])
    assert prompt_groups(ids, mask) == {(5, 6): [0, 2], (7, 8, 5, 6): [1], (7, 8, 9): [3]}


@pytest.mark.parametrize("head", ["native", "fused"])
def test_log_probs_entropies_and_gradient_are_the_stock_forwards(tiny_model, tmp_path, head):
    """`native`: a one-process CPU run scores with PyTorch's kernels (native_head.head_fields); `fused`: through
    TRL's head, as on a GPU or across processes."""
    from trl import GRPOTrainer

    trainer = _trainer(tiny_model, tmp_path)
    if head == "fused":
        trainer._native_head = lambda model: None
    else:
        assert trainer._native_head(trainer.model) is not None
    model = trainer.model
    model.train()
    with torch.no_grad():  # a trained adapter: lora_B starts at zero, which would hide a gradient that skips it
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.1)
    ids, mask, keep = _batch(trainer.processing_class.pad_token_id)
    weights = torch.randn(ids.size(0), keep)

    def run(forward):
        model.zero_grad()
        logps, entropy, _ = forward(trainer, model, ids, mask, keep, compute_entropy=True)
        (logps * weights).sum().backward()
        return logps.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                  if p.requires_grad}

    stock = run(GRPOTrainer._get_per_token_logps_and_entropies)
    groups = []
    shared_forward = trainer._shared
    trainer._shared = lambda *a: groups.append(a) or shared_forward(*a)
    shared = run(type(trainer)._get_per_token_logps_and_entropies)
    assert groups  # the shared-prompt forward ran, not the stock one it is compared with
    assert shared[0].shape == stock[0].shape == (5, keep)
    assert torch.allclose(shared[0], stock[0], atol=1e-5), (shared[0] - stock[0]).abs().max()
    assert torch.equal(shared[0] == 0, mask[:, -keep:] == 0)  # padding scores nothing, as in TRL's forward
    assert torch.allclose(shared[1], stock[1], atol=1e-4)
    assert stock[2] and stock[2].keys() == shared[2].keys()
    for name, grad in stock[2].items():
        assert grad.abs().sum() > 0, name
        assert torch.allclose(shared[2][name], grad, atol=1e-5, rtol=1e-4), name
    # micro-batches of one row (TRL's batch_size argument) give the same
    one, no_entropy, _ = type(trainer)._get_per_token_logps_and_entropies(trainer, model, ids, mask, keep, batch_size=1)
    assert torch.allclose(one, stock[0], atol=1e-5) and no_entropy is None


def test_with_gradient_checkpointing_the_stock_forward_runs(tiny_model, tmp_path):
    trainer = _trainer(tiny_model, tmp_path)
    trainer.args.gradient_checkpointing = True
    ids, mask, keep = _batch(trainer.processing_class.pad_token_id)
    called = []
    trainer._shared = lambda *a: called.append(a)  # the shared path, which must not run
    logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, keep)
    assert logps.shape == (5, keep) and not called


@pytest.mark.parametrize("head", ["native", "fused"])
def test_the_loss_scores_the_agents_positions_alone_and_equals_the_stock_loss(tiny_model, tmp_path, head,
                                                                             monkeypatch):
    """Environment tokens in a completion (tool_mask 0) are read by no part of the loss: its forward scores the
    agent's positions only, and the loss and the adapter's gradient are the stock trainer's, which scores all."""
    from trl import GRPOTrainer

    import components.rl.shared_prompt as shared_prompt

    trainer = _trainer(tiny_model, tmp_path)
    if head == "fused":
        trainer._native_head = lambda model: None
    trainer.current_gradient_accumulation_steps = 1  # set by the Trainer's loop, which this calls around
    model = trainer.model
    model.train()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.1)
    ids, mask, keep = _batch(trainer.processing_class.pad_token_id)
    tool = torch.ones(ids.size(0), keep, dtype=torch.long)
    tool[:, 1:3] = 0  # an environment reply after the agent's first token
    completion_mask = mask[:, -keep:]
    inputs = {"prompt_ids": ids[:, :-keep], "prompt_mask": mask[:, :-keep], "completion_ids": ids[:, -keep:],
              "completion_mask": completion_mask, "tool_mask": tool,
              "advantages": torch.tensor([1.0, -0.5, -1.0, 0.5, 0.5]),
              "num_items_in_batch": (completion_mask * tool).sum()}
    scored = []
    fields = shared_prompt.head_fields

    def counting(hidden, weight, bias, targets, positions, *rest):
        scored.append(int(positions.sum()))
        return fields(hidden, weight, bias, targets, positions, *rest)

    def run(compute):
        model.zero_grad()
        loss = compute(trainer, model, dict(inputs))
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    stock = run(GRPOTrainer._compute_loss)
    monkeypatch.setattr(shared_prompt, "head_fields", counting)
    shared = run(type(trainer)._compute_loss)
    assert torch.allclose(shared[0], stock[0], atol=1e-5), (shared[0], stock[0])
    for name, grad in stock[1].items():
        assert grad.abs().sum() > 0, name
        assert torch.allclose(shared[1][name], grad, atol=1e-5, rtol=1e-4), name
    if head == "native":
        assert sum(scored) == int((completion_mask * tool).sum()) < int(completion_mask.sum())
    assert trainer._agent_mask is None  # nothing left for a later forward (the reference pass scores every position)
