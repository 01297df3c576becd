"""The leaderboard over several rollouts: the outcome taxonomy, the greedy headline (mean over datasets, pooled
beside it) and its intervals, sampled results apart, the ranking, the figures, the CLI choice between one rollout
and several, and the flow end to end into an MLflow run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.envs.actions import InspectData, RunCode, SubmitAnswer
from components.envs.episode import Check, Episode, Outcome, PolicyInfo, Sampling, Turn
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


def played(episodes: list[Episode], temperatures: tuple[float, ...] = (0.0, 0.6), dataset: str | None = None) -> list[Episode]:
    """The episodes as a collection records them: sample i at temperatures[i] (the last one for later samples);
    the default is SamplingPlan's, sample 0 greedy and the rest at 0.6."""
    out = []
    for e in episodes:
        sampling = Sampling(temperature=temperatures[min(e.sample_index, len(temperatures) - 1)], seed=e.sample_index)
        out.append(e.model_copy(update={"policy": PolicyInfo(backend="scripted", model="test", sampling=sampling),
                                        "dataset": dataset or e.dataset}))
    return out


def rollout(kinds: dict[str, list[str]], temperatures: tuple[float, ...] = (0.0, 0.6)) -> list[Episode]:
    """task -> the kinds of its samples, in sample order."""
    return played([episode(task, s, k) for task, ks in kinds.items() for s, k in enumerate(ks)], temperatures)


def strong() -> list[Episode]:  # greedy 8/8, sampled 7/8
    return rollout({t: ["success", "success"] if i != 7 else ["success", "wrong"] for i, t in enumerate(TASKS)})


def middling() -> list[Episode]:  # greedy 4/8, sampled 0/8
    return rollout({t: ["success", "KeyError"] if i % 2 == 0 else ["wrong", "no_submission"]
                    for i, t in enumerate(TASKS)})


def weak() -> list[Episode]:  # greedy 1/8, sampled 0/8
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


def test_rows_are_ranked_by_greedy_success_with_intervals_around_each_estimate(board):
    assert board.names() == ["strong", "middling", "weak"]
    assert [r.rank for r in board.rows] == [1, 2, 3]
    assert board.row("strong").success.value == 1.0
    assert board.row("middling").success.value == pytest.approx(0.5)
    assert board.row("weak").success.value == pytest.approx(1 / 8)
    for r in board.rows:
        assert r.success.method == "wilson" and r.success.n == 8  # one greedy episode per task
        assert r.success == r.pooled and r.datasets == {"unknown": r.pooled}  # one dataset: the two means are one
        assert r.success.low <= r.success.value <= r.success.high
        assert set(r.domains) == {"ehr", "medcalc"}
        for est in r.domains.values():
            assert est.low <= est.value <= est.high
        # one sampled episode per task beside the greedy one: a sampled pass@1, and no pass@2 to mix them into
        assert r.sampled.temperatures == [0.6] and r.sampled.n_episodes == 8
        assert r.sampled.pass_at_k == {} and r.sampled.best_at_k == {}
        assert r.turns_mean == pytest.approx(sum(len(e.turns) for e in {"strong": strong(), "middling": middling(),
                                                                          "weak": weak()}[r.rollout]) / 16)
        assert sum(r.taxonomy.values()) == r.n_episodes == 16
    assert board.row("strong").sampled.success.value == pytest.approx(7 / 8)
    assert board.row("middling").sampled.success.value == 0.0
    assert board.row("middling").taxonomy == {"success": 4, "wrong_answer": 4, "code_error:KeyError": 4,
                                              "no_submission": 4}


