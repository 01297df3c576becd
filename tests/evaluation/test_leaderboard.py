"""The leaderboard over several rollouts: the outcome taxonomy, the ranking and intervals, the figures, the CLI
choice between one rollout and several, and the flow end to end into an MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.envs.actions import InspectData, RunCode, SubmitAnswer
from components.envs.episode import Check, Episode, Outcome, Turn
from components.envs.feedback import ErrorInfo
from components.evaluation.leaderboard import leaderboard
from components.evaluation.plots import write_plots
from components.evaluation.taxonomy import classify, family, taxonomy, taxonomy_by_domain

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TASKS = {f"calc/{i}": "medcalc" for i in range(4)} | {f"ehr/{i}": "ehr" for i in range(4)}

# ------------------------------------------------------------------------------------------------- episodes


def _ok_run(i: int = 0) -> Turn:
    return Turn(index=i, action=RunCode(code="print(1 + 1)"), observation="2")


def _failed_run(i: int, kind: str, message: str = "boom") -> Turn:
    return Turn(index=i, action=RunCode(code=f"raise {kind}()"), observation=f"Execution failed: {kind}",
                error=ErrorInfo(kind=kind, message=message))


def _submit(i: int, answer: object, correct: bool) -> Turn:
    return Turn(index=i, action=SubmitAnswer(answer=answer),
                observation=f"Answer submitted: {'correct' if correct else 'incorrect'}. The episode is over.")


def episode(task: str, sample: int, kind: str) -> Episode:
    """A finished episode whose outcome, check, reward and turns agree, of one of the taxonomy's shapes."""
    fields: dict = {"submitted": False, "check": None, "submitted_answer": None, "outcome": Outcome.NO_ANSWER}
    if kind in ("success", "wrong", "format", "empty"):
        answer = {"success": 2, "wrong": 3, "format": "about two", "empty": ""}[kind]
        correct = kind == "success"
        reason = {"success": "2 within [1.9, 2.1]", "wrong": "3 outside [1.9, 2.1]",
                  "format": "unparsable answer: 'about two' is not a number", "empty": "no answer submitted"}[kind]
        fields = {"submitted": True, "submitted_answer": answer, "check": Check(correct=correct, grader_reason=reason),
                  "outcome": Outcome.CORRECT if correct else Outcome.WRONG_ANSWER,
                  "turns": [_ok_run(0), _submit(1, answer, correct)]}
    elif kind in ("KeyError", "SyntaxError", "TimeoutError"):
        fields["turns"] = [_ok_run(0), _failed_run(1, kind), _failed_run(2, kind, "again")]
        fields["error_kinds"] = {kind: 2}
    elif kind == "recovered":  # an error early, then a clean run: the turn limit, not the error, ended it
        fields["turns"] = [_failed_run(0, "NameError"), _ok_run(1)]
        fields["error_kinds"] = {"NameError": 1}
    elif kind == "no_submission":
        fields["turns"] = [_ok_run(0), Turn(index=1, action=InspectData(path="a.csv"), observation="cols: a, b")]
    elif kind == "parse":
        fields["turns"] = [_ok_run(0), Turn(index=1, raw_text="hmm", parse_error="no action found", observation="?",
                                            error=ErrorInfo(kind="ParseError", message="no action found"))]
    elif kind == "loop":
        fields.update(turns=[_ok_run(0), _ok_run(1), _ok_run(2)], loop_detected=True, outcome=Outcome.STUCK_LOOP,
                      loop_reason="the same code was sent 3 times in a row (turns 1-3)")
    elif kind == "context":
        fields.update(turns=[], outcome=Outcome.CONTEXT_LIMIT, truncation="prompt 2051 + 512 new > 2048")
    elif kind == "unfinished":
        fields.update(turns=[_ok_run(0)], outcome=None)
    else:
        raise ValueError(kind)
    return Episode(episode_id=f"{task}#{sample}", task_id=task, sample_index=sample, domain=TASKS.get(task, "medcalc"),
                   first_observation=f"Solve {task}.", reward=1.0 if fields["outcome"] is Outcome.CORRECT else 0.0,
                   **fields)


def rollout(kinds: dict[str, list[str]]) -> list[Episode]:
    """task -> the kinds of its samples, in sample order."""
    return [episode(task, s, k) for task, ks in kinds.items() for s, k in enumerate(ks)]


