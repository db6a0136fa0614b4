"""RL on a task set: train on its train split, evaluate per set (its held-out split, the shipped tasks)."""
import pytest

from proxycomp.gym_bridge.rl.cli import RLConfigError, parse_config, train_and_evaluation_tasks
from proxycomp.gym_bridge.task_family import generate_family, write_family
from proxycomp.gym_bridge.tasks import list_tasks


@pytest.fixture(scope="module")
def family_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("family")
    write_family(generate_family(8, seed=2, heldout_fraction=0.25), out)
    return out / "tasks"


def test_a_task_set_gives_the_train_split_and_one_evaluation_set_per_split(family_dir):
    config, _ = parse_config(["--ckpt", "x", "--task_set", str(family_dir), "--evaluation.splits", "[heldout]",
                              "--evaluation.shipped", "true", "--evaluation.max_tasks", "1"])
    train, sets = train_and_evaluation_tasks(config)
    assert len(train) == 6 and all(t.path.parent == family_dir for t in train)
    assert list(sets) == ["heldout", "shipped"] and len(sets["heldout"]) == 1  # max_tasks cuts splits only
    assert [t.name for t in sets["shipped"]] == [t.name for t in list_tasks()]
    assert not {t.name for t in train} & {t.name for t in sets["heldout"]}
    plain, _ = parse_config(["--ckpt", "x", "--tasks", "[relu]"])
    assert {name: [t.name for t in tasks] for name, tasks in train_and_evaluation_tasks(plain)[1].items()} == \
        {"train": ["relu"]}


def test_splits_without_a_task_set_are_refused():
    with pytest.raises(RLConfigError, match="evaluation.splits .*needs task_set"):
        parse_config(["--ckpt", "x", "--evaluation.splits", "[heldout]"])
