"""RL on a task set: train on its train split, evaluate per set (its held-out split, the shipped tasks)."""
import json
from pathlib import Path

import pytest

from proxycomp.errors import UserError
from proxycomp.gym_bridge.family.files import read_buckets, write_family
from proxycomp.gym_bridge.rl.cli import RLConfigError, main, parse_config
from proxycomp.gym_bridge.family.generate import generate_family
from proxycomp.gym_bridge.tasks import draw_tasks, list_tasks

RECIPE = Path(__file__).parents[2] / "recipes" / "rl" / "trloo_kernel_cpu.yaml"


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("family")
    write_family(generate_family(8, seed=2, heldout_fraction=0.25), out)
    return out / "tasks"


def test_a_task_set_gives_the_train_split_and_one_evaluation_set_per_split(family_dir):
    config, _ = parse_config(["--ckpt", "x", "--task_set", str(family_dir), "--evaluation.splits", "[heldout]",
                              "--evaluation.shipped", "true", "--evaluation.max_tasks", "1"])
    _, train, sets = config.load_tasks()
    assert len(train) == 6 and all(t.path.parent == family_dir for t in train)
    # the family's held-out split, one set per bucket; max_tasks cuts each of them, not the shipped tasks
    assert list(sets) == ["heldout:op", "heldout:composition", "shipped"]
    assert len(sets["heldout:op"]) == len(sets["heldout:composition"]) == 1
    assert [t.name for t in sets["shipped"]] == [t.name for t in list_tasks()]
    assert not {t.name for t in train} & {t.name for t in sets["heldout:op"] + sets["heldout:composition"]}
    plain, _ = parse_config(["--ckpt", "x", "--tasks", "[relu]"])
    assert {name: [t.name for t in tasks] for name, tasks in plain.load_tasks().evaluated.items()} == \
        {"train": ["relu"]}


def _task(name, category):
    from proxycomp.gym_bridge.tasks import Task
    return Task(name=name, path=Path(f"/t/{name}.py"), category=category, sizes=())


def test_a_budget_cut_draws_across_templates_and_is_seeded():
    tasks = [_task(f"g{i:03d}", "gemm" if i < 12 else ("conv1d" if i < 14 else "row_norm")) for i in range(15)]
    drawn = draw_tasks(tasks, 6, seed=3)
    categories = [t.category for t in drawn]
    assert len(drawn) == 6 and categories.count("conv1d") == 2 and categories.count("row_norm") == 1
    assert drawn == draw_tasks(tasks, 6, seed=3) and drawn != draw_tasks(tasks, 6, seed=4)
    assert [t.name for t in drawn] == sorted(t.name for t in drawn)
    assert draw_tasks(tasks, None, 3) == tasks == draw_tasks(tasks, 99, 3)


def test_a_damaged_family_manifest_is_refused_in_one_line(tmp_path):
    (tmp_path / "tasks").mkdir()
    assert read_buckets(tmp_path / "tasks") == {}  # not a generated family: no buckets
    (tmp_path / "family.json").write_text("{not json")
    with pytest.raises(UserError, match="family.json: not a task family manifest"):
        read_buckets(tmp_path / "tasks")


def test_sft_tasks_keep_rl_off_the_warm_starts_tasks():
    five = ["relu", "silu", "gelu_tanh", "cumsum", "conv1d"]

    def split(*flags):
        config, _ = parse_config(["--ckpt", "x", "--tasks", json.dumps(five), *flags])
        tasks = config.load_tasks()
        return [t.name for t in tasks.sft], [t.name for t in tasks.rl]

    assert split("--warmstart.steps", "4", "--warmstart.sft_tasks", "2") == (five[:2], five[2:])
    assert split("--warmstart.steps", "4") == (five, five)
    assert split("--warmstart.sft_tasks", "2") == (five, five)  # no warm start to keep them apart from
    with pytest.raises(RLConfigError, match="takes all 5 train tasks"):
        split("--warmstart.steps", "4", "--warmstart.sft_tasks", "5")


def test_splits_without_a_task_set_are_refused():
    with pytest.raises(RLConfigError, match="evaluation.splits .*needs task_set"):
        parse_config(["--ckpt", "x", "--evaluation.splits", "[heldout]"])


def test_what_training_cannot_start_from_is_refused_before_anything_runs(family_dir):
    """Before a warm start and the evaluation before RL, which may take minutes, not after them."""
    with pytest.raises(RLConfigError, match="tasks_per_step: must be >= 1"):
        parse_config(["--ckpt", "x", "--tasks_per_step", "0"])
    config, _ = parse_config(["--ckpt", "x", "--task_set", str(family_dir), "--train_split", "heldout"])
    assert config.load_tasks().rl  # a split of its own
    empty, _ = parse_config(["--ckpt", "x", "--tasks", "[]"])
    with pytest.raises(RLConfigError, match="no train tasks in tasks"):
        empty.load_tasks()


@pytest.mark.slow
def test_sft_on_the_family_then_rl_with_rows_per_evaluation_set(family_dir, tiny_ckpt, tmp_path, capsys):
    """Warm start on the family's train split (its broken variants judged for one task, solutions for the rest),
    one RL step, and before/after rows for the held-out split and a shipped task."""
    out = tmp_path / "run"
    status = main(["--config", str(RECIPE), "--ckpt", str(tiny_ckpt), "--out", str(out), "--task_set", str(family_dir),
                   "--tasks_per_step", "1", "--steps", "1", "--rollout.samples_per_task", "2",
                   "--rollout.max_bytes", "3072", "--rollout.prompt_max_bytes", "1000", "--max_context", "4096",
                   "--warmstart.steps", "2", "--warmstart.batch_size", "2", "--warmstart.label_tasks", "1",
                   "--warmstart.fix_share", "0.3", "--warmstart.sft_tasks", "4",
                   "--evaluation.splits", "[heldout]", "--evaluation.tasks", "[relu]",
                   "--evaluation.samples_per_task", "1", "--evaluation.turns", "1",
                   "--evaluation.code_bytes", "0"])  # the code figure is test_rl_trainer's; here it cost 10 s
    assert status == 0
    corpus = [json.loads(line) for line in (out / "warmstart" / "corpus.jsonl").read_text().splitlines()]
    assert {"wrong_op", "launch_error"} <= {v["kind"] for v in corpus} and sum(v["status"] == "" for v in corpus) == 3
    rl_tasks = {json.loads(line)["task"] for line in (out / "rollouts.jsonl").read_text().splitlines()}
    assert rl_tasks and not rl_tasks & {v["task"] for v in corpus}  # RL trains outside the warm start's 4 tasks
    before = json.loads((out / "eval_before.json").read_text())
    sets = {"heldout:op", "heldout:composition", "tasks"}
    assert {(r["split"], r["phase"]) for r in before if r["task"] == "all"} == {
        (name, "before RL (after SFT)") for name in sets}
    assert {r["split"] for r in json.loads((out / "eval_after.json").read_text())} == sets
    table = (out / "eval.md").read_text()
    assert "| before RL (after SFT) | cpu | heldout:op | all | 1 |" in table
    assert "| after 1 steps | cpu | tasks | relu |" in table