def strong() -> list[Episode]:
    return rollout({t: ["success", "success"] if i != 7 else ["success", "wrong"] for i, t in enumerate(TASKS)})


def middling() -> list[Episode]:
    return rollout({t: ["success", "KeyError"] if i % 2 == 0 else ["wrong", "no_submission"]
                    for i, t in enumerate(TASKS)})


def weak() -> list[Episode]:
    bad = ["wrong", "KeyError", "SyntaxError", "no_submission", "format", "parse", "loop", "wrong"]
    return rollout({t: [bad[i], "wrong"] if i != 0 else ["success", "wrong"] for i, t in enumerate(TASKS)})


# ------------------------------------------------------------------------------------------------- taxonomy


def test_each_shape_gets_its_class_from_the_recorded_fields():
    expected = {"success": "success", "wrong": "wrong_answer", "format": "format_error", "empty": "format_error",
                "KeyError": "code_error:KeyError", "SyntaxError": "code_error:SyntaxError",
                "TimeoutError": "code_error:TimeoutError", "recovered": "no_submission",
                "no_submission": "no_submission", "parse": "parse_error", "loop": "stuck_loop",
                "context": "context_limit", "unfinished": "unfinished"}
    for kind, cls in expected.items():
        assert classify(episode("calc/0", 0, kind)) == cls, kind
    assert family("code_error:KeyError") == "code_error" and family("wrong_answer") == "wrong_answer"


def test_a_submission_is_judged_by_its_answer_even_after_a_loop():
    ep = episode("calc/0", 0, "wrong").model_copy(update={"loop_detected": True, "outcome": Outcome.STUCK_LOOP})
    assert classify(ep) == "wrong_answer"


def test_taxonomy_counts_overall_by_family_and_by_domain():
    eps = weak()
    counts = taxonomy(eps)
    assert sum(counts.values()) == len(eps) == 16
    assert counts == {"success": 1, "wrong_answer": 9, "format_error": 1, "code_error:KeyError": 1,
                      "code_error:SyntaxError": 1, "parse_error": 1, "stuck_loop": 1, "no_submission": 1}
    assert list(counts)[:2] == ["success", "wrong_answer"]  # display order, not count order
    assert taxonomy(eps, by_family=True)["code_error"] == 2
    by_domain = taxonomy_by_domain(eps)
    assert sorted(by_domain) == ["ehr", "medcalc"]
    assert by_domain["medcalc"] == {"success": 1, "wrong_answer": 4, "code_error:KeyError": 1,
                                    "code_error:SyntaxError": 1, "no_submission": 1}
    assert sum(by_domain["ehr"].values()) == 8 and by_domain["ehr"]["stuck_loop"] == 1


# ---------------------------------------------------------------------------------------------- leaderboard


@pytest.fixture(scope="module")
def board():
    return leaderboard({"weak": weak(), "strong": strong(), "middling": middling()}, baseline="weak")


def test_rows_are_ranked_by_success_with_intervals_around_each_estimate(board):
    assert board.names() == ["strong", "middling", "weak"]
    assert [r.rank for r in board.rows] == [1, 2, 3]
    assert board.row("strong").success.value == pytest.approx(15 / 16)
    assert board.row("middling").success.value == pytest.approx(0.25)
    assert board.row("weak").success.value == pytest.approx(1 / 16)
    for r in board.rows:
        assert r.success.method == "bootstrap" and r.success.n == 8  # two episodes per task: a task bootstrap
        assert r.success.low <= r.success.value <= r.success.high
        assert set(r.domains) == {"ehr", "medcalc"}
        for est in r.domains.values():
            assert est.low <= est.value <= est.high
        assert set(r.pass_at_k) == {"2"} and r.best_at_k == {}  # two episodes per task: pass@2 only
        assert r.turns_mean == pytest.approx(sum(len(e.turns) for e in {"strong": strong(), "middling": middling(),
                                                                          "weak": weak()}[r.rollout]) / 16)
        assert sum(r.taxonomy.values()) == r.n_episodes == 16
    assert board.row("strong").pass_at_k["2"] == 1.0
    assert board.row("middling").pass_at_k["2"] == pytest.approx(0.5)
    assert board.row("middling").taxonomy == {"success": 4, "wrong_answer": 4, "code_error:KeyError": 4,
                                              "no_submission": 4}


