"""MedGym's coding tasks for stock trainers and clients: TRL's `environment_factory` and an OpenEnv server.

Both adapters play `CodingEnv` through one `EpisodeSession` (session.py), which keeps the task record, the sandbox
and the checker on this side: a client sends actions and reads observations, rewards and refusals, none of which
hold the answer. Nothing here imports Prefect or the profile.
"""
