import contextlib
import json
import re
import time
from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric

from proxycomp.checkpoint import AtomicCheckpointIO
from proxycomp.gym_bridge import Candidate
from proxycomp.gym_bridge.policy import ByteLMPolicy, Sample
from proxycomp.gym_bridge.rl import MismatchConfig, PolicyLossConfig, Trajectory, Turn, policy_loss
from proxycomp.checkpoint import load_lm, save_lm
from proxycomp.cli import main as proxycomp
from proxycomp.gym_bridge.rl.cli import RLConfigError, parse_config
from proxycomp.gym_bridge.rl.episode import rollout_metrics
from proxycomp.gym_bridge.rl.rollout import RolloutConfig, turn_from_result
from proxycomp.gym_bridge.rl.algorithm import AlgorithmConfig, make_batch
from proxycomp.gym_bridge.rl.trainer import MetricsLog, PolicyUpdater, RLTrainer
from proxycomp.gym_bridge.rl.warmstart import reply_text
from proxycomp.gym_bridge.tasks import load_task
from proxycomp.lit import ProxyLM
from proxycomp.model import ModelConfig

RELU = load_task("relu")
SOLUTION = RELU.solution_path.read_text()
BROKEN = SOLUTION.replace("tl.where(x > 0", "tl.where(x < 0")
PROMPT = "Write ModelNew for relu.\n"
RECIPE_DIR = Path(__file__).parents[2] / "recipes" / "rl"
RECIPES = sorted(RECIPE_DIR.glob("*.yaml"))


def fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1, precision="32-true", plugins=[AtomicCheckpointIO()])


@pytest.fixture(scope="module")
def gym_results(cpu_gym):
    """Real gym verdicts on a correct and a broken relu reply."""
    good, bad = cpu_gym.submit([Candidate("relu", reply_text(SOLUTION)), Candidate("relu", reply_text(BROKEN))])
    assert good.correct and not bad.correct
    return good, bad


def fixed_trajectories(policy: ByteLMPolicy, gym_results) -> list[Trajectory]:
    """Two correct and two broken one-turn trajectories of one task, log-probs as the policy gives them."""
    trajectories = []
    for code, result in [(SOLUTION, gym_results[0]), (BROKEN, gym_results[1])] * 2:
        tokens = policy.encode_reply(reply_text(code))
        with torch.no_grad():
            logprobs = policy.score([PROMPT], [tokens], 1.0).logprobs[0].tolist()
        sample = Sample(reply_text(code), tokens, logprobs, truncated=False)
        trajectories.append(Trajectory("relu", RELU.source, [turn_from_result(PROMPT, sample, result)]))
    return trajectories


@pytest.fixture
def setup(make_tiny_transformer):
    """(fabric, policy, optimizer, algorithm config) around a fresh tiny model."""
    return lambda seed=0, **algorithm: _setup(make_tiny_transformer(seed), **algorithm)


def _setup(model, **algorithm):
    f = fabric()
    module = f.setup_module(model)
    policy = ByteLMPolicy(module)
    config = AlgorithmConfig(lr=1e-3, **algorithm)
    optimizer = f.setup_optimizers(
        torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=config.weight_decay))
    return f, policy, optimizer, config


def test_update_favours_the_correct_reply(gym_results, setup):
    # Repeated updates on one batch are off-policy by design, so mismatch rejection would drop it: off here.
    f, policy, optimizer, config = setup(mismatch=MismatchConfig(rejection="none", veto_threshold=None))
    trajectories = fixed_trajectories(policy, gym_results)
    batch = make_batch(trajectories, config)
    # TRLOO: r minus the mean of the 3 others.
    torch.testing.assert_close(batch.advantages, torch.tensor([2 / 3, -2 / 3, 2 / 3, -2 / 3]))
    logp_start = batch.logp_rollout.clone()
    mask = batch.logp_rollout != 0

    def surrogate() -> float:
        with torch.no_grad():
            scored = policy.score(batch.prompts, batch.tokens, 1.0)
        return float(policy_loss(scored.logprobs, logp_start, batch.advantages, scored.mask).loss)

    updater = PolicyUpdater(f, policy, optimizer, config, temperature=1.0)
    losses = [surrogate()]
    for _ in range(3):
        stats = updater.update(batch)
        losses.append(surrogate())
    assert losses[-1] < losses[0] and all(b <= a + 1e-6 for a, b in zip(losses, losses[1:]))
    with torch.no_grad():
        logp_end = policy.score(batch.prompts, batch.tokens, 1.0).logprobs
    gain = ((logp_end - logp_start) * mask).sum(1)
    # The replies share all but one token, so what must move is the odds of correct over broken.
    assert gain[0] - gain[1] > 0.1
    for key in ("loss/total", "loss/entropy", "mismatch/rejection_rate", "grad_norm"):
        assert key in stats