def test_the_difference_is_candidate_minus_baseline_with_its_interval(board):
    assert board.row("weak").versus_baseline is None
    for name in ("strong", "middling"):
        vs = board.row(name).versus_baseline
        d = vs.difference
        assert vs.tasks == 8 and d.n == 8
        assert d.value == pytest.approx(board.row(name).success.value - board.row("weak").success.value)
        assert d.value > 0 and d.low <= d.value <= d.high
        assert set(vs.by_domain) == {"ehr", "medcalc"}
    assert board.row("strong").versus_baseline.difference.low > 0  # a win the interval supports
    flipped = leaderboard({"weak": weak(), "strong": strong()}, baseline="strong")
    assert flipped.row("weak").versus_baseline.difference.value < 0
    with pytest.raises(ValueError, match="not one of the rollouts"):
        leaderboard({"weak": weak()}, baseline="nope")


def test_ties_share_a_rank_and_single_episodes_get_wilson_intervals():
    one = rollout({t: ["success" if i < 4 else "wrong"] for i, t in enumerate(TASKS)})
    tied = leaderboard({"a": one, "b": list(one), "c": rollout({t: ["wrong"] for t in TASKS})})
    assert [r.rank for r in tied.rows] == [1, 1, 3] and tied.names() == ["a", "b", "c"]
    a = tied.row("a")
    assert a.success.method == "wilson" and a.success.value == 0.5 and a.pass_at_k == {}
    assert a.success.low < 0.5 < a.success.high
    assert tied.row("c").success.value == 0.0 and tied.row("c").success.low == 0.0 < tied.row("c").success.high


def test_verifier_scores_add_best_at_k():
    eps = middling()
    good = {e.episode_id: 0.9 if e.outcome is Outcome.CORRECT else 0.1 for e in eps}
    b = leaderboard({"m": eps, "w": weak()}, scores={"m": good})
    assert b.row("m").best_at_k == {"2": pytest.approx(0.5)}  # the verifier picks the correct one when there is one
    assert b.row("w").best_at_k == {}
    assert "best@2" in b.to_markdown()


def test_markdown_and_json_hold_every_rollout(board):
    md = board.to_markdown(title="Test board")
    assert md.startswith("# Test board")
    for section in ("## Ranking", "## Success by domain", "## Outcome classes"):
        assert section in md
    for name in ("strong", "middling", "weak"):
        assert f"| {name}" in md
    ranking = md.split("## Ranking")[1].split("##")[0]
    assert ranking.index("strong") < ranking.index("middling") < ranking.index("weak (baseline)")
    assert "code_error:KeyError" in md and "pass@2" in md and "Δ vs baseline" in md
    assert "| 1 | strong | 0.938 [" in md
    data = json.loads(board.to_json())
    assert [r["rollout"] for r in data["rows"]] == ["strong", "middling", "weak"]
    assert data["baseline"] == "weak" and data["domains"] == ["ehr", "medcalc"]
    assert data["rows"][0]["versus_baseline"]["difference"]["value"] > 0
    metrics = board.metrics()
    assert metrics["strong.success"] == pytest.approx(15 / 16) and metrics["strong.rank"] == 1
    assert metrics["middling.taxonomy.code_error:KeyError"] == 4
    assert "strong.versus_baseline.difference" in metrics and "weak.versus_baseline.difference" not in metrics


