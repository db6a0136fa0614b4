"""proxycomp.gym_bridge.rl.compare: one warm start shared by one RL run per estimator, then a before/after summary."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from proxycomp.cli import main as proxycomp

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "rl" / "trloo_kernel_cpu.yaml"


@pytest.fixture(scope="module")
def compare_rl():
    from proxycomp.gym_bridge.rl import compare

    return compare


@pytest.mark.slow
def test_two_estimators_share_one_warm_start(compare_rl, tiny_ckpt, tmp_path, capsys):
    out = tmp_path / "cmp"
    overrides = ["--tasks", "[relu]", "--tasks_per_step", "1", "--steps", "1", "--rollout.samples_per_task", "2",
                 "--warmstart.steps", "2", "--warmstart.batch_size", "2", "--evaluation.samples_per_task", "1",
                 "--evaluation.turns", "1", "--gym.workers", "1",
                 "--evaluation.code_bytes", "0"]  # the code figure (test_rl_trainer) costs a tiny 4096-symbol model 3 s
    status = compare_rl.main(["--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(out),
                              "--estimators", "trloo,grpo", "--parallel", "--sft_control", "--", *overrides])
    assert status == 0, (out / "trloo.log").read_text()[-2000:] + (out / "sft_only.log").read_text()[-2000:]
    shared = (out / "warmstart" / "model.ckpt").read_bytes()
    for name in ("trloo", "grpo"):
        assert (out / name / "warmstart" / "model.ckpt").read_bytes() == shared
        assert not (out / name / "warmstart" / "state.ckpt").exists()  # only the control goes on from it
        config = json.loads((out / name / "config.json").read_text())
        assert config["algorithm"]["estimator"] == name and config["steps"] == 1
        assert "warm start: reusing" in (out / f"{name}.log").read_text()
        assert "evaluation before RL: reusing the warm start's" in (out / f"{name}.log").read_text()
    assert (out / "warmstart" / "state.ckpt").is_file()  # moved there, not stored twice
    assert not (out / "warmstart_run" / "warmstart" / "state.ckpt").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trloo"]["before"] == summary["grpo"]["before"]  # one measured baseline for both
    # The SFT-only control: the warm start (2 steps) went on for the RL runs' 1 step x 2 updates, then was evaluated.
    assert "warm start: going on from step 2" in (out / "sft_only.log").read_text()
    assert summary["sft_only"]["before"] == summary["trloo"]["before"]
    assert {r["phase"] for r in summary["sft_only"]["after"]} == {"after 2 more SFT steps"}
    assert json.loads((out / "sft_only" / "control.json").read_text())["sft_steps"] == 2
    assert [r["task"] for r in summary["grpo"]["before"]] == ["relu", "all"]
    assert [s["step"] for s in summary["trloo"]["steps"]] == [1]
    table = (out / "summary.md").read_text()
    assert "| trloo | before RL (after SFT) | cpu | train | 1 |" in table
    assert "| grpo | after 1 steps | cpu | train |" in table
    assert "| sft_only | after 2 more SFT steps | cpu | train |" in table
    assert "train (cpu) correct/any: trloo after 1 steps vs sft_only after 2 more SFT steps, 1 tasks:" in table
    assert (out / "rl_curves.png").stat().st_size > 0
    (out / "summary.md").unlink()
    assert compare_rl.main(["--out", str(out), "--summarize_only"]) == 0
    assert (out / "summary.md").read_text() == table

    # A run killed before its after-RL evaluation goes on; a finished one is left alone.
    (out / "trloo" / "eval_after.json").unlink()
    status = compare_rl.main(["--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(out), "--resume",
                              "--sft_control", "--", *overrides])
    assert status == 0, (out / "trloo.log").read_text()[-2000:]
    assert "resumed at step 1" in (out / "trloo.log").read_text()
    printed = capsys.readouterr().out
    assert "grpo: finished earlier" in printed and "sft_only: finished earlier" in printed
    assert (out / "trloo" / "eval_after.json").is_file()
    steps_2 = [*overrides[:4], "--steps", "2", *overrides[6:]]
    assert compare_rl.main(["--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(out), "--resume",
                            "--estimators", "trloo", "--", *steps_2]) == 0  # more steps asked: trains on
    assert compare_rl.steps_done(out / "trloo") == 2 and compare_rl.steps_done(out / "grpo") == 1

    # A time budget too short for one more step: trloo stops at its checkpoint and is evaluated after 2 steps (or
    # keeps the rows it has for them, where no time is left for the evaluation's chunk);
    # grpo, run after it, is given trloo's 2 steps instead of a clock, so both end at an equal budget. Its checkpoint
    # says its steps took an hour (as on a slow machine), so no host is fast enough to fit a third in the second.
    checkpoint = out / "trloo" / "checkpoints" / "last.ckpt"
    torch.save({**torch.load(checkpoint, weights_only=True), "longest_step_s": 3600.0}, checkpoint)
    status = compare_rl.main(["--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(out), "--resume",
                              "--max_time_s", "1", "--sft_control", "--", *overrides[:4], "--steps", "3",
                              *overrides[6:]])
    assert status == 0, (out / "trloo.log").read_text()[-2000:]
    assert "stopped at step 2 of 3: max_time_s=1 leaves no room" in (out / "trloo.log").read_text()
    assert "sft_only: no time left (--max_time_s)" in capsys.readouterr().out  # 2 steps now: --resume makes it
    summary = json.loads((out / "summary.json").read_text())
    for name in ("trloo", "grpo"):
        assert [s["step"] for s in summary[name]["steps"]] == [1, 2]
        assert {r["phase"] for r in summary[name]["after"]} == {"after 2 steps"}
    assert not compare_rl.finished(out / "trloo", 3) and compare_rl.finished(out / "trloo", 2)

    # Another machine, which got the runs' small files and trloo's checkpoint but not the warm start's model or state
    # (docs/rl.md, the chain across sessions): trloo goes on and no warm start is made.
    for name in ("model.ckpt", "state.ckpt"):
        (out / "warmstart" / name).unlink()
    shutil.rmtree(out / "warmstart_run")
    (out / "trloo" / "eval_after.json").unlink()
    steps_2_args = ["--out", str(out), "--resume", "--config", str(RECIPE), "--", *steps_2]
    assert compare_rl.main(["--ckpt", str(tiny_ckpt), "--estimators", "trloo", *steps_2_args]) == 0
    assert "warm start: not needed" in capsys.readouterr().out and not (out / "warmstart_run").exists()
    assert (out / "trloo" / "eval_after.json").is_file()
    # The SFT-only control for 2 RL steps, without the warm start's state: made again from the model the warm start
    # was made from, for all its steps (2 + 2 x 2), and refused from any other.
    other = out / "trloo" / "checkpoints" / "last.ckpt"
    assert compare_rl.main(["--ckpt", str(other), "--sft_control", *steps_2_args]) == 1
    assert "must be the model the warm start was made from" in capsys.readouterr().err
    assert compare_rl.main(["--ckpt", str(tiny_ckpt), "--sft_control", *steps_2_args]) == 0
    assert "made again from --ckpt for all 6 steps" in capsys.readouterr().out
    assert json.loads((out / "sft_only" / "control.json").read_text())["sft_steps"] == 4
    # Killed during its evaluation (longer than a device call): the control goes on with its own model, not made
    # again (on a GPU it would differ, and its kept chunks would be lost), whatever --ckpt is. A damaged control.json
    # counts as not written: the summary leaves the control out, and the next call evaluates it again.
    control = out / "sft_only" / "warmstart"
    made = control.joinpath("model.ckpt").read_bytes()
    (out / "sft_only" / "control.json").write_text('{"rl_steps": 2, "sft_')
    (control / "eval_before.json").unlink()
    assert compare_rl.main(["--out", str(out), "--summarize_only"]) == 0
    assert "control.json is unreadable, so the control is left out" in capsys.readouterr().out
    assert "sft_only" not in json.loads((out / "summary.json").read_text())
    assert compare_rl.main(["--ckpt", str(other), "--sft_control", *steps_2_args]) == 0
    assert "sft_only: going on with the control made for 2 RL steps" in capsys.readouterr().out
    assert control.joinpath("model.ckpt").read_bytes() == made
    log = (out / "sft_only.log").read_text()
    assert "warm start: 6 steps in" in log and log.count("warm start: reusing") == 1  # appended to the first run's
    assert json.loads((out / "sft_only" / "control.json").read_text())["sft_steps"] == 4


def test_unknown_estimator_fails_before_any_run(compare_rl, tiny_ckpt, tmp_path, capsys):
    assert proxycomp(["rl-compare", "--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(tmp_path / "o"),
                      "--estimators", "trloo,ppo"]) == 2
    assert "proxycomp rl-compare: error: --estimators: unknown ['ppo']" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_failed_warm_start_is_reported(compare_rl, tmp_path, capsys):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    status = compare_rl.main(["--config", str(RECIPE), "--ckpt", str(bad), "--out", str(tmp_path / "o")])
    assert status == 1 and "the warm start failed" in capsys.readouterr().err
    log = tmp_path / "o" / "warmstart.log"
    assert "proxycomp rl: error" in log.read_text()
    # --resume (a later call of a chain) appends: what the earlier call's warm start printed is not lost.
    assert compare_rl.main(["--config", str(RECIPE), "--ckpt", str(bad), "--out", str(tmp_path / "o"), "--resume"]) == 1
    assert log.read_text().count("proxycomp rl: error") == 2


def test_a_config_typo_fails_before_any_run(compare_rl, tiny_ckpt, tmp_path, capsys):
    assert proxycomp(["rl-compare", "--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(tmp_path / "o"),
                      "--", "--stepz", "3"]) == 2
    assert "stepz" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_a_measured_warm_start_is_not_made_again(compare_rl, tiny_ckpt, tmp_path, capsys):
    # A machine that got the small files (the warm start's evaluation) but neither its model nor grpo's checkpoint:
    # a warm start made here would not be the one trloo started from, so grpo is refused, and nothing is written.
    out = tmp_path / "cmp"
    (out / "warmstart").mkdir(parents=True)
    (out / "warmstart" / "eval_before.json").write_text('{"rows": [], "seconds": 1.0}')
    status = compare_rl.main(["--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(out), "--resume",
                              "--estimators", "grpo"])
    assert status == 1
    assert "grpo would start from the warm start measured in" in capsys.readouterr().err
    assert sorted(p.name for p in out.rglob("*")) == ["eval_before.json", "warmstart"]


def test_a_bad_time_budget_fails_before_any_run(compare_rl, tmp_path, capsys):
    assert proxycomp(["rl-compare", "--config", str(RECIPE), "--ckpt", "x", "--out", str(tmp_path / "o"),
                      "--max_time_s", "0"]) == 2
    assert "proxycomp rl-compare: error: --max_time_s: must be > 0" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _rows(phase, correct_any, tasks=8, episodes=8, split="heldout", **counts):
    """Per-task rows with correct/any = correct_any[i % len] and the "all" row of their mean."""
    values = [correct_any[i % len(correct_any)] for i in range(tasks)]

    def row(task, value, n):
        metrics = {"episodes": n, "correct/turn0": 0.1, "correct/any": value, "fast@1.2/turn0": 0.0,
                   "fast@1.2/best": 0.05, **(counts if task == "all" else {})}
        return {"phase": phase, "size": "gpu_heldout", "split": split, "task": task, "metrics": metrics}
    return [row(f"{split}/t{i}", v, episodes) for i, v in enumerate(values)] + \
        [row("all", sum(values) / tasks, episodes * tasks)]


def test_summary_gives_intervals_verdicts_and_says_what_is_inside_the_noise(compare_rl):
    before = _rows("before RL (after SFT)", [0.25], **{"verdict/ok": 20, "verdict/incorrect": 108})
    results = {
        "trloo": {"before": before, "after": _rows("after 10 steps", [0.5, 0.75], **{"verdict/ok": 70,
                                                                                      "hack/decoy": 2}),
                  "steps": [{"step": 1, "reward/mean": 0.0, "correct/any": 0.0, "fast@1.2/best": None,
                             "time/rollout_s": 30.0, "advantage/nonzero_share": 0.0, "group_size/min": 7.0,
                             "group_size/max": 8.0}]},
        # grpo: some tasks up, some down, by the same sizes as trloo's gains
        "grpo": {"before": before, "after": _rows("after 10 steps", [0.0, 0.5, 0.25, 0.75], tasks=8, episodes=4),
                 "steps": []},
    }
    table = compare_rl.summary_markdown(results)
    assert ("| trloo | after 10 steps | gpu_heldout | heldout | 64 | 0.100 [0.044, 0.190] | 0.625 [0.503, 0.733] |"
            in table)
    assert "| hack/decoy | verdict/incorrect | verdict/ok |" in table
    assert "| trloo | after 10 steps | gpu_heldout | heldout | 2 | 0 | 70 |" in table
    assert "Fewer than 64 episodes" in table and "heldout (grpo, after 10 steps)" in table
    correct_any = [line for line in table.splitlines() if line.startswith("- heldout (gpu_heldout) correct/any:")]
    assert len(correct_any) == 3  # trloo after vs before, grpo after vs before, trloo vs grpo after
    trloo, grpo, versus = correct_any
    assert "trloo after 10 steps vs trloo before RL (after SFT), 8 tasks: +0.375 [+0.2" in trloo
    assert trloo.endswith("outside the noise")  # every task gained: the paired interval stays above 0
    assert "+0.125" in grpo and grpo.endswith("inside the noise (the interval holds 0)")
    assert "8 tasks: +0.250" in versus
    # A step whose groups all held equal returns moved nothing; a figure logged as null (NaN) reads "-".
    assert "| trloo | 1 | 0.000 | 0.000 | - | 30.0 | 0% | 7-8 |" in table


def test_differences_pair_tasks_and_leave_out_unpaired_ones(compare_rl):
    before = _rows("before", [0.25], tasks=4)
    after = _rows("after", [0.5], tasks=4)[1:]  # t0 was not evaluated after
    lines = compare_rl._differences({"trloo": {"before": before, "after": after, "steps": []}})
    assert lines and all(", 3 tasks: +0.250 [+0.250, +0.250], outside the noise" in line
                         for line in lines if "correct/any" in line)


def test_a_split_evaluated_by_bucket_is_also_compared_whole(compare_rl):
    """The two buckets of a family's held-out split each hold half its tasks; the difference over the whole split,
    where the planned power lies, pools their tasks (each task weighted by its episodes)."""
    before = _rows("before", [0.25], tasks=4, split="heldout:op") + \
        _rows("before", [0.25], tasks=6, split="heldout:composition")
    after = _rows("after", [0.5], tasks=4, split="heldout:op") + \
        _rows("after", [0.25], tasks=6, split="heldout:composition")
    lines = [line for line in compare_rl._differences({"trloo": {"before": before, "after": after, "steps": []}})
             if "correct/any" in line]
    assert [line.split(" (gpu_heldout)")[0] for line in lines] == \
        ["- heldout:op", "- heldout:composition", "- heldout (buckets pooled)"]
    assert ", 4 tasks: +0.250 [+0.250, +0.250]" in lines[0] and ", 6 tasks: +0.000" in lines[1]
    assert ", 10 tasks: +0.100 [" in lines[2]  # (4 x 0.25 + 6 x 0) / 10
    table = compare_rl.summary_markdown({"trloo": {"before": before, "after": after, "steps": []}}).splitlines()
    # the Wilson table's row of the whole split: 80 episodes, correct/any (32 x 0.5 + 48 x 0.25) / 80 = 0.35
    row = "| trloo | after | gpu_heldout | heldout (buckets pooled) | 80 |"
    whole = [line for line in table if line.startswith(row)]
    assert len(whole) == 1 and "| 80 | 0.100 [" in whole[0] and "| 0.350 [" in whole[0]
    assert table.index(whole[0]) == table.index(next(line for line in table if "after | gpu_heldout | heldout:comp"
                                                     in line)) + 1  # right after its buckets

