import shutil

import pytest
import torch

from proxycomp.gym_bridge import Candidate
from proxycomp.gym_bridge.rl._checks import RLConfigError
from proxycomp.gym_bridge.rl.warmstart import (
    BROKEN_KINDS,
    Example,
    WarmStartConfig,
    build_corpus,
    code_variants,
    corpus_examples,
    example_weights,
    load_variants,
    reply_nll,
    reply_text,
    warm_start,
)
from proxycomp.gym_bridge.tasks import load_task

RELU = load_task("relu")


@pytest.fixture(scope="module")
def relu_labelled(cpu_gym, tmp_path_factory):
    """The relu corpus as the gym labels it, and the file it was written to."""
    path = tmp_path_factory.mktemp("relu") / "corpus.jsonl"
    return build_corpus([RELU], cpu_gym, path), path


@pytest.fixture(scope="module")
def relu_corpus(relu_labelled):
    return relu_labelled[0]


@pytest.fixture(scope="module")
def relu_corpus_file(relu_labelled):
    return relu_labelled[1]


def test_variants_of_the_relu_solution():
    kinds = [v.kind for v in code_variants("relu", RELU.solution_path.read_text())]
    assert kinds == ["solution", "block", "block", "num_warps", "num_warps", "dropped_mask", "wrong_offset", "wrong_op"]


def test_corpus_labels_come_from_the_gym(relu_corpus, cpu_gym):
    kinds = [v.kind for v in relu_corpus]
    assert kinds.count("solution") == 1 and kinds.count("block") == 2 and kinds.count("num_warps") == 2
    assert {"wrong_offset", "wrong_op"} <= set(kinds)
    for variant in relu_corpus:
        assert (variant.status == "ok") != variant.broken, (variant.kind, variant.status)
    # Re-evaluated independently, the labels hold.
    results = cpu_gym.submit([Candidate("relu", v.code) for v in relu_corpus])
    assert [r.correct for r in results] == [not v.broken for v in relu_corpus]


def test_fix_examples_carry_the_broken_code_and_its_feedback(relu_corpus):
    examples = corpus_examples(relu_corpus, [RELU])
    fixes = [e for e in examples if e.kind == "fix"]
    broken = [v for v in relu_corpus if v.broken]
    assert len(fixes) == len(broken) > 0
    for example, variant in zip(fixes, broken):
        assert variant.code.strip() in example.prompt and variant.feedback.strip() in example.prompt
        assert example.reply == reply_text(variant.base)
    assert sum(e.kind == "first_turn_broken" for e in examples) == len(broken)


def test_corpus_round_trip_and_bad_file(relu_corpus, relu_corpus_file, tmp_path):
    assert load_variants(relu_corpus_file) == relu_corpus
    path = tmp_path / "corpus.jsonl"
    path.write_text("not json\n")
    with pytest.raises(ValueError, match=r"corpus.jsonl:1: not a corpus record"):
        load_variants(path)


def test_example_weights_give_the_configured_shares():
    examples = [Example("p", "r", kind) for kind in ["first_turn"] * 3 + ["first_turn_broken"] * 2 + ["fix"] * 5]
    weights = example_weights(examples, WarmStartConfig(fix_share=0.4, first_turn_broken_share=0.25))
    kinds = ("first_turn", "first_turn_broken", "fix")
    share = {k: float(sum(w for w, e in zip(weights, examples) if e.kind == k)) for k in kinds}
    assert share == pytest.approx({"first_turn": 0.45, "first_turn_broken": 0.15, "fix": 0.4})


def test_warm_start_lowers_reply_nll(tiny_policy, relu_corpus):
    examples = [e for e in corpus_examples(relu_corpus, [RELU]) if e.kind == "first_turn"][:2]
    optimizer = torch.optim.AdamW(tiny_policy.module.parameters(), lr=3e-3)

    def step(loss):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    with torch.no_grad():
        before = float(reply_nll(tiny_policy, examples))
    losses = warm_start(tiny_policy, examples, WarmStartConfig(steps=8, batch_size=2), step_fn=step,
                        generator=torch.Generator().manual_seed(0))
    assert len(losses) == 8
    with torch.no_grad():
        assert float(reply_nll(tiny_policy, examples)) < before - 0.5


def test_task_without_solution_is_an_error(tmp_path, cpu_gym):
    task_file = tmp_path / "mine.py"
    task_file.write_text(RELU.source)
    with pytest.raises(ValueError, match="'mine' has no solution"):
        build_corpus([load_task(task_file)], cpu_gym, tmp_path / "corpus.jsonl")


def test_broken_kinds_are_named():
    assert set(BROKEN_KINDS) == {"dropped_mask", "wrong_offset", "wrong_op", "missing_op", "launch_error"}


@pytest.mark.parametrize("kwargs", [dict(fix_share=1.5), dict(batch_size=0), dict(lr=0.0)])
def test_bad_warmstart_config(kwargs):
    with pytest.raises(ValueError, match="warmstart"):
        WarmStartConfig(**kwargs)


