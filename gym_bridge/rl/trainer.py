"""The RL loop: rollout in the gym, turn-level returns and advantages, PRS, mismatch correction, and a
clipped policy-gradient update, alternating; with atomic checkpoints, resume and per-step metrics.

A custom loop on Lightning Fabric (device, precision, checkpoint I/O), single device. One step:

1. ``rollout.samples_per_task`` multi-turn trajectories for each of ``tasks_per_step`` train tasks;
2. reward-to-go (γ) per turn; void turns masked (a zero after a success, every turn of an errored episode);
   advantages by the configured estimator over (task, turn) groups of the turns left;
3. PRS drops correct turns whose Triton coverage is too low (turns with unknown coverage are kept);
4. the trainer re-scores every kept turn (π_old); mismatch correction compares that with the rollout
   log-probs per trajectory and rejects (and/or TIS-reweights) rows;
5. ``updates_per_step`` optimizer steps on the clipped loss (+ optional KL to the initial policy).

Steps 2 and 3 are algorithm.py's (`make_batch`, pure); this module holds the loop, the optimizer side (steps 4 and
5, `PolicyUpdater`), the logs and the checkpoints.

Sampling and PRS draw from generators seeded by (seed, step), so a resumed run repeats the same step.
"""
from __future__ import annotations

import copy
import csv
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from proxycomp.checkpoint import lm_state, model_weights, reading
from proxycomp.files import write_atomic

from ..evaluator import Evaluator
from ..policy import ByteLMPolicy
from ..result import mean_stages
from ..tasks import Task
from .algorithm import AlgorithmConfig, RLBatch, make_batch
from .episode import Trajectory, rollout_metrics
from .mismatch import correct_mismatch
from .policy_loss import chunk_share, policy_loss
from .rollout import RolloutConfig, run_episodes

METRIC_COLUMNS = (
    "step", "reward/mean", "reward/turn0", "reward/final", "correct/turn0", "correct/any", "fast@1.2/turn0",
    "fast@1.2/best", "coverage/mean", "hack_rate", "prs/rejection_rate", "mismatch/rejection_rate", "loss/total",
    "loss/entropy", "loss/approx_kl", "grad_norm", "time/rollout_s", "time/generate_s", "time/gym_wait_s",
    "time/update_s",
)