def test_prs_drops_a_low_coverage_correct_turn_and_logs_it(gym_results, setup):
    _, policy, _, config = setup()
    trajectories = fixed_trajectories(policy, gym_results)
    trajectories[0].turns[0].coverage = 0.05  # a lazy kernel: correct but little Triton time
    batch = make_batch(trajectories, config, torch.Generator().manual_seed(0))
    assert len(batch) == 3 and batch.traj_ids.tolist() == [1, 2, 3]
    assert batch.stats["prs/rejected_turns"] == 1 and batch.stats["prs/rejection_rate"] == 0.25
    assert batch.prs_verdicts[0, 0] == {"kept": False, "keep_prob": 0.0, "band": "below_threshold", "coverage": 0.05,
                                        "threshold": 0.3}  # what rollouts.jsonl records of the turn
    assert batch.prs_verdicts[1, 0]["kept"] and batch.prs_verdicts[1, 0]["band"] in ("not_subject", "unknown_coverage")
    no_prs = make_batch(trajectories, AlgorithmConfig(prs=None))
    assert len(no_prs) == 4 and "prs/rejection_rate" not in no_prs.stats and not no_prs.prs_verdicts


def test_mismatch_rejects_a_trajectory_whose_rollout_logprobs_disagree(gym_results, setup):
    f, policy, optimizer, config = setup()
    trajectories = fixed_trajectories(policy, gym_results)
    trajectories[1].turns[0].logprobs = trajectories[1].turns[0].logprobs - 0.01  # rollout engine disagrees
    batch = make_batch(trajectories, config)
    updater = PolicyUpdater(f, policy, optimizer, config, temperature=1.0)
    stats = updater.update(batch)
    assert stats["mismatch/rejection_rate"] == pytest.approx(0.25)
    assert [i for i, v in updater.mismatch_verdicts.items() if v["rejected"]] == [1]  # which one, for the log
    assert updater.mismatch_verdicts[0]["rho_bar"] == pytest.approx(1.0, abs=1e-4)
    off = AlgorithmConfig(lr=1e-3, mismatch=MismatchConfig(rejection="none", veto_threshold=None))
    assert PolicyUpdater(f, policy, optimizer, off, temperature=1.0).update(batch)["mismatch/rejection_rate"] == 0


def test_micro_batches_accumulate_to_the_full_batch_gradient(gym_results, setup):
    grads = []
    for micro in (4, 1):
        f, policy, optimizer, config = setup(micro_batch=micro, grad_clip=1e9)
        batch = make_batch(fixed_trajectories(policy, gym_results), config)
        PolicyUpdater(f, policy, optimizer, config, temperature=1.0).update(batch)
        grads.append(policy.module.head.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=2e-5, rtol=1e-3)


def test_checkpoint_and_resume_give_the_same_next_update(gym_results, tmp_path, setup):
    f, policy, optimizer, config = setup()
    batch = make_batch(fixed_trajectories(policy, gym_results), config)
    updater = PolicyUpdater(f, policy, optimizer, config, temperature=1.0)
    updater.update(batch)
    f.save(tmp_path / "c.ckpt", {"model": policy.module, "optimizer": optimizer, "step": 1})
    expected = updater.update(batch)

    f2, policy2, optimizer2, _ = setup(seed=1)  # different initial weights, restored from the file
    state = {"model": policy2.module, "optimizer": optimizer2, "step": 0}
    f2.load(tmp_path / "c.ckpt", state)
    assert state["step"] == 1
    resumed = PolicyUpdater(f2, policy2, optimizer2, config, temperature=1.0).update(batch)
    assert resumed == pytest.approx(expected, rel=1e-5, abs=1e-7)
    for a, b in zip(policy.module.parameters(), policy2.module.parameters()):
        torch.testing.assert_close(a, b)


