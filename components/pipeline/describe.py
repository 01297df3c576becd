"""The dry run: what `medgym pipeline run` would do on a profile, stage by stage, without doing any of it.

For a paper-scale profile this is the check before a GPU node is booked: the model, how many tasks and episodes
each rollout plays, the launch command of each training stage (accelerate with its DeepSpeed config and process
count), and which stages a rerun would take from the cache.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from components.common.paths import PROJECT_ROOT
from components.pipeline.paths import init_model, merged_dir
from components.pipeline.plan import Plan, Stage
from components.pipeline.state import PipelineState, decide, stage_key
from components.training.stage import DEEPSPEED_DIR


def describe(plan: Plan, state: PipelineState, root: Path) -> list[dict[str, Any]]:
    cfg = plan.cfg
    tasks = _task_counts(root / cfg.data.out_dir / "tasks.jsonl")
    keys: dict[str, str] = {}
    rows = []
    for stage in plan.stages:
        keys[stage.name] = stage_key(plan, stage, keys, root)
        row: dict[str, Any] = {"stage": stage.name, "kind": stage.kind, "needs": list(stage.needs),
                               "cache": decide(plan, state, stage, keys, root)}
        row.update(_details(plan, stage, tasks))
        rows.append(row)
    return rows


def _details(plan: Plan, stage: Stage, tasks: Counter[str] | None) -> dict[str, Any]:
    cfg = plan.cfg
    if stage.kind == "suite":
        size = cfg.data.suites[cfg.data.suite]
        src = (f"import {cfg.data.import_from}" if cfg.data.source == "medagentgym"
               else f"generate {cfg.data.suite} suite ({size.train_per_category} train + {size.test_per_category} test"
                    + (f" + {size.valid_per_category} valid" if size.valid_per_category else "") + " per category)")
        return {"what": src, "out": str(cfg.data.out_dir)}
    if stage.kind == "rollout":
        c = cfg.collection(stage.name)
        n = None if tasks is None else sum(v for (split, cat), v in tasks.items()  # type: ignore[misc]
                                           if (c.split is None or split == c.split)
                                           and (c.categories is None or cat in c.categories))
        if n is not None and c.limit is not None:
            n = min(n, c.limit)
        return {"what": f"{c.policy.backend} {c.policy.options.get('model', '')}".strip(),
                "split": c.split, "tasks": n if n is not None else "after suite",
                "k": c.plan.k, "episodes": n * c.plan.k if n is not None else None,
                "temperature": f"{c.plan.first_temperature} then {c.plan.temperature}",
                "max_turns": c.env.max_turns, "sandbox": c.sandbox_backend, "workers": c.workers,
                "out": str(cfg.rollout_dir(stage.name))}
    if stage.kind == "train":
        assert stage.method is not None and stage.settings is not None
        tcfg = plan.training_config(stage)
        s, dist = stage.settings, cfg.training.distributed
        try:
            init = init_model(tcfg, stage.method)
        except FileNotFoundError:
            init = str(merged_dir(cfg, s.init)) if s.init in ("sft", "dpo", "verifier") else s.init  # type: ignore[arg-type]
        extra = {"beta": s.beta} if stage.method == "dpo" else {}  # type: ignore[union-attr]
        return {"what": f"{stage.method} from {init}", "episodes_from": list(s.episodes),
                "learning_rate": s.schedule.learning_rate, "epochs": s.schedule.epochs,
                "max_steps": s.schedule.max_steps, "lora": s.lora.enabled, **extra,
                "processes": dist.processes, "deepspeed": dist.deepspeed,
                "launch": launch_command(dist.processes, dist.deepspeed)}
    if stage.kind.startswith("diag_"):
        return _diag_details(plan, stage)
    if stage.kind == "evaluate":
        scorer = " ranked by the verifier" if "verifier" in stage.needs else ""
        valid = f"; {', '.join(plan.valid_rollouts())} on a board of their own" if plan.valid_rollouts() else ""
        return {"what": f"leaderboard of {', '.join(plan.evaluated())} against {plan.baseline()}{scorer}{valid}"}
    if plan.on_valid():
        return {"what": f"register the best on valid of {', '.join(p.stage.name for p in plan.on_valid())} as "
                        f"{cfg.registry.name}"}
    final = plan.final()
    return {"what": f"register {merged_dir(cfg, final[0].method, final[0].name)} as {cfg.registry.name}"  # type: ignore[arg-type,index]
            if final else "nothing to register"}


def launch_command(processes: int, deepspeed: str) -> str:
    if processes == 1 and deepspeed == "none":
        return "in process (one CPU or GPU)"
    config = DEEPSPEED_DIR / "accelerate" / ("multi_cpu.yaml" if deepspeed == "none" else f"{deepspeed}.yaml")
    return (f"{Path(sys.executable).name} -m accelerate.commands.launch --config_file "
            f"{config.relative_to(PROJECT_ROOT)} --num_processes {processes} "
            "-m components.training.worker <job.json>")


def _task_counts(path: Path) -> Counter[tuple[str, str]] | None:
    if not path.is_file():
        return None
    from components.tasks.record import load_tasks

    return Counter((t.split, t.category) for t in load_tasks(path))


def _diag_details(plan: Plan, stage: Stage) -> dict[str, Any]:
    d = plan.cfg.diag
    assert d is not None
    out = {"out": ", ".join(map(str, stage.outputs))} if stage.outputs else {}
    if stage.kind == "diag_cohort":
        return {"what": f"synthetic cohort of {d.cohort.patients} patients (seed {d.cohort.seed})", **out}
    if stage.kind == "diag_world":
        lm = d.world.lm
        return {"what": "world-model card: recorded, statistical" + (f", LM ({d.base_model})" if lm.enabled else ""),
                "lm_train_cases": lm.train_cases if lm.enabled else None, "card_cases": lm.card_cases, **out}
    if stage.kind == "diag_cold_start":
        s = d.cold_start.sft.schedule
        return {"what": f"SFT of {d.base_model} on oracle trajectories", "cases": d.cold_start.train_cases,
                "epochs": s.epochs, "max_steps": s.max_steps, "learning_rate": s.learning_rate, **out}
    if stage.kind == "diag_grpo":
        g = d.grpo.settings
        return {"what": "multi-turn GRPO from the cold start", "steps": g.steps,
                "episodes_per_step": g.episodes_per_step, "max_turns": g.max_turns,
                "learning_rate": g.learning_rate, **out}
    if stage.kind == "diag_evaluate":
        e = d.evaluate
        return {"what": f"{', '.join(e.baselines)}, {'untrained, ' if e.untrained else ''}cold_start, grpo on held-out "
                        "cases", "cases": e.cases or "all", "samples": e.samples, "temperature": e.temperature, **out}
    return {"what": f"register grpo as {d.agent_registry} (on per-case {d.register_on})"
                    + (f", the LM world model as {d.world_registry}" if d.world.lm.enabled else "")}
