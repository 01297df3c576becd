"""Reinforcement learning: for the diagnostic environment (issue 12 §4) a cold start on oracle trajectories, then GRPO
with TRL's GRPOTrainer over the multi-turn DiagEnv; the same GRPO over the coding environment (issue 25 §3). The
environment's tokens are masked out of the loss.

oracle      the clinician's trajectory per train case (its key exams, then the true diagnosis) as platform
            Episodes with the exact token ids a model would have seen and written
cold_start  SFT on those episodes through components.training.trainers, merged into a plain checkpoint
multiturn   one batch of episodes of any environment played turn by turn on exact-token contexts, as GRPO samples: prompt ids,
            completion ids (agent and observation tokens), the agent/environment mask and sampling log-probs
coding      the coding environment as GRPO's gym: train tasks in CodingEnv, the sandbox in the loop, the checker's reward
stage       the coding profile's `grpo` stage: tasks, gym, GRPO from its starting checkpoint, one tracked MLflow run
grpo        TRL's GRPOTrainer with a rollout_func that plays any gym's environment through the engine (`run_grpo`;
            DiagGym's `train_grpo`); LoRA, merged output, and the episodes it played recorded as Episodes
"""