def test_trainer_resume_repeats_the_next_step(cpu_gym, tmp_path, setup, tiny_hparams):
    rollout = RolloutConfig(turns=2, samples_per_task=2, max_bytes=24, prompt_max_bytes=512)

    def trainer(out):
        f, policy, _, config = setup(weight_decay=0.1)
        return RLTrainer(fabric=f, policy=policy, evaluator=cpu_gym, tasks=[RELU],
                         rollout=rollout, algorithm=config, out_dir=out, tasks_per_step=1, seed=3, save_every=1,
                         hyper_parameters=tiny_hparams)

    straight = trainer(tmp_path / "a")
    straight.fit(2)
    interrupted = trainer(tmp_path / "b")
    interrupted.fit(1)
    interrupted.train_step()  # step 2 is logged, then the run is "killed" before its checkpoint
    resumed = trainer(tmp_path / "b")
    resumed.load(interrupted.checkpoint_path)
    assert resumed.step == 1
    resumed.fit(2)
    rows = [[json.loads(line) for line in (tmp_path / d / "metrics.jsonl").read_text().splitlines()] for d in "ab"]
    drop_times = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in (rows[0][1], rows[1][1])]
    assert drop_times[0] == drop_times[1]
    assert (tmp_path / "b" / "metrics.csv").read_text().count("\n") == 3  # header + 2 steps
    assert [r["step"] for r in rows[1]] == [1, 2]  # the killed step's rows were dropped on resume, not doubled
    assert (tmp_path / "a" / "rollouts.jsonl").read_text() == (tmp_path / "b" / "rollouts.jsonl").read_text()
    turns = [json.loads(line) for line in (tmp_path / "a" / "rollouts.jsonl").read_text().splitlines()]
    assert {t["step"] for t in turns} == {1, 2} and all(t["task"] == "relu" and t["feedback"] for t in turns)
    assert all(t["mismatch"] is None or t["mismatch"]["rejected"] in (True, False) for t in turns)
    assert any(t["mismatch"] is not None for t in turns)
    assert all(isinstance(t["reply"], str) and t["status"] and t["feedback"].startswith(f"status: {t['status']}")
               for t in turns)  # the reply itself and the gym's verdict on it
    # The RL checkpoint is self-contained: what generate and eval-bpb load is the policy's weights.
    lm = load_lm(straight.checkpoint_path)
    for key, value in straight.policy.module.state_dict().items():
        assert torch.equal(lm.model.state_dict()[key], value), key


def test_the_policy_computes_in_its_gpu_turn_and_the_gym_never_scores_inside_one(cpu_gym, tmp_path, setup,
                                                                                  tiny_hparams):
    f, policy, _, config = setup()
    events, open_turns = [], [0]

    @contextlib.contextmanager
    def gpu_turn():  # stands in for DeviceLock.share: the gym may time nothing while one is open
        open_turns[0] += 1
        events.append("turn")
        try:
            yield
        finally:
            open_turns[0] -= 1

    class WatchedGym:  # scores the shipped solution in place of each (tiny model's) reply, so workers run
        def submit(self, candidates):
            events.append("submit" if open_turns[0] == 0 else "submit inside a turn")
            return cpu_gym.submit([Candidate(c.task, reply_text(SOLUTION), c.id) for c in candidates])

    policy.gpu_turn = gpu_turn
    rollout = RolloutConfig(turns=2, samples_per_task=2, max_bytes=24, prompt_max_bytes=512)
    trainer = RLTrainer(fabric=f, policy=policy, evaluator=WatchedGym(), tasks=[RELU],
                        rollout=rollout, algorithm=config, out_dir=tmp_path, tasks_per_step=1, seed=3, save_every=1,
                         hyper_parameters=tiny_hparams)
    metrics = trainer.train_step()
    assert "submit inside a turn" not in events
    assert events[0] == "turn" and events[-1] == "turn"  # the first sampling call ... the update
    assert events.count("turn") == events.count("submit") + 1  # one per sampled turn, one for the update
    assert metrics["gym_s/total"] > 0  # the workers' seconds per stage, averaged over the step's turns
    turns = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert all(t["stage_s"]["total"] > 0 for t in turns)