def _warm_start(out, steps: int, corpus_file, hparams) -> None:
    """A warm start of the relu corpus (batches of 2) into `out`, as `proxycomp rl` runs it (state every 2 steps)."""
    from lightning.fabric import Fabric

    from proxycomp.checkpoint import AtomicCheckpointIO
    from proxycomp.gym_bridge.policy import ByteLMPolicy
    from proxycomp.gym_bridge.rl import cli
    from proxycomp.gym_bridge.rl.warmstart import BaseModel, WarmStarter
    from proxycomp.lit import ProxyLM

    config, _ = cli.parse_config(["--ckpt", "x", "--tasks", "[relu]", "--warmstart.steps", str(steps),
                                  "--warmstart.batch_size", "2", "--warmstart.save_every", "2",
                                  "--rollout.prompt_max_bytes", "1600"])
    if not (out / "warmstart" / "corpus.jsonl").is_file():  # labelled once, by the fixture
        (out / "warmstart").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus_file, out / "warmstart" / "corpus.jsonl")
    fabric = Fabric(accelerator="cpu", devices=1, precision="32-true", plugins=[AtomicCheckpointIO()])
    torch.manual_seed(0)
    lm = ProxyLM(**hparams)
    policy = ByteLMPolicy(fabric.setup_module(lm.model))
    WarmStarter(fabric=fabric, policy=policy, base=BaseModel(lm, hparams, None), config=config.warmstart,
                rollout=config.rollout, out_dir=out, seed=config.seed).start([RELU], None)


def _same_model(a, b) -> bool:
    from proxycomp.checkpoint import load_lm

    first, second = (load_lm(d / "warmstart" / "model.ckpt").state_dict() for d in (a, b))
    return all(torch.equal(first[k], second[k]) for k in first)


@pytest.fixture(scope="module")
def straight_warm_start(relu_corpus_file, tiny_hparams, tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    _warm_start(out, 4, relu_corpus_file, tiny_hparams)
    return out


def test_a_killed_warm_start_goes_on_from_its_state(relu_corpus_file, straight_warm_start, tmp_path, monkeypatch,
                                                    tiny_hparams, capsys):
    """Killed after step 3 of 4 (state at step 2), run again: the result equals an uninterrupted run."""
    from proxycomp.gym_bridge.rl import warmstart

    steps = []

    def killed_after_three(policy, batch):
        steps.append(len(steps))
        if len(steps) == 4:
            raise KeyboardInterrupt
        return reply_nll(policy, batch)

    monkeypatch.setattr(warmstart, "reply_nll", killed_after_three)
    with pytest.raises(KeyboardInterrupt):
        _warm_start(tmp_path, 4, relu_corpus_file, tiny_hparams)
    assert (tmp_path / "warmstart" / warmstart.STATE_FILE).is_file()
    monkeypatch.undo()
    _warm_start(tmp_path, 4, relu_corpus_file, tiny_hparams)
    assert "warm start: going on from step 2" in capsys.readouterr().out
    assert _same_model(straight_warm_start, tmp_path)


def test_a_finished_warm_start_goes_on_to_more_steps_as_one_run(relu_corpus_file, straight_warm_start, tmp_path,
                                                                tiny_hparams, capsys):
    """The SFT-only control of rl-compare: a 2-step warm start, its model.ckpt taken away, asked for 4 steps, equals
    the 4-step warm start bit for bit (weights, optimizer and batch sampling go on); fewer steps than its state is
    refused."""
    from proxycomp.errors import UserError
    from proxycomp.gym_bridge.rl.warmstart import STATE_FILE

    _warm_start(tmp_path, 2, relu_corpus_file, tiny_hparams)
    assert (tmp_path / "warmstart" / STATE_FILE).is_file()  # kept after the last step
    (tmp_path / "warmstart" / "model.ckpt").unlink()
    _warm_start(tmp_path, 4, relu_corpus_file, tiny_hparams)
    assert "warm start: going on from step 2" in capsys.readouterr().out
    assert _same_model(straight_warm_start, tmp_path)
    (tmp_path / "warmstart" / "model.ckpt").unlink()
    with pytest.raises(UserError, match="after 4 steps, past warmstart.steps=3"):
        _warm_start(tmp_path, 3, relu_corpus_file, tiny_hparams)


def test_a_generated_family_gives_its_own_broken_variants_and_unjudged_solutions(tmp_path, cpu_gym):
    from proxycomp.gym_bridge.family.files import write_family
    from proxycomp.gym_bridge.family.generate import generate_family
    from proxycomp.gym_bridge.tasks import load_task_set

    family = generate_family(6, seed=1, heldout_fraction=0.2)
    train = load_task_set(write_family(family, tmp_path)["tasks"]).split("train")
    first = next(t for t in family.tasks if t.stem == train[0].name)
    corpus = build_corpus(train, cpu_gym, tmp_path / "corpus.jsonl", label_tasks=1)
    labelled = [v for v in corpus if v.task == first.stem]
    assert {v.kind for v in labelled} == {"solution", *first.broken}  # every broken variant fails in the gym
    assert all(v.status for v in labelled) and all(v.broken != (v.status == "ok") for v in labelled)
    rest = [v for v in corpus if v.task != first.stem]
    assert [(v.task, v.kind, v.status) for v in rest] == [(t.name, "solution", "") for t in train[1:]]
    kinds = [e.kind for e in corpus_examples(corpus, train)]
    assert kinds.count("fix") == len(first.broken) and kinds.count("first_turn") == len(train)


def test_a_warm_start_refuses_sft_tasks_below_one():  # the split itself: tests/rl/test_rl_task_set.py
    with pytest.raises(RLConfigError, match="sft_tasks: must be >= 1"):
        WarmStartConfig(sft_tasks=0)