def test_the_headline_is_the_mean_over_datasets_with_the_pooled_mean_beside_it():
    """Two datasets of unequal size: the small one counts as much as the large one, as in the paper's tables."""
    small = played(rollout({f"s/{i}": ["success"] for i in range(2)}), dataset="mimic_iii")
    large = played(rollout({f"l/{i}": ["success" if i == 0 else "wrong"] for i in range(6)}), dataset="medcalcbench")
    row = leaderboard({"a": small + large}).row("a")
    assert row.success.value == pytest.approx((1.0 + 1 / 6) / 2)
    assert row.pooled.value == pytest.approx(3 / 8)
    assert row.success.method == "stratified bootstrap" and row.success.n == 8
    assert row.success.low <= row.success.value <= row.success.high
    assert row.pooled.method == "wilson" and row.pooled.low <= row.pooled.value <= row.pooled.high
    assert row.datasets["mimic_iii"].value == 1.0 and row.datasets["medcalcbench"].value == pytest.approx(1 / 6)
    # the small dataset is solved in every resample; the large one's resampled share has quantiles 0 and 1/2
    assert row.success.low >= 0.5 and row.success.high <= 0.75
    md = leaderboard({"a": small + large}).to_markdown()
    assert "| 1 | a | 0.583 [" in md and "| 0.375 [" in md and "## Greedy pass@1 by dataset" in md
    metrics = leaderboard({"a": small + large}).metrics()
    assert metrics["a.success"] == pytest.approx(7 / 12) and metrics["a.pooled"] == pytest.approx(3 / 8)
    assert metrics["a.dataset.mimic_iii.success"] == 1.0


def test_sampled_episodes_are_reported_apart_from_the_greedy_headline():
    """A collection of 4: sample 0 greedy, 1-3 at temperature 0.6. pass@1 reads sample 0 alone; pass@k the other 3."""
    kinds = {t: ["success", "wrong", "wrong", "success"] if i < 4 else ["wrong", "success", "wrong", "wrong"]
             for i, t in enumerate(TASKS)}
    row = leaderboard({"k4": rollout(kinds)}).row("k4")
    assert row.success.value == 0.5 and row.success.method == "wilson"  # greedy: tasks 0-3
    assert row.sampled.temperatures == [0.6] and row.sampled.n_episodes == 24
    assert row.sampled.success.value == pytest.approx(1 / 3) and row.sampled.success.method == "bootstrap"
    assert row.sampled.pass_at_k == {"2": pytest.approx(2 / 3)}  # 3 sampled per task: pass@4 is not reached
    md = leaderboard({"k4": rollout(kinds)}).to_markdown()
    sampled = md.split("## Sampled (temperature > 0)")[1].split("##")[0]
    assert "| k4 | 0.6 | 8 | 24 | 0.333 [" in sampled and "pass@2" in sampled
    assert "pass@2" not in md.split("## Sampled")[0]


def test_greedy_and_sampled_rollouts_are_never_ranked_or_differenced_against_each_other():
    greedy = rollout({t: ["success" if i < 2 else "wrong"] for i, t in enumerate(TASKS)}, temperatures=(0.0,))
    hot = rollout({t: ["success"] for t in TASKS}, temperatures=(1.0,))  # better, but sampled
    board = leaderboard({"hot": hot, "greedy": greedy}, baseline="greedy")
    assert board.names() == ["greedy", "hot"] and [r.rank for r in board.rows] == [1, None]
    row = board.row("hot")
    assert row.success is None and row.pooled is None and row.sampled.success.value == 1.0
    assert row.versus_baseline is None
    assert row.versus_baseline_note == ("not compared with the baseline: the baseline has greedy episodes and this "
                                        "rollout none, and greedy and sampled results are not compared")
    md = board.to_markdown()
    assert "| – | hot | – (no greedy episodes) | – | – |" in md and f"- hot: {row.versus_baseline_note}" in md
    assert "hot.rank" not in board.metrics() and board.metrics()["hot.sampled.pass_at_1"] == 1.0
    # the other way round, and two sampled rollouts, which are compared with each other
    flipped = leaderboard({"hot": hot, "greedy": greedy}, baseline="hot").row("greedy")
    assert flipped.versus_baseline is None and "this rollout has greedy episodes and the baseline none" in flipped.versus_baseline_note
    cold = rollout({t: ["success" if i < 4 else "wrong"] for i, t in enumerate(TASKS)}, temperatures=(0.3,))
    both = leaderboard({"hot": hot, "cold": cold}, baseline="cold").row("hot").versus_baseline
    assert both.decoding == "sampled" and both.difference.value == pytest.approx(0.5)
    assert "(sampled)" in leaderboard({"hot": hot, "cold": cold}, baseline="cold").to_markdown()