def test_an_rl_checkpoint_carried_in_shards_resumes_where_it_stopped(cpu_gym, tmp_path, setup, tiny_hparams):
    """`proxycomp shards split/join` of an RL checkpoint: exact, the resumed step equals the uninterrupted run's;
    by default (bf16 weights, no moments: what a device call can carry) it resumes at its step, weights rounded."""
    from proxycomp.checkpoint import join_checkpoint, split_checkpoint

    rollout = RolloutConfig(turns=1, samples_per_task=2, max_bytes=24, prompt_max_bytes=512)

    def trainer(out):
        f, policy, _, config = setup(weight_decay=0.1)
        return RLTrainer(fabric=f, policy=policy, evaluator=cpu_gym, tasks=[RELU], rollout=rollout, algorithm=config,
                         out_dir=out, tasks_per_step=1, seed=3, save_every=1, hyper_parameters=tiny_hparams)

    straight = trainer(tmp_path / "a")
    straight.fit(2)
    stopped = trainer(tmp_path / "b")
    stopped.fit(1)
    for exact in (True, False):
        carry = tmp_path / f"carry_{exact}"
        files = split_checkpoint(stopped.checkpoint_path, carry, max_bytes=2**20, exact=exact)
        assert all(f.stat().st_size <= 2**20 for f in files)
        resumed = trainer(tmp_path / f"resumed_{exact}")  # as on another machine: only the carried files
        resumed.load(join_checkpoint(carry, tmp_path / f"joined_{exact}.ckpt"))
        assert resumed.step == 1
        moments = resumed.optimizer.state_dict()["state"]
        if exact:
            assert moments  # Adam's moments came along
            resumed.fit(2)
            for a, b in zip(straight.policy.module.parameters(), resumed.policy.module.parameters()):
                assert torch.equal(a, b)
        else:
            assert not moments  # re-estimated by the first updates
            for a, b in zip(stopped.policy.module.parameters(), resumed.policy.module.parameters()):
                assert torch.equal(a.to(torch.bfloat16).float(), b)


def test_a_deadline_stops_between_steps_with_a_checkpoint_and_resume_finishes(cpu_gym, tmp_path, setup, tiny_hparams):
    rollout = RolloutConfig(turns=1, samples_per_task=2, max_bytes=24, prompt_max_bytes=512)

    def trainer():
        f, policy, _, config = setup()
        return RLTrainer(fabric=f, policy=policy, evaluator=cpu_gym, tasks=[RELU],
                         rollout=rollout, algorithm=config, out_dir=tmp_path, tasks_per_step=1, seed=3, save_every=5,
                         hyper_parameters=tiny_hparams)

    cut = trainer()
    assert cut.fit(3, deadline=time.monotonic() - 1) == []  # no time at all: not one step starts
    assert not cut.checkpoint_path.exists()
    # The first step starts (no step has been timed yet) and takes longer than the millisecond left: the run stops
    # before step 2, saving step 1 although save_every=5 would not have.
    assert len(cut.fit(3, deadline=time.monotonic() + 1e-3)) == 1 and cut.step == 1
    assert cut.checkpoint_path.is_file()
    resumed = trainer()
    resumed.load(cut.checkpoint_path)
    assert resumed.step == 1
    resumed.fit(3, deadline=time.monotonic() + 3600)
    assert resumed.step == 3
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_rollout_metrics_fast_p_needs_timing():
    trajectories = [Trajectory("t", "", [Turn("p", "r", correct=True, reward=1.0, speedup=s, status="ok")])
                    for s in (None, 1.1, 1.5)]
    metrics = rollout_metrics(trajectories)
    assert metrics["fast@1/turn0"] == pytest.approx(2 / 3) and metrics["fast@1.2/turn0"] == pytest.approx(1 / 3)
    assert metrics["reward/mean"] == 1.0 and metrics["correct/final"] == 1.0 and metrics["verdict/ok"] == 3


