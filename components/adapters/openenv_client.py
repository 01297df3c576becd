"""The typed OpenEnv client of the MedGym server (OpenEnv's `EnvClient` over its WebSocket; `.sync()` for plain calls)."""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from components.adapters.openenv_models import MedGymAction, MedGymObservation, MedGymState


class MedGymEnvClient(EnvClient[MedGymAction, MedGymObservation, MedGymState]):
    def _step_payload(self, action: MedGymAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[MedGymObservation]:
        obs = MedGymObservation(**payload.get("observation", {}), done=payload.get("done", False),
                                reward=payload.get("reward"))
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> MedGymState:
        return MedGymState(**payload)