def test_plots_are_png_files_written_in_place(board, tmp_path):
    from PIL import Image

    paths = write_plots(board, tmp_path / "plots")
    assert [p.name for p in paths] == ["success.png", "success_by_domain.png", "taxonomy.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG_MAGIC
        with Image.open(p) as im:
            im.verify()
        with Image.open(p) as im:
            assert im.format == "PNG" and im.size[0] > 200 and im.size[1] > 150
    assert sorted(x.name for x in (tmp_path / "plots").iterdir()) == sorted(p.name for p in paths)  # no temp files


# ----------------------------------------------------------------------------------------------------- CLI


def test_eval_takes_one_rollout_to_eval_flow_and_several_to_the_leaderboard(monkeypatch):
    import contextlib

    import typer
    from typer.testing import CliRunner

    import flows.evaluate
    import flows.runtime
    from flows.cli_train import eval_command

    calls: list[tuple[str, dict]] = []
    monkeypatch.setattr(flows.evaluate, "eval_flow", lambda **kw: calls.append(("eval", kw)) or {"ok": 1})
    monkeypatch.setattr(flows.evaluate, "leaderboard_flow", lambda **kw: calls.append(("board", kw)) or {"ok": 2})
    monkeypatch.setattr(flows.runtime, "prefect_api", contextlib.nullcontext)
    app = typer.Typer()
    app.command("eval")(eval_command)
    app.command("other")(lambda: None)  # two commands: typer keeps "eval" as a subcommand
    runner = CliRunner()

    res = runner.invoke(app, ["eval", "--rollout", "sft_test", "--baseline", "base", "--out", "r.json"])
    assert res.exit_code == 0, res.output
    assert calls[-1] == ("eval", {"config": "demo", "rollout": "sft_test", "baseline": "base", "verifier": None,
                                  "verifier_kind": "generative", "out": "r.json"})
    res = runner.invoke(app, ["eval", "--rollout", "a", "--rollout", "b", "--rollout", "a", "--config", "smoke",
                              "--name", "round2"])
    assert res.exit_code == 0, res.output
    assert calls[-1] == ("board", {"config": "smoke", "rollouts": ["a", "b"], "baseline": None, "verifier": None,
                                   "name": "round2", "verifier_kind": "generative", "out": None})
    assert runner.invoke(app, ["eval"]).exit_code != 0  # --rollout is required


# ---------------------------------------------------------------------------------------------------- flow


def _write_rollout(out_dir: Path, episodes: list[Episode]) -> Path:
    from components.rollout.store import EpisodeStore

    with EpisodeStore(out_dir) as store:
        store.commit(episodes)
    return out_dir


@pytest.mark.timeout(600)
def test_leaderboard_flow_writes_the_reports_and_logs_them_in_one_mlflow_run(tmp_path):
    from mlflow.tracking import MlflowClient

    from components.config import PipelineConfig
    from flows.evaluate import leaderboard_flow

    dirs = {name: _write_rollout(tmp_path / "rollouts" / name, make())
            for name, make in (("base", weak), ("sft", middling), ("dpo", strong))}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = PipelineConfig.model_validate({
        "profile": "lb", "tracking": {"mlflow_uri": uri, "artifact_location": str(tmp_path / "artifacts"),
                                      "experiment": "lb"},
        "rollouts": {n: {"out_dir": str(d)} for n, d in dirs.items()}})
    out = tmp_path / "reports"
    # the baseline is not named among the rollouts: it is read and ranked too
    result = leaderboard_flow.fn(cfg, ["sft", "dpo"], baseline="base", name="lb-board", out=str(out))

    assert result["report_dir"] == str(out)
    assert list(result["rows"]) == ["dpo", "sft", "base"]
    dpo = result["rows"]["dpo"]
    assert dpo["success"] == pytest.approx(15 / 16) and dpo["interval"][0] <= dpo["success"] <= dpo["interval"][1]
    assert set(dpo["domains"]) == {"ehr", "medcalc"}
    assert dpo["versus_baseline"]["difference"] > 0 and result["rows"]["base"]["versus_baseline"] is None
    lo, hi = dpo["versus_baseline"]["interval"]
    assert lo <= dpo["versus_baseline"]["difference"] <= hi
    md = (out / "leaderboard.md").read_text()
    assert all(f"| {n}" in md for n in ("dpo", "sft", "base"))
    assert [r["rollout"] for r in json.loads((out / "leaderboard.json").read_text())["rows"]] == ["dpo", "sft", "base"]
    assert [Path(p).name for p in result["plots"]] == ["success.png", "success_by_domain.png", "taxonomy.png"]
    assert all(Path(p).read_bytes()[:8] == PNG_MAGIC for p in result["plots"])

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(result["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "lb-board"
    assert run.data.tags["medgym.stage"] == "evaluate" and run.data.tags["medgym.baseline"] == "base"
    assert run.data.tags["medgym.rollouts"] == "sft,dpo,base"
    assert run.data.metrics["dpo.success"] == pytest.approx(15 / 16)
    assert run.data.metrics["sft.versus_baseline.difference"] > 0
    assert run.data.metrics["sft.taxonomy.code_error_KeyError"] == 4
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"leaderboard.md", "leaderboard.json", "plots"} <= top
    assert {a.path for a in client.list_artifacts(run.info.run_id, "plots")} == {
        "plots/success.png", "plots/success_by_domain.png", "plots/taxonomy.png"}
    local = Path(client.download_artifacts(run.info.run_id, "plots/taxonomy.png", str(tmp_path / "dl")))
    assert local.read_bytes()[:8] == PNG_MAGIC