def test_rollout_metrics_per_episode_turn0_any_best_and_verdicts():
    def turn(status, speedup=None, hacks=()):
        return Turn("p", "r", status=status, correct=status == "ok", speedup=speedup, hacks=hacks)

    trajectories = [
        Trajectory("t", "", [turn("incorrect"), turn("ok", 1.1), turn("ok", 1.5)]),  # fixed, then made fast
        Trajectory("t", "", [turn("ok", 1.3), turn("ok", 1.3), turn("ok", 1.3)]),  # fast from the start
        Trajectory("t", "", [turn("flagged", hacks=("decoy:no triton launch under grad",)), turn("error"),
                             turn("error")]),
    ]
    metrics = rollout_metrics(trajectories)
    assert metrics["episodes"] == 3
    assert (metrics["correct/turn0"], metrics["correct/any"]) == pytest.approx((1 / 3, 2 / 3))
    assert (metrics["fast@1.2/turn0"], metrics["fast@1.2/best"]) == pytest.approx((1 / 3, 2 / 3))
    assert {k: v for k, v in metrics.items() if k.startswith(("verdict/", "hack/"))} == {
        "verdict/incorrect": 1, "verdict/ok": 5, "verdict/flagged": 1, "verdict/error": 2, "hack/decoy": 1}


def test_the_console_says_why_rewards_are_zero(tmp_path, capsys):
    turns = [Turn("p", "no fence", status="no_code")] * 3 + [Turn("p", "r", status="error")]
    metrics = {"step": 1, **rollout_metrics([Trajectory("t", "", [turn]) for turn in turns])}
    assert (metrics["verdict/no_code"], metrics["verdict/error"]) == (3, 1)
    MetricsLog(tmp_path).write(metrics)
    out = capsys.readouterr().out
    assert "turns: 3 no_code, 1 error" in out
    # In words, not metric names: a newcomer reads it without the metrics' glossary.
    assert out.startswith("step 1: mean reward 0.000; correct 0% at turn 0, 0% at any turn;") and "/" not in out


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_shipped_recipes_parse(recipe):
    config, args = parse_config(["--config", str(recipe), "--ckpt", "x.ckpt"])
    assert config.tasks and args.ckpt.name == "x.ckpt" and not args.resume and not args.warmstart_only
    for name in config.tasks:
        assert load_task(name).solution_path is not None


def test_grpo_recipe_differs_only_in_the_estimator():
    paths = {p.name: p for p in RECIPES}
    trloo, *_ = parse_config(["--config", str(paths["trloo_kernel.yaml"]), "--ckpt", "x"])
    grpo, *_ = parse_config(["--config", str(paths["grpo_kernel.yaml"]), "--ckpt", "x"])
    assert (trloo.algorithm.estimator, grpo.algorithm.estimator) == ("trloo", "grpo")
    grpo.algorithm = trloo.algorithm
    assert grpo == trloo
    override, *_ = parse_config(["--config", str(paths["trloo_kernel.yaml"]), "--ckpt", "x",
                                 "--algorithm.estimator", "grpo"])
    assert override.algorithm.estimator == "grpo"