def test_the_difference_pairs_greedy_episodes_only(board):
    assert board.row("weak").versus_baseline is None and board.row("weak").versus_baseline_note is None
    for name in ("strong", "middling"):
        vs = board.row(name).versus_baseline
        d = vs.difference
        assert vs.decoding == "greedy" and vs.tasks == 8 and d.n == 8
        assert d.value == pytest.approx(board.row(name).success.value - board.row("weak").success.value)
        assert d.value > 0 and d.low <= d.value <= d.high
        assert set(vs.by_domain) == {"ehr", "medcalc"}
    assert board.row("strong").versus_baseline.difference.value == pytest.approx(7 / 8)
    assert board.row("strong").versus_baseline.difference.low > 0  # a win the interval supports
    flipped = leaderboard({"weak": weak(), "strong": strong()}, baseline="strong")
    assert flipped.row("weak").versus_baseline.difference.value < 0
    with pytest.raises(ValueError, match="not one of the rollouts"):
        leaderboard({"weak": weak()}, baseline="nope")


def test_an_episode_without_its_sampling_is_refused_by_name():
    bare = [episode(t, 0, "success") for t in TASKS]
    with pytest.raises(ValueError, match="rollout 'bare': episode 'calc/0#0' records no policy, so its temperature is "
                                         "unknown"):
        leaderboard({"ok": weak(), "bare": bare})


def test_ties_share_a_rank_and_single_episodes_get_wilson_intervals():
    one = rollout({t: ["success" if i < 4 else "wrong"] for i, t in enumerate(TASKS)})
    tied = leaderboard({"a": one, "b": list(one), "c": rollout({t: ["wrong"] for t in TASKS})})
    assert [r.rank for r in tied.rows] == [1, 1, 3] and tied.names() == ["a", "b", "c"]
    a = tied.row("a")
    assert a.success.method == "wilson" and a.success.value == 0.5 and a.sampled is None
    assert a.success.low < 0.5 < a.success.high
    assert tied.row("c").success.value == 0.0 and tied.row("c").success.low == 0.0 < tied.row("c").success.high


def test_verifier_scores_add_best_at_k_over_the_sampled_episodes():
    eps = rollout({t: ["wrong", "success", "KeyError"] if i % 2 == 0 else ["success", "wrong", "no_submission"]
                   for i, t in enumerate(TASKS)})
    good = {e.episode_id: 0.9 if e.outcome is Outcome.CORRECT else 0.1 for e in eps}
    b = leaderboard({"m": eps, "w": weak()}, scores={"m": good})
    assert b.row("m").sampled.best_at_k == {"2": pytest.approx(0.5)}  # it picks the correct one when there is one
    assert b.row("m").sampled.pass_at_k == {"2": pytest.approx(0.5)}
    assert b.row("w").sampled.best_at_k == {}
    assert "best@2" in b.to_markdown().split("## Sampled")[1]


def test_markdown_and_json_hold_every_rollout(board):
    md = board.to_markdown(title="Test board")
    assert md.startswith("# Test board")
    for section in ("## Ranking (greedy pass@1)", "## Greedy pass@1 by dataset", "## Greedy pass@1 by domain",
                    "## Sampled (temperature > 0)", "## Outcome classes"):
        assert section in md
    for name in ("strong", "middling", "weak"):
        assert f"| {name}" in md
    ranking = md.split("## Ranking")[1].split("##")[0]
    assert ranking.index("strong") < ranking.index("middling") < ranking.index("weak (baseline)")
    assert "code_error:KeyError" in md and "Δ vs baseline" in md and "mean over datasets" in md
    assert "| 1 | strong | 1.000 [" in md
    data = json.loads(board.to_json())
    assert [r["rollout"] for r in data["rows"]] == ["strong", "middling", "weak"]
    assert data["baseline"] == "weak" and data["domains"] == ["ehr", "medcalc"] and data["datasets"] == ["unknown"]
    assert data["rows"][0]["versus_baseline"]["difference"]["value"] > 0
    assert data["rows"][0]["versus_baseline"]["decoding"] == "greedy"
    metrics = board.metrics()
    assert metrics["strong.success"] == 1.0 and metrics["strong.rank"] == 1
    assert metrics["strong.sampled.pass_at_1"] == pytest.approx(7 / 8)
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


