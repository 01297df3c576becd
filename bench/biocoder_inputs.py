"""On how many distinct inputs each imported BioCoder task checks its function (process sandbox, needs root).

    python -m bench.biocoder_inputs [SRC] [--save out.json]

SRC is a MedAgentGym release folder (default: the shared sample, ../shared/medagentgym-sample); only its
`biocoder/` files are imported. Prints, per imported task, the calls recorded under each seed variant and the
number of distinct inputs (the object and the arguments), then the share of tasks on 2 or more, and the reasons
for the rows refused.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from components.sandbox.factory import open_sandbox
from components.tasks import code_judge
from components.tasks.importers.medagentgym import ImportOptions, import_release
from components.tasks.record import load_tasks

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "medagentgym-sample"


def main(src: Annotated[Path, typer.Argument(help="a MedAgentGym release folder")] = SAMPLE,
         save: Annotated[Path | None, typer.Option(help="write the figures here as JSON")] = None) -> None:
    if not (src / "biocoder").is_dir():
        raise typer.BadParameter(f"{src / 'biocoder'}: no BioCoder task files there")
    work = Path(tempfile.mkdtemp(prefix="medgym-biocoder-"))
    shutil.copytree(src / "biocoder", work / "src" / "biocoder")
    report = import_release(work / "src", work / "out", ImportOptions(open_sandbox=lambda: open_sandbox("process")))
    rows = []
    for task in load_tasks(work / "out" / "tasks.jsonl"):
        runs = task.answer_spec.expected_trace or []
        rows.append({"task_id": task.task_id, "calls": [code_judge.calls_recorded([run]) for run in runs],
                     "distinct_inputs": code_judge.distinct_inputs(runs)})
        print(f"{task.task_id:24} calls per variant {rows[-1]['calls']}  distinct inputs {rows[-1]['distinct_inputs']}")
    several = sum(r["distinct_inputs"] >= 2 for r in rows)
    refused = {k: dict(c.refused) for k, c in report.per_file.items() if k.startswith("biocoder/")}
    print(f"{several}/{len(rows)} imported tasks on 2 or more distinct inputs")
    for key, reasons in refused.items():
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"refused {key}: {n} x {reason}")
    if save:
        save.write_text(json.dumps({"tasks": rows, "several": several, "refused": refused}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    typer.run(main)