class PolicyUpdater:
    """The optimizer side: π_old scoring, mismatch correction and clipped updates on an `RLBatch`."""

    def __init__(self, fabric: Fabric, policy: ByteLMPolicy, optimizer: torch.optim.Optimizer,
                 config: AlgorithmConfig, temperature: float, reference: ByteLMPolicy | None = None) -> None:
        if config.loss.kl_coef > 0 and reference is None:
            raise ValueError("algorithm.loss.kl_coef > 0 needs the initial policy as reference")
        self.fabric, self.policy, self.optimizer = fabric, policy, optimizer
        self.config, self.temperature, self.reference = config, temperature, reference
        # The last update's mismatch verdict per trajectory index (rho_bar, rejected): the rollouts log says which
        # episodes a rejection rate counted, so a sampler that corrupts some rows shows where.
        self.mismatch_verdicts: dict[int, dict] = {}

    def _chunks(self, n: int) -> list[slice]:
        size = self.config.micro_batch
        return [slice(i, min(i + size, n)) for i in range(0, n, size)]

    @torch.no_grad()
    def _score_detached(self, batch: RLBatch, width: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """π_old's log-probs of the batch and, with a KL term, the reference's, both `width` wide: chunk by chunk as
        the update scores the batch, so the first update's ratio is 1 where the weights have not moved."""
        kl = self.config.loss.kl_coef > 0
        old, ref = [], []
        for s in self._chunks(len(batch)):
            lp = self.policy.score(batch.prompts[s], batch.tokens[s], self.temperature).logprobs
            old.append(torch.nn.functional.pad(lp, (0, width - lp.shape[1])))
            if kl:
                lp = self.reference.score(batch.prompts[s], batch.tokens[s], self.temperature).logprobs
                ref.append(torch.nn.functional.pad(lp, (0, width - lp.shape[1])))
        return torch.cat(old).cpu(), torch.cat(ref).cpu() if kl else None

    def update(self, batch: RLBatch) -> dict[str, float]:
        self.mismatch_verdicts = {}
        if len(batch) == 0:
            return {"update/skipped": 1.0}
        width = batch.logp_rollout.shape[1]
        lengths = torch.tensor([len(t) for t in batch.tokens])
        token_mask = torch.arange(width)[None, :] < lengths[:, None]
        logp_old, logp_ref = self._score_detached(batch, width)
        mismatch = correct_mismatch(logp_old, batch.logp_rollout, token_mask, traj_ids=batch.traj_ids,
                                    config=self.config.mismatch)
        stats = {k: float(v) for k, v in mismatch.stats.items()}
        self.mismatch_verdicts = {i: {"rho_bar": rho, "rejected": not kept} for i, rho, kept in zip(
            batch.traj_ids.tolist(), mismatch.rho_bar.tolist(), mismatch.keep.tolist())}
        train_mask = mismatch.token_mask
        if not train_mask.any():
            return stats | {"update/skipped": 1.0}
        device = self.fabric.device
        totals: dict[str, float] = {}
        for _ in range(self.config.updates_per_step):
            self.optimizer.zero_grad(set_to_none=True)
            for s in self._chunks(len(batch)):
                weight = chunk_share(train_mask, s, self.config.loss.aggregation)
                if weight == 0.0:
                    continue
                scored = self.policy.score(batch.prompts[s], batch.tokens[s], self.temperature)
                chunk_width = scored.logprobs.shape[1]

                def cut(x: torch.Tensor | None) -> torch.Tensor | None:
                    return None if x is None else x[s, :chunk_width].to(device)

                out = policy_loss(
                    scored.logprobs, cut(logp_old), batch.advantages[s].to(device), cut(train_mask),
                    is_weights=cut(mismatch.weights), logp_ref=cut(logp_ref), entropy=scored.entropy,
                    config=self.config.loss,
                )
                self.fabric.backward(out.loss * weight)
                for key, value in out.stats.items():
                    totals[key] = totals.get(key, 0.0) + float(value) * weight / self.config.updates_per_step
            grad_norm = self.fabric.clip_gradients(self.policy.module, self.optimizer, max_norm=self.config.grad_clip)
            self.optimizer.step()
            totals["grad_norm"] = totals.get("grad_norm", 0.0) + float(grad_norm) / self.config.updates_per_step
        return stats | totals | {"update/skipped": 0.0}


class MetricsLog:
    """One JSON line (all metrics) and one CSV row (METRIC_COLUMNS) per step, appended, plus a stdout line."""

    def __init__(self, out_dir: Path) -> None:
        self.jsonl = out_dir / "metrics.jsonl"
        self.csv = out_dir / "metrics.csv"
        self.rollouts = out_dir / "rollouts.jsonl"

    def truncate(self, step: int) -> None:
        """Drop the rows of steps after `step`: a run killed between writing a step's rows and saving its
        checkpoint repeats that step when resumed, and must not log it twice."""
        for path in (self.jsonl, self.rollouts):
            if path.is_file():
                kept = [line for line in path.read_text().splitlines(keepends=True)
                        if line.strip() and json.loads(line)["step"] <= step]
                write_atomic(path, "".join(kept))
        if self.csv.is_file():
            lines = self.csv.read_text().splitlines(keepends=True)
            kept = [line for line in lines[1:] if int(line.split(",", 1)[0]) <= step]
            if kept:
                write_atomic(self.csv, "".join(lines[:1] + kept))
            else:
                self.csv.unlink()  # the next write starts it again with its header

    def write_turns(self, step: int, trajectories: Sequence[Trajectory], mismatch: dict[int, dict],
                    prs: dict[tuple[int, int], dict], void: frozenset[tuple[int, int]] = frozenset()) -> None:
        """One JSON line per scored turn: the reply, what the gym said of the kernel in it, whether it was left out
        as void, PRS's verdict on the turn and why (band, coverage, threshold; null with PRS off or on a void
        turn), and the update's mismatch verdict on its trajectory (null where none of its turns was kept)."""
        with self.rollouts.open("a") as fh:
            for i, traj in enumerate(trajectories):
                for t, turn in enumerate(traj.turns):
                    fh.write(json.dumps({
                        "step": step, "task": traj.task_id, "episode": i, "turn": t, "reward": turn.reward,
                        "status": turn.status, "correct": turn.correct, "speedup": turn.speedup,
                        "coverage": turn.coverage, "hacks": list(turn.hacks), "feedback": turn.feedback,
                        "stage_s": turn.stage_s, "void": (i, t) in void, "prs": prs.get((i, t)),
                        "mismatch": mismatch.get(i),
                        "reply": turn.reply,
                    }) + "\n")

    def write(self, metrics: dict[str, Any]) -> None:
        # NaN (e.g. coverage on CPU, where nothing is profiled) becomes null: strict JSON readers reject NaN.
        plain = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in metrics.items()}
        with self.jsonl.open("a") as fh:
            fh.write(json.dumps(plain) + "\n")
        new = not self.csv.exists()
        with self.csv.open("a", newline="") as fh:
            writer = csv.writer(fh)
            if new:
                writer.writerow(METRIC_COLUMNS)
            writer.writerow([_fmt(metrics.get(c)) for c in METRIC_COLUMNS])
        def shown(key: str, spec: str) -> str:
            value = metrics.get(key)
            return "-" if not isinstance(value, (int, float)) or math.isnan(value) else format(value, spec)

        print(f"step {metrics['step']}: mean reward {shown('reward/mean', '.3f')}; correct "
              f"{shown('correct/turn0', '.0%')} at turn 0, {shown('correct/any', '.0%')} at any turn; "
              f"fast@1.2 {shown('fast@1.2/best', '.0%')} at the best turn; rejected by PRS "
              f"{shown('prs/rejection_rate', '.0%')}, by mismatch {shown('mismatch/rejection_rate', '.0%')}; "
              f"an advantage on {shown('advantage/nonzero_share', '.0%')} of the counted turns, in groups of "
              f"{shown('group_size/min', '.0f')} to {shown('group_size/max', '.0f')}; "
              f"loss {shown('loss/total', '.4g')}, entropy {shown('loss/entropy', '.4g')}; "
              f"{shown('time/generate_s', '.1f')} s sampling, {shown('time/gym_wait_s', '.1f')} s waiting for the "
              "gym", flush=True)
        verdicts = {k.removeprefix("verdict/"): v for k, v in metrics.items() if k.startswith("verdict/")}
        if verdicts:  # why the rewards are what they are, without opening rollouts.jsonl
            most = sorted(verdicts.items(), key=lambda item: -item[1])
            print("  the gym's verdicts on its turns: " + ", ".join(f"{count:.0f} {status}" for status, count in most),
                  flush=True)


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def step_generator(seed: int, step: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator for one step's draws: a resumed run repeats the step exactly."""
    return torch.Generator(device=device).manual_seed(seed * 1_000_003 + step)


class RLTrainer:
    """Alternates rollout and update for ``steps`` steps; checkpoints to ``out_dir/checkpoints/last.ckpt``."""

    def __init__(
        self,
        *,
        fabric: Fabric,
        policy: ByteLMPolicy,
        evaluator: Evaluator,
        tasks: Sequence[Task],
        rollout: RolloutConfig,
        algorithm: AlgorithmConfig,
        out_dir: Path,
        tasks_per_step: int,
        seed: int,
        save_every: int,
        hyper_parameters: dict,
        spm_model: bytes | None = None,
    ) -> None:
        """`hyper_parameters` (and `spm_model`) of the model the policy was loaded from go into every checkpoint,
        so `generate`, `eval-bpb` and `fit --init_from` read it as they read one of `fit`. The optimizer is AdamW
        on the policy's weights, as `algorithm` says."""
        if not tasks:
            raise ValueError("tasks: no train tasks")
        if tasks_per_step < 1:
            raise ValueError(f"tasks_per_step: must be >= 1, got {tasks_per_step}")
        self.fabric, self.policy, self.evaluator = fabric, policy, evaluator
        self.optimizer = fabric.setup_optimizers(torch.optim.AdamW(
            policy.module.parameters(), lr=algorithm.lr, weight_decay=algorithm.weight_decay))
        self.tasks, self.rollout, self.algorithm = list(tasks), rollout, algorithm
        self.out_dir, self.tasks_per_step, self.seed, self.save_every = Path(out_dir), tasks_per_step, seed, save_every
        self.hyper_parameters, self.spm_model = hyper_parameters, spm_model
        self.reference: ByteLMPolicy | None = None
        if algorithm.loss.kl_coef > 0:
            frozen = copy.deepcopy(policy.module).requires_grad_(False)
            self.reference = ByteLMPolicy(frozen, max_context=policy.max_context)
        self.updater = PolicyUpdater(fabric, policy, self.optimizer, algorithm, rollout.temperature, self.reference)
        self.step = 0
        self.longest_step_s = 0.0  # wall seconds, for fit's deadline (checkpointed: a resumed run knows it)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.log = MetricsLog(self.out_dir)

    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / "checkpoints" / "last.ckpt"

    def _training_state(self) -> dict[str, Any]:
        """What a resume needs besides the weights (Fabric restores the optimizer in place)."""
        return {"optimizer": self.optimizer, "step": self.step, "longest_step_s": self.longest_step_s}

    def save(self) -> None:
        state = {**lm_state(self.hyper_parameters, self.policy.module, self.spm_model), **self._training_state()}
        if self.reference is not None:
            state["reference_state_dict"] = self.reference.module.state_dict()
        self.fabric.save(self.checkpoint_path, state)

    def load(self, path: Path) -> None:
        state = self._training_state()
        with reading(path):
            saved = self.fabric.load(path, state)  # the optimizer in place, plain values into `state`; the rest back
            self.policy.module.load_state_dict(model_weights(saved))
            if self.reference is not None:
                self.reference.module.load_state_dict(saved["reference_state_dict"])
        self.step = int(state["step"])
        self.longest_step_s = float(state["longest_step_s"])
        self.log.truncate(self.step)

    def tasks_for_step(self, step: int) -> list[Task]:
        """A deterministic rotation over the train tasks."""
        n = len(self.tasks)
        return [self.tasks[(step * self.tasks_per_step + k) % n] for k in range(min(self.tasks_per_step, n))]

    def train_step(self) -> dict[str, float]:
        started = time.monotonic()
        device = self.fabric.device
        tasks = self.tasks_for_step(self.step)
        timings: dict[str, float] = {}
        trajectories = run_episodes(self.policy, self.evaluator, tasks, self.rollout,
                                    generator=step_generator(self.seed, self.step, device), timings=timings)
        rolled = time.monotonic()
        batch = make_batch(trajectories, self.algorithm, step_generator(self.seed + 1, self.step))
        with self.policy.gpu_turn():  # scoring, backward and optimizer step: no gym timing beside them
            update_stats = self.updater.update(batch)
        self.step += 1
        # Episodes of an overlap group whose gym submit failed are dropped (run_episodes warns).
        dropped = len(tasks) * self.rollout.samples_per_task - len(trajectories)
        metrics = {"step": self.step, **rollout_metrics(trajectories), "rollout/dropped": dropped,
                   **batch.stats, **update_stats,
                   "time/rollout_s": rolled - started, **{f"time/{k}": v for k, v in timings.items()},
                   **{f"gym_s/{k}": v
                      for k, v in mean_stages(t.stage_s for tr in trajectories for t in tr.turns).items()},
                   "time/update_s": time.monotonic() - rolled}
        self.log.write(metrics)
        self.log.write_turns(self.step, trajectories, self.updater.mismatch_verdicts, batch.prs_verdicts,
                             batch.void_turns)
        return metrics

    def fit(self, steps: int, deadline: float | None = None) -> list[dict[str, float]]:
        """Train up to ``steps``. With a ``deadline`` (time.monotonic), stop before a step that would end past
        it, judged by the longest step this trainer has taken, with a checkpoint: a run cut to a time budget
        resumes cleanly."""
        def go_on() -> bool:
            return self.step < steps and (deadline is None or time.monotonic() + self.longest_step_s <= deadline)

        history, going = [], go_on()
        while going:
            started = time.monotonic()
            history.append(self.train_step())
            self.longest_step_s = max(self.longest_step_s, time.monotonic() - started)
            going = go_on()  # decided once a step, so a step that ends the run is the one checkpointed
            if self.step % self.save_every == 0 or not going:
                self.save()
        return history
