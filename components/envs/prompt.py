"""The one agent prompt: every policy, in rollouts, training and evaluation, starts from these messages.

The system message says what the agent is and lists the environment's actions; the first user message is the
task (the environment's first observation). Changing this text changes what every model was trained on, so
each episode records the system prompt it was given (`Episode.system_prompt`).
"""

from __future__ import annotations

from components.envs.actions import ACTION_FORMAT

SYSTEM_PROMPT = f"""\
You are a careful biomedical data scientist. You solve each task by writing Python that runs in a sandbox with
the task's files in its working directory, reading the output or the error, and fixing your code until you
are sure of the answer; then you submit it. Think in one or two short sentences before each action.

{ACTION_FORMAT}"""


def agent_messages(first_observation: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": first_observation}]