def test_series_are_the_figures_rows_as_dvc_plot_data(board, tmp_path):
    import json

    from components.evaluation.plots import write_series

    paths = write_series(board, tmp_path / "plots")
    assert [p.name for p in paths] == ["success.json", "success_by_domain.json"]
    success = json.loads(paths[0].read_text())
    ranked = sorted((r for r in board.rows if r.success is not None), key=lambda r: r.rank)
    assert [row["rollout"] for row in success] == [r.rollout for r in ranked]
    assert all(row["low"] <= row["success"] <= row["high"] for row in success)
    domains = json.loads(paths[1].read_text())
    assert {(row["rollout"], row["domain"]) for row in domains} == {
        (r.rollout, d) for r in ranked for d, e in r.domains.items() if e is not None}


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

    from components.profile.config import PipelineConfig
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
    assert dpo["success"] == 1.0 and dpo["interval"][0] <= dpo["success"] <= dpo["interval"][1]
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
    assert run.data.metrics["dpo.success"] == 1.0 and run.data.metrics["dpo.pooled"] == 1.0
    assert run.data.metrics["dpo.sampled.pass_at_1"] == pytest.approx(7 / 8)
    assert run.data.metrics["sft.versus_baseline.difference"] > 0
    assert run.data.metrics["sft.taxonomy.code_error_KeyError"] == 4
    top = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"leaderboard.md", "leaderboard.json", "plots"} <= top
    assert {a.path for a in client.list_artifacts(run.info.run_id, "plots")} == {
        "plots/success.png", "plots/success_by_domain.png", "plots/taxonomy.png"}
    local = Path(client.download_artifacts(run.info.run_id, "plots/taxonomy.png", str(tmp_path / "dl")))
    assert local.read_bytes()[:8] == PNG_MAGIC


def test_a_model_is_paired_with_the_model_it_started_from_as_well_as_with_the_baseline():
    """GRPO's rollout against the SFT model's it started from: what the stage added, beside both against base."""
    base, sft, grpo = weak(), middling(), strong()
    board = leaderboard({"base": base, "sft": sft, "grpo": grpo}, baseline="base", parents={"grpo": "sft"})
    row = board.row("grpo")
    vp = row.versus_parent
    assert row.parent == "sft" and vp.decoding == "greedy" and vp.tasks == 8
    assert vp.difference.value == pytest.approx(0.5)  # greedy 4/8 -> 8/8 on the same tasks
    assert vp.difference.value == pytest.approx(row.success.value - board.row("sft").success.value)
    assert vp.difference.low <= 0.5 <= vp.difference.high
    assert row.versus_baseline.difference.value == pytest.approx(7 / 8)  # still against the baseline too
    assert board.row("sft").parent is None and board.row("sft").versus_parent is None
    metrics = board.metrics()
    assert metrics["grpo.versus_parent.difference"] == pytest.approx(0.5) and "sft.versus_parent.difference" not in metrics
    section = board.to_markdown().split("## Against the model each started from")[1].split("\n## ")[0]
    assert "| grpo | sft | +0.500 [" in section and "| 8 | 0.500 | 1.000 |" in section
    # a parent whose episodes cannot be paired on one decoding is named, with the reason
    hot = rollout({t: ["success"] for t in TASKS}, temperatures=(1.0,))
    note = leaderboard({"sft": sft, "hot": hot}, parents={"hot": "sft"}).row("hot").versus_parent_note
    assert note.startswith("not compared with `sft`: `sft` has greedy episodes and this rollout none")
    with pytest.raises(ValueError, match="parents: 'grpo' -> 'dpo' names a rollout the leaderboard does not hold"):
        leaderboard({"sft": sft, "grpo": grpo}, parents={"grpo": "dpo"})
