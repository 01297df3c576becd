"""The `hf` backend: a transformers model generating for every waiting episode in one batch.

One forward pass per new token for the whole batch (left padding, a shared KV cache), with each row's own
temperature, top-p, seed and stop: greedy and sampled episodes share a batch, and a row's draws come from its
own generator, so its tokens do not depend on which other episodes happened to wait with it. A row stops at
the end-of-turn token or when its reply closes an action (a fenced block), so the model does not ramble into
imagined observations. Token ids and log-probabilities come back exactly as sampled.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from components.policies.models import SMOLLM2, resolve_model
from components.policies.protocol import Generation, GenerationRequest


class HFConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(default=SMOLLM2, description="a checkpoint folder or an embedded model name")
    device: str = "cpu"
    dtype: str = Field(default="float32", description="float32 | bfloat16 | float16")
    max_context: int = Field(default=4096, gt=0, description="prompt + new tokens allowed per call")
    max_batch: int = Field(default=32, gt=0, description="rows per forward pass; larger batches are split")
    threads: int | None = Field(default=None, description="torch intra-op threads (None: torch's default)")
    kv_cache_episodes: int = Field(default=64, ge=0, description="episodes whose keys/values are kept between "
                                   "turns, so a turn computes only its new tokens (0: recompute every prompt)")
    logprobs: Literal["model", "sampling"] = Field(
        default="model", description="model: under the model's own distribution; sampling: under softmax(logits / "
        "temperature), the distribution the token was drawn from, which a GRPO trainer scores (greedy rows: the model's)")


class HFPolicy:
    backend = "hf"
    uses_tokens = True
    gather_s = 0.05  # the scheduler waits this long for more episodes to join a batch

    def __init__(self, config: HFConfig | None = None, *, model: Any = None, tokenizer: Any = None):
        """Load `config.model`; or, given `model` and `tokenizer`, generate with that model as it is (a trainer's
        live model: its device, dtype and mode stay the caller's, and `config.model` only names it)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config or HFConfig()
        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        self.model_id = self.config.model
        if model is not None:
            if tokenizer is None:
                raise ValueError("an hf policy over a given model needs its tokenizer")
            self.model, self.tokenizer = model, tokenizer
            self.config = self.config.model_copy(update={"device": str(next(model.parameters()).device)})
        else:
            path: Path = resolve_model(self.config.model)
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            from components.policies import attention

            # grouped-query decoding without copying the cache per query head (see components.policies.attention)
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.config.dtype),
                                                              attn_implementation=attention.register())
            self.model.to(self.config.device).eval()
        window = getattr(self.model.config, "max_position_embeddings", None) or self.config.max_context
        self.max_context = min(self.config.max_context, window)
        self.eos_id = self.tokenizer.convert_tokens_to_ids(self.tokenizer.eos_token)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_id
        # tokens whose text holds a backtick: only after one of these can a fence have closed
        self._fence_ids = {i for t, i in self.tokenizer.get_vocab().items() if "`" in t}
        self._kv: dict[str, tuple[list[int], list[tuple[Any, Any]]]] = {}
        self._prefix: tuple[list[int], list[tuple[Any, Any]]] | None = None

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(requests), self.config.max_batch):
            out += self._generate_batch(requests[start : start + self.config.max_batch])
        return out

    def close(self) -> None:
        self._kv.clear()
        self._prefix = None
        self.model = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ decoding
    def _generate_batch(self, requests: list[GenerationRequest]) -> list[Generation]:
        import torch

        started = time.monotonic()
        prompts = [r.prompt_token_ids for r in requests]
        if any(p is None or not p for p in prompts):
            raise ValueError("the hf backend needs prompt_token_ids on every request (see components.policies.tokens)")
        n, dev = len(prompts), self.config.device
        # a turn's prompt extends the episode's previous context: reuse the keys and values computed for it; a
        # first turn starts from the prefix every episode shares (the system prompt), computed once
        self._update_prefix(prompts)
        cached = [self._cached(r.key, p) for r, p in zip(requests, prompts, strict=True)]
        reuse = [len(c[0]) if c else 0 for c in cached]
        width_c = max(reuse)
        width_s = max(len(p) - c for p, c in zip(prompts, reuse, strict=True))
        # layout per row: [pad | cached context | pad | new prompt tokens]; padding is masked out and the
        # positions count real tokens only, so every row sees exactly its own context
        ids = torch.full((n, width_s), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width_c + width_s), dtype=torch.long)
        pos = torch.zeros((n, width_s), dtype=torch.long)
        for i, (p, c) in enumerate(zip(prompts, reuse, strict=True)):
            new = p[c:]
            ids[i, width_s - len(new):] = torch.tensor(new)
            mask[i, width_c - c: width_c] = 1
            mask[i, width_c + width_s - len(new):] = 1
            pos[i, width_s - len(new):] = torch.arange(c, len(p))
        budgets = [min(r.sampling.max_new_tokens, self.max_context - len(p)) for r, p in zip(requests, prompts, strict=True)]
        # the temperature each row's log-probs are taken at: 1 (the model's distribution) unless asked for the
        # sampling distribution, where a sampled row's is its own
        scale = torch.tensor([r.sampling.temperature if self.config.logprobs == "sampling" and r.sampling.temperature > 0
                              else 1.0 for r in requests], device=dev).view(n, 1)
        past = self._batch_cache(cached, width_c, width_s + max(budgets))
        gens = [_row_generator(r) for r in requests]
        new_ids: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        finish: list[str | None] = ["length" if b <= 0 else None for b in budgets]
        rows = list(range(n))  # batch row -> request index; finished rows leave the batch
        step_ids, step_pos, mask = ids.to(dev), pos.to(dev), mask.to(dev)
        next_pos = torch.tensor([len(p) for p in prompts], device=dev).view(n, 1)
        with torch.inference_mode():
            while rows:
                out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                                 past_key_values=past, use_cache=True, logits_to_keep=1)
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
                logprobs = torch.log_softmax(logits / scale, dim=-1)
                chosen = torch.full((len(rows),), self.pad_id, dtype=torch.long)
                for b, i in enumerate(rows):
                    tok = _pick(logits[b], requests[i].sampling.temperature, requests[i].sampling.top_p, gens[i])
                    chosen[b] = tok
                    new_ids[i].append(tok)
                    logps[i].append(float(logprobs[b, tok]))
                    if tok == self.eos_id or tok in self._fence_ids and self._closes_action(new_ids[i]):
                        finish[i] = "stop"
                    elif len(new_ids[i]) >= budgets[i]:
                        finish[i] = "length"
                done = [b for b, i in enumerate(rows) if finish[i] is not None]
                if done:  # keep what the finished rows computed, then drop them from the batch
                    self._remember([requests[rows[b]] for b in done], [prompts[rows[b]] for b in done],
                                   [new_ids[rows[b]] for b in done], mask[done], past, done)
                    keep = [b for b in range(len(rows)) if finish[rows[b]] is None]
                    if not keep:
                        break
                    index = torch.tensor(keep, device=dev)
                    for layer in past.layers:
                        layer.select_rows(index)
                    rows, chosen = [rows[b] for b in keep], chosen[keep]
                    mask, next_pos, scale = mask[index], next_pos[index], scale[index]
                step_ids = chosen.view(len(rows), 1).to(dev)
                mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=dev)], dim=1)
                step_pos = next_pos
                next_pos = next_pos + 1
        share = (time.monotonic() - started) / n  # a batch's time is shared by its members
        return [
            Generation(text=self.tokenizer.decode(new_ids[i], skip_special_tokens=True), token_ids=new_ids[i],
                       logprobs=logps[i], finish_reason=finish[i] or "length", model_time_s=share)
            for i in range(n)
        ]

    # ------------------------------------------------------------------ keys and values kept across turns
    def _cached(self, key: str, prompt: list[int]) -> tuple[list[int], list[tuple[Any, Any]]] | None:
        for entry in (self._kv.pop(key, None), self._prefix):
            if entry is None:
                continue
            ids, _ = entry
            if len(ids) < len(prompt) and prompt[: len(ids)] == ids:
                return entry
        return None  # no cached prefix of this context (a new episode under the same key, a rewritten prompt)

    def _update_prefix(self, prompts: list[list[int]]) -> None:
        """Compute the keys and values of the prefix the batch's fresh prompts share, once (it stays until
        prompts with another prefix come)."""
        import torch

        from components.policies.kv_cache import growing_cache

        if self._prefix is not None and all(p[: len(self._prefix[0])] == self._prefix[0] for p in prompts):
            return
        common = prompts[0]
        for p in prompts[1:]:
            k = 0
            while k < min(len(common), len(p)) and common[k] == p[k]:
                k += 1
            common = common[:k]
        common = common[: min(len(p) for p in prompts) - 1]
        if len(common) < 32 or len(prompts) < 2 or self.config.kv_cache_episodes == 0:
            return
        cache = growing_cache(self.model.config, 0)
        with torch.inference_mode():
            self.model(input_ids=torch.tensor([common], device=self.config.device), past_key_values=cache,
                       use_cache=True, logits_to_keep=1)
        self._prefix = (list(common), [(layer.keys[0].clone(), layer.values[0].clone()) for layer in cache.layers])

    def _batch_cache(self, cached: list[tuple[list[int], list[tuple[Any, Any]]] | None], width: int, reserve: int) -> Any:
        import torch

        from components.policies.kv_cache import growing_cache

        cache = growing_cache(self.model.config, reserve)
        if not width:
            return cache
        sample = next(c for c in cached if c)[1]
        for layer, (k0, _) in enumerate(sample):
            heads, dim = k0.shape[0], k0.shape[-1]
            keys = torch.zeros((len(cached), heads, width, dim), dtype=k0.dtype, device=k0.device)
            values = torch.zeros_like(keys)
            for i, c in enumerate(cached):
                if c:
                    k, v = c[1][layer]
                    keys[i, :, width - k.shape[1]:] = k
                    values[i, :, width - v.shape[1]:] = v
            cache.update(keys, values, layer)
        return cache

    def _remember(self, requests: list[GenerationRequest], prompts: list[list[int]], new_ids: list[list[int]],
                  masks: Any, past: Any, batch_rows: list[int]) -> None:
        """Keep each finished row's keys and values (its real positions only) for the episode's next turn."""
        if self.config.kv_cache_episodes == 0 or past.get_seq_length() == 0:
            return
        length = past.get_seq_length()
        for r, prompt, new, mask, b in zip(requests, prompts, new_ids, masks, batch_rows, strict=True):
            covered = prompt + new[:-1]  # the last sampled token was never fed back
            where = mask[:length].nonzero().flatten()[: len(covered)]
            if len(where) != len(covered):
                continue
            self._kv[r.key] = (covered, [(layer.keys[b][:, where].clone(), layer.values[b][:, where].clone())
                                         for layer in past.layers])
        while len(self._kv) > self.config.kv_cache_episodes:  # oldest first: episodes still alive come back soon
            self._kv.pop(next(iter(self._kv)))

    def release(self, key: str) -> None:
        """The episode is over: its keys and values are not needed again."""
        self._kv.pop(key, None)

    def _closes_action(self, tokens: list[int]) -> bool:
        """True once the reply holds an opening and a closing ``` fence: a complete action."""
        return self.tokenizer.decode(tokens, skip_special_tokens=True).count("```") >= 2


def _row_generator(request: GenerationRequest) -> Any:
    import torch

    gen = torch.Generator()
    gen.manual_seed(request.turn_seed)
    return gen


def _pick(logits: Any, temperature: float, top_p: float, gen: Any) -> int:
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
    return int(torch.multinomial(probs.cpu(), 1, generator=gen))
