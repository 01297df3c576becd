"""GRPO's scoring forward with each group's prompt computed once.

A group's episodes start from the same prompt (the task, the patient record): in DiagGym's episodes it is most of
every sequence the trainer scores. TRL's forward reads each episode whole, so a micro-batch of a group's n episodes
runs the prompt's layers n times, forward and backward, and scores every prompt position with the LM head on a CPU
(the head's kernel skips masked positions on Triton devices only). Here each distinct prompt of a micro-batch runs
once: its keys and values (with their graph: the adapter's gradient flows back through them) are repeated for its
episodes, whose completions then run on top of them, cut to the group's longest (TRL pads them to the batch's
longest), and only completion positions are scored: on a GPU or across processes through the fused head TRL uses,
in a one-process CPU run with PyTorch's own kernels (components.training.native_head). The figures are the stock forward's up to
float rounding (tests/rl/test_shared_prompt.py), for the loss, the reference pass and the old
log-probs alike.

A multi-turn episode's completion holds the environment's replies between the agent's turns (TRL's `tool_mask` 0).
The loss reads them nowhere: every use of the log-probs and entropies is multiplied by completion_mask × tool_mask.
So in the loss's forward only the agent's positions meet the LM head, and the others score 0, as padding does. In
DiagGym's episodes most completion positions are the environment's, and the head over the vocabulary, forward and
backward, was about a third of a CPU step.

The gain needs a group's episodes in the same micro-batch: TRL shuffles a generation batch before splitting it,
which changes nothing where one generation batch feeds one optimizer step (the gradient is summed over its
micro-batches whatever their order), as in components.rl.grpo, so there the batch is kept in order. Gradient
checkpointing would recompute a layer whose cache was already appended to; with it, and for multimodal or MoE
models, the stock forward runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import cache
from typing import Any

from components.training.native_head import cpu_head_applies, head_fields, prefix_cache


@contextlib.contextmanager
def _in_order() -> Iterator[None]:
    """TRL's generation batch left in the order it was played (a group's episodes side by side)."""
    import trl.trainer.grpo_trainer as grpo_trainer

    shuffle = grpo_trainer.shuffle_sequence_dict
    grpo_trainer.shuffle_sequence_dict = lambda batch: batch
    try:
        yield
    finally:
        grpo_trainer.shuffle_sequence_dict = shuffle


def prompt_groups(prompt_ids: Any, prompt_mask: Any) -> dict[tuple[int, ...], list[int]]:
    """Rows by their prompt without its padding, in first-seen order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, (ids, mask) in enumerate(zip(prompt_ids.tolist(), prompt_mask.tolist(), strict=True)):
        groups.setdefault(tuple(t for t, m in zip(ids, mask, strict=True) if m), []).append(row)
    return groups


@cache
def trainer_class() -> type:
    """GRPOTrainer with the shared-prompt forward (built on first use: importing TRL takes seconds)."""
    import torch
    from torch.nn import functional
    from trl import GRPOTrainer

    class SharedPromptGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
        _agent_mask: Any = None  # the loss's tool_mask while its forward runs

        def _one_step_per_generation(self) -> bool:
            return (self.args.steps_per_generation == self.args.gradient_accumulation_steps
                    and self.num_iterations == 1)

        def _prepare_inputs(self, generation_batch: Any) -> Any:
            with _in_order() if self._one_step_per_generation() else contextlib.nullcontext():
                return super()._prepare_inputs(generation_batch)

        def _compute_loss(self, model: Any, inputs: Any) -> Any:
            self._agent_mask = inputs.get("tool_mask")  # what the loss reads: its forward scores those alone
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._agent_mask = None

        def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any,
                                               logits_to_keep: int, batch_size: int | None = None,
                                               compute_entropy: bool = False, compute_aux_loss: bool = False,
                                               **extra: Any) -> tuple[Any, Any, Any]:
            if compute_aux_loss or self.args.gradient_checkpointing or any(v is not None for v in extra.values()):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                    **extra)
            batch_size = batch_size or input_ids.size(0)
            native = self._native_head(model)
            agent = self._agent_mask
            chunks = [self._shared(model, input_ids[start:start + batch_size], attention_mask[start:start + batch_size],
                                   logits_to_keep, native, compute_entropy,
                                   None if agent is None else agent[start:start + batch_size])
                      for start in range(0, input_ids.size(0), batch_size)]
            logps = torch.cat([lp for lp, _ in chunks])
            return logps, torch.cat([ent for _, ent in chunks]) if compute_entropy else None, None

        def _native_head(self, model: Any) -> tuple[Any, Any] | None:
            """(backbone, LM head) where `cpu_head_applies`: scored with head_fields. None elsewhere (TRL's fused
            head)."""
            causal = self.accelerator.unwrap_model(model)
            causal = causal.get_base_model() if hasattr(causal, "get_base_model") else causal
            if not cpu_head_applies(self.accelerator, causal):
                return None
            return causal.base_model, causal.get_output_embeddings()

        def _shared(self, model: Any, input_ids: Any, attention_mask: Any, keep: int, native: tuple[Any, Any] | None,
                    entropy: bool, agent: Any = None) -> tuple[Any, Any]:
            completion, completion_mask = input_ids[:, -keep:], attention_mask[:, -keep:]
            scored = completion_mask if agent is None else completion_mask * agent  # the positions the head scores
            groups = prompt_groups(input_ids[:, :-keep], attention_mask[:, :-keep])
            logps, entropies, order = [], [], []
            for prompt, rows in groups.items():
                n, device = len(rows), input_ids.device
                ids = torch.tensor(prompt, device=device)
                # TRL pads every completion to the longest of the generation batch: this group's run to its own
                # longest (padding scores 0 either way), the rest put back after
                real = completion_mask[rows].any(dim=0).nonzero()
                width = int(real.max()) + 1 if len(real) else 1
                cache = None
                with self.accelerator.autocast():
                    if len(prompt) > 1:  # all of it but its last token, whose logits score the first completion token
                        cache = prefix_cache(model, ids[None, :-1], n, logits_to_keep=1)
                    rest = torch.cat([ids[-1:].expand(n, 1), completion[rows, :width]], dim=1)
                    seen = torch.cat([torch.ones(n, len(prompt), dtype=completion_mask.dtype, device=device),
                                      completion_mask[rows, :width]], dim=1)
                    if native is None:
                        labels = torch.cat([torch.full_like(rest[:, :1], -100),
                                            completion[rows, :width].masked_fill(scored[rows, :width] == 0, -100)],
                                           dim=1)
                        out = model(input_ids=rest, attention_mask=seen, past_key_values=cache, labels=labels,
                                    fused_lm_head=True)
                        lp, ent = out.log_probs, out.entropy
                    else:
                        backbone, head = native
                        hidden = backbone(input_ids=rest, attention_mask=seen, past_key_values=cache,
                                          use_cache=False).last_hidden_state[:, :-1]
                        fields = head_fields(hidden, head.weight, head.bias, rest[:, 1:], scored[rows, :width].bool(),
                                             self.temperature, ("log_probs", "entropy") if entropy else ("log_probs",))
                        lp, ent = fields["log_probs"], fields.get("entropy")
                logps.append(functional.pad(lp, (0, keep - width)))
                entropies.append(None if ent is None else functional.pad(ent, (0, keep - width)))
                order += rows
            back = torch.argsort(torch.tensor(order, device=input_ids.device))  # the rows in the order they came
            entropy = torch.cat(entropies)[back] if all(e is not None for e in entropies) else None
            return torch.cat(logps)[back], entropy

    return SharedPromptGRPOTrainer