def test_unknown_config_key_is_one_line_naming_it(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  turnz: 3\n")
    with pytest.raises(RLConfigError, match="turnz"):
        parse_config(["--config", str(bad), "--ckpt", "x"])
    assert proxycomp(["rl", "--config", str(bad), "--ckpt", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("proxycomp rl: error:") and "turnz" in err and "\n" not in err


@pytest.mark.parametrize("flag, value, message", [
    ("--gym.size", "huge", "gym.size"),
    ("--evaluation.sizes", "[tiny]", "evaluation.sizes"),
    ("--warmstart.fix_share", "2", "warmstart.fix_share"),
    ("--fabric.matmul_precision", "low", "fabric.matmul_precision"),
    ("--decode", "fast", "decode"),
    ("--max_time_s", "0", "max_time_s"),
])
def test_bad_config_values_name_the_field(flag, value, message):
    with pytest.raises(RLConfigError, match=message):
        parse_config(["--ckpt", "x", flag, value])


def test_kl_to_the_initial_policy_is_logged(gym_results, cpu_gym, tmp_path, setup, tiny_hparams):
    f, policy, _, config = setup(loss=PolicyLossConfig(kl_coef=0.1))
    trainer = RLTrainer(fabric=f, policy=policy, evaluator=cpu_gym, tasks=[RELU],
                        rollout=RolloutConfig(), algorithm=config, out_dir=tmp_path, tasks_per_step=1, seed=0,
                        save_every=1, hyper_parameters=tiny_hparams)
    stats = trainer.updater.update(make_batch(fixed_trajectories(policy, gym_results), config))
    assert stats["loss/kl_ref"] == pytest.approx(0.0, abs=1e-6)  # π == π_ref before this first step
    assert trainer.reference.module is not policy.module
    assert not any(p.requires_grad for p in trainer.reference.module.parameters())


def test_unknown_estimator_is_an_error():
    with pytest.raises(RLConfigError, match="unknown advantage estimator 'ppo'"):
        parse_config(["--ckpt", "x", "--algorithm.estimator", "ppo"])


def test_resume_without_checkpoint_is_an_error(tiny_ckpt, tmp_path, capsys):
    assert proxycomp(["rl", "--ckpt", str(tiny_ckpt), "--out", str(tmp_path / "run"), "--resume"]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def test_warmstart_only_needs_warmstart_steps():
    with pytest.raises(RLConfigError, match="--warmstart_only needs warmstart.steps > 0"):
        parse_config(["--ckpt", "x", "--warmstart_only", "--warmstart.steps", "0"])


def test_a_warm_starts_evaluation_is_reused_only_under_the_same_settings(tmp_path, monkeypatch, capsys):
    from proxycomp.gym_bridge.rl.evaluation import HeldOut

    measured = []

    def measure(held_out, policy, phase):
        measured.append(held_out.config.samples_per_task)
        return [{"phase": phase, "samples": held_out.config.samples_per_task}], 1.0

    def baseline(argv, warm_dir=tmp_path):
        config = parse_config(["--ckpt", "x", *argv])[0]
        held_out = HeldOut({}, None, config.rollout, config.evaluation, config.evaluated_settings(), tmp_path,
                           code=None)
        return held_out.baseline(None, warm_dir)

    monkeypatch.setattr(HeldOut, "measure", measure)
    rows, _ = baseline(["--evaluation.samples_per_task", "3"])
    trloo_rows, _ = baseline(["--evaluation.samples_per_task", "3", "--algorithm.estimator", "grpo", "--steps", "7"])
    assert trloo_rows == rows and measured == [3]  # another estimator and step count: the same baseline
    assert "reusing the warm start's" in capsys.readouterr().out
    other, _ = baseline(["--evaluation.samples_per_task", "5"])
    assert other[0]["samples"] == 5 and measured == [3, 5]  # other evaluation settings: measured again
    (tmp_path / "eval_before.json").write_text('{"settings": {"seed"')  # a damaged file: measured, not trusted
    baseline(["--evaluation.samples_per_task", "3"])
    assert measured == [3, 5, 3] and "unreadable" in capsys.readouterr().out
    baseline(["--evaluation.samples_per_task", "3"], None)  # no warm start: nothing to keep it beside
    assert measured == [3, 5, 3, 3]


def test_warm_start_of_another_base_model_is_an_error(tiny_ckpt, tmp_path, capsys):
    other = ProxyLM(ModelConfig(d_model=48, n_layers=2, n_heads=2, max_seq_len=4096))
    save_lm(tmp_path / "run" / "warmstart" / "model.ckpt", dict(other.hparams), other.model, None)
    assert proxycomp(["rl", "--ckpt", str(tiny_ckpt), "--out", str(tmp_path / "run"), "--tasks", "[relu]"]) == 2
    err = capsys.readouterr().err
    assert "does not fit the model of --ckpt (arch.d_model: 48 -> 32)" in err and "Traceback" not in err


@pytest.mark.slow
def test_end_to_end_smoke(tiny_ckpt, tmp_path, capsys):
    """Warm start on the real corpus of a task, 2 RL steps, evaluation before/after, then resume for a third."""
    out = tmp_path / "run"
    common = ["--config", str(RECIPE_DIR / "trloo_kernel_cpu.yaml"), "--ckpt", str(tiny_ckpt), "--out", str(out),
              "--save_every", "1", "--tasks", "[relu]", "--tasks_per_step", "1", "--rollout.samples_per_task", "2",
              "--rollout.turns", "2",
              "--rollout.prompt_max_bytes", "1600", "--max_context", "4096", "--warmstart.fix_share", "0.3",
              "--evaluation.samples_per_task", "1", "--evaluation.turns", "1", "--evaluation.code_bytes", "3000"]
    assert proxycomp(["rl", *common, "--warmstart.steps", "3", "--warmstart.batch_size", "2", "--steps", "2"]) == 0
    printed = capsys.readouterr().out
    assert "warm start step" in printed and "| before RL (after SFT) | cpu | train | all |" in printed
    assert "| after 2 steps |" in printed and "turns: " in printed
    # What the tuning cost the language model, on code it was not trained on: before and after, printed and kept.
    phases = ["initial (--ckpt)", "before RL (after SFT)", "after 2 steps"]
    assert list(json.loads((out / "code_bpb.json").read_text())) == phases
    for phase in phases:
        assert re.search(rf"bits per byte on proxycomp/ \(its own sources\), \d+ kB, {re.escape(phase)}: \d", printed)
        assert f"| {phase} | " in (out / "eval.md").read_text()
    # Warm-start and RL checkpoints are read as a fit checkpoint is.
    for checkpoint in (out / "warmstart" / "model.ckpt", out / "checkpoints" / "last.ckpt"):
        assert proxycomp(["generate", "--ckpt", str(checkpoint), "--prompt", "def f(", "--max_bytes", "4"]) == 0
        assert capsys.readouterr().out.startswith("def f(")
    assert (out / "checkpoints" / "last.ckpt").is_file() and (out / "warmstart" / "corpus.jsonl").is_file()
    assert [r["task"] for r in json.loads((out / "eval_after.json").read_text())] == ["relu", "all"]
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert first["time/generate_s"] > 0 and first["time/gym_wait_s"] > 0
    # Calls with no time left: no step, and no evaluation after fewer steps than asked (it waits for the last); an
    # evaluation that is due stops before its first chunk. Nothing kept is lost.
    assert proxycomp(["rl", *common, "--steps", "3", "--resume", "--max_time_s", "1e-6"]) == 0
    assert ("stopped at step 2 of 3: max_time_s=1e-06 leaves no room for another step, nor for the evaluation, "
            "which waits for the last step") in capsys.readouterr().out
    assert proxycomp(["rl", *common, "--steps", "2", "--resume", "--max_time_s", "1e-6"]) == 0
    assert "evaluation after 2 steps: stopped before train (cpu) chunk 1" in capsys.readouterr().out
    assert proxycomp(["rl", *common, "--steps", "3", "--resume"]) == 0
    assert "resumed at step 2" in capsys.readouterr().out
    assert list(json.loads((out / "code_bpb.json").read_text())) == [*phases, "after 3 steps"]
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [1, 2, 3]


def test_code_files_that_name_nothing_are_one_line(tiny_ckpt, tmp_path, capsys):
    assert proxycomp(["rl", "--ckpt", str(tiny_ckpt), "--out", str(tmp_path / "run"),
                      "--evaluation.code_files", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err.startswith("proxycomp rl: error: evaluation.code_files: ")
    assert not (tmp_path / "run").exists()


def test_estimator_options_reach_the_estimator_and_unknown_ones_fail_early():
    assert AlgorithmConfig(estimator="grpo", estimator_options={"std_normalize": True}).estimator_options
    with pytest.raises(ValueError, match="algorithm.estimator_options: trloo refuses"):
        AlgorithmConfig(estimator="trloo", estimator_options={"std_normalize": True})


def test_gym_holds_an_eval_config_and_reads_its_older_flat_names(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("gym:\n  size: gpu\n  workers: 2\n  correct_trials: 2\n  timeout_s: 60\n")
    for argv in (["--config", str(old)], ["--gym.size", "gpu", "--gym.correct_trials", "2", "--gym.timeout_s", "60",
                                          "--gym.workers", "2"]):
        gym = parse_config(["--ckpt", "x", *argv])[0].gym
        assert (gym.eval.size, gym.eval.correct_trials, gym.eval.timeout_s, gym.workers) == ("gpu", 2, 60.0, 2)
    assert parse_config(["--ckpt", "x", "--gym.eval.timeout_s", "30"])[0].gym.eval.timeout_s == 30.0
    with pytest.raises(RLConfigError, match="give gym.eval.timeout_s alone"):
        parse_config(["--ckpt", "x", "--config", str(old), "--gym.eval.timeout_s", "30"])
