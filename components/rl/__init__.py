"""Reinforcement learning for the diagnostic environment (issue 12 §4): a cold start on oracle trajectories, then
GRPO with TRL's GRPOTrainer over the multi-turn DiagEnv, the environment's tokens masked out of the loss.

oracle      the clinician's trajectory per train case (its key exams, then the true diagnosis) as platform
            Episodes with the exact token ids a model would have seen and written
cold_start  SFT on those episodes through components.training.trainers, merged into a plain checkpoint
multiturn   one batch of DiagEnv episodes played turn by turn on exact-token contexts, as GRPO samples: prompt ids,
            completion ids (agent and observation tokens), the agent/environment mask and sampling log-probs
grpo        GRPOSettings and TRL's GRPOTrainer with that rollout as its `rollout_func`; LoRA, merged output, and the
            episodes it played recorded as Episodes
"""
