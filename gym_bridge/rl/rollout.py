"""Multi-turn kernel episodes: sample replies, score every turn in the gym, carry feedback forward.

Turn 0 prompts each trajectory with the task's reference (:func:`episode.first_prompt`); turn t > 0 with
the previous code and the gym's feedback on it (:func:`episode.next_prompt`). All candidates of a group's
turn go to the gym in ONE ``Evaluator.submit`` call, so the pool evaluates them in parallel.

Every trajectory plays all ``turns`` turns, as KernelGYM's rollout does (its episodes end at the turn limit,
never on success). With returns summed at γ = 1, stopping early would credit a fast correct first turn with
less return than a slow one that goes on; played to the end, a trajectory that keeps a correct kernel earns
its reward every turn. A turn whose extracted code repeats the trajectory's previous turn is not sent to the
gym again: it takes the previous verdict (deliberate, to spend no gym time on a re-run; KernelGYM would
re-measure it and differ only by timing noise).

Overlap (``overlap_groups`` > 1): the trajectories are split into that many contiguous groups, and while
one group's turn is being scored the policy generates another group's turn. Scoring runs in ONE background
thread, so submits never run concurrently (``RayPool.run`` is not safe to call from two threads). Each
group samples from its own generator, seeded from the step's generator before any sampling, and its turns
are generated in turn order whatever the timing, so the overlapped and the sequential schedule give the
same samples, rewards and trajectory order. With one group the step's generator is used directly, as before.
"""
from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from proxycomp.vocab import RAW_PROMPT_OPENING

from ..config import Candidate
from ..evaluator import Evaluator
from ..extract import extract_code
from ..policy import Policy, Sample
from ..result import EvalResult
from ..tasks import Task
from ._checks import RLConfigError
from .episode import DEFAULT_INSTRUCTIONS, Trajectory, Turn, first_prompt, next_prompt


@dataclass
class RolloutConfig:
    """How the training episodes are sampled.

    Args:
        turns: turns per trajectory, all played (the reference recipe's MAX_TURN)
        samples_per_task: trajectories per task: the group the advantage baseline is taken over
        max_bytes: most reply bytes per turn
        prompt_max_bytes: most context symbols a prompt takes (its UTF-8 bytes and the two that open a raw-byte
            prompt): longer prompts are cut in the middle of long sections; null: not cut
        temperature: sampling temperature
        top_p: nucleus sampling mass
        instructions: what the prompt asks for, after the reference code
        overlap_groups: above 1, generate one group's turn while the gym scores another's (at most one group per
            trajectory)
    """

    turns: int = 3
    samples_per_task: int = 8
    max_bytes: int = 2048
    prompt_max_bytes: int | None = 2048  # with max_bytes, a 4096-symbol context
    temperature: float = 1.0
    top_p: float = 1.0
    instructions: str = DEFAULT_INSTRUCTIONS
    overlap_groups: int = 1

    def __post_init__(self) -> None:
        if self.turns < 1 or self.samples_per_task < 1 or self.max_bytes < 1 or self.overlap_groups < 1:
            raise RLConfigError("rollout.turns, rollout.samples_per_task, rollout.max_bytes and "
                                "rollout.overlap_groups: must be >= 1")
        if self.temperature <= 0 or not 0 < self.top_p <= 1:
            raise RLConfigError(f"rollout: need temperature > 0 and 0 < top_p <= 1, got {self.temperature}, "
                                f"{self.top_p}")
        if self.prompt_max_bytes is not None and self.prompt_max_bytes <= RAW_PROMPT_OPENING:
            raise RLConfigError(f"rollout.prompt_max_bytes: must be > {RAW_PROMPT_OPENING}, "
                                f"got {self.prompt_max_bytes}")

    @property
    def prompt_text_bytes(self) -> int | None:
        """The bytes of text a prompt is cut to, so that it takes at most prompt_max_bytes symbols."""
        return None if self.prompt_max_bytes is None else self.prompt_max_bytes - RAW_PROMPT_OPENING

    def check_context(self, context: int) -> None:
        """Refuse prompts and replies that together can outgrow the policy's context, before anything runs."""
        if self.prompt_max_bytes is not None and self.prompt_max_bytes + self.max_bytes > context:
            raise RLConfigError(f"rollout.prompt_max_bytes + rollout.max_bytes = {self.prompt_max_bytes} + "
                                f"{self.max_bytes} is past the context of {context} symbols; lower one of them")


def turn_from_result(prompt: str, sample: Sample, result: EvalResult) -> Turn:
    return Turn(
        prompt=prompt,
        reply=sample.text,
        code=extract_code(sample.text),
        reward=result.reward,
        correct=result.correct,
        coverage=result.coverage,
        hacks=tuple(result.hacks),
        status=result.status,
        feedback=result.feedback(),
        logprobs=torch.tensor(sample.logprobs, dtype=torch.float32),
        tokens=list(sample.tokens),
        speedup=result.speedup,
        stage_s=dict(result.stage_s),
    )


@dataclass
class _Group:
    """Trajectories rolled out together: one generate and one submit per turn."""

    members: list[int]  # trajectory indices, contiguous
    generator: torch.Generator | None
    turn: int = 0
    failed: bool = False


def _split(count: int, parts: int) -> list[list[int]]:
    """``range(count)`` as ``parts`` contiguous chunks whose sizes differ by at most one."""
    size, extra = divmod(count, parts)
    bounds = [k * size + min(k, extra) for k in range(parts + 1)]
    return [list(range(bounds[k], bounds[k + 1])) for k in range(parts)]


def _group_generators(generator: torch.Generator | None, count: int, policy: Policy) -> list[torch.Generator | None]:
    """One group: the step's generator itself. Several: one each, seeded by draws from it (or from torch's
    global RNG when there is none), all made before any sampling so they do not depend on the schedule."""
    if count == 1:
        return [generator]
    device = generator.device if generator is not None else next(policy.module.parameters()).device
    seeds = torch.randint(2**62, (count,), generator=generator, device=device).tolist()
    return [torch.Generator(device=device).manual_seed(seed) for seed in seeds]


def _score(scorer: ThreadPoolExecutor | None, evaluator: Evaluator, candidates: list[Candidate]) -> Future:
    """A Future of the candidates' results: scored in the background thread (overlap) or here, before returning."""
    if scorer is not None and candidates:
        return scorer.submit(evaluator.submit, candidates)
    future: Future = Future()
    try:
        future.set_result(evaluator.submit(candidates) if candidates else [])  # every reply repeated its code
    except Exception as exc:  # noqa: BLE001 - handled where the result is read, as in the overlapped schedule
        future.set_exception(exc)
    return future


def run_episodes(
    policy: Policy,
    evaluator: Evaluator,
    tasks: Sequence[Task],
    config: RolloutConfig,
    *,
    generator: torch.Generator | None = None,
    overlap: bool = True,
    timings: dict[str, float] | None = None,
) -> list[Trajectory]:
    """``config.samples_per_task`` trajectories per task, task-major (all of task 0's first).

    ``overlap=False`` scores each group in this thread before generating the next one: the reference
    schedule, with the same results. A group whose submit raises is dropped whole (with a warning) and the
    others go on; the failure of the last group standing is raised. ``timings``, when given, gets
    ``generate_s`` (policy sampling) and ``gym_wait_s`` (time spent waiting for scores) added to it.
    """
    timings = {} if timings is None else timings
    timings.setdefault("generate_s", 0.0)
    timings.setdefault("gym_wait_s", 0.0)
    if not tasks:
        raise ValueError("run_episodes: no tasks given")
    trajectories = [Trajectory(task.name, task.source) for task in tasks for _ in range(config.samples_per_task)]
    paths = {task.name: str(task.path) for task in tasks}  # a path also resolves a user's task file
    count = min(config.overlap_groups, len(trajectories))
    groups = [_Group(members, gen) for members, gen in
              zip(_split(len(trajectories), count), _group_generators(generator, count, policy))]

    verdicts: dict[int, EvalResult] = {}  # each trajectory's last verdict, for a turn that repeats its code

    def generate(group: _Group) -> tuple[list[str], list[Sample], list[bool], list[Candidate]]:
        started = time.monotonic()
        prompts = []
        for i in group.members:
            traj = trajectories[i]
            if group.turn == 0:
                prompts.append(first_prompt(traj.task_source, config.instructions, max_bytes=config.prompt_text_bytes))
            else:
                prompts.append(next_prompt(traj, traj.turns[-1].feedback, config.instructions,
                                           max_bytes=config.prompt_text_bytes))
        samples = [replies[0] for replies in policy.generate(
            prompts, 1, config.max_bytes, config.temperature, config.top_p, generator=group.generator)]
        last_code = [trajectories[i].turns[-1].code if group.turn else None for i in group.members]
        repeats = [code is not None and extract_code(s.text) == code for code, s in zip(last_code, samples)]
        candidates = [Candidate(paths[trajectories[i].task_id], s.text, f"{i}.{group.turn}")
                      for i, s, repeat in zip(group.members, samples, repeats) if not repeat]
        timings["generate_s"] += time.monotonic() - started
        return prompts, samples, repeats, candidates

    scorer = ThreadPoolExecutor(1, thread_name_prefix="rollout-scoring") if overlap and count > 1 else None
    ready = deque(groups)  # groups whose next turn can be generated
    scoring: deque = deque()  # (group, prompts, samples, repeats, future), in submission order = completion order
    try:
        while ready or scoring:
            if ready:
                group = ready.popleft()
                prompts, samples, repeats, candidates = generate(group)
                started = time.monotonic()
                future = _score(scorer, evaluator, candidates)
                timings["gym_wait_s"] += time.monotonic() - started
                scoring.append((group, prompts, samples, repeats, future))
            # Take in finished scores; wait for the oldest only when there is nothing left to generate.
            while scoring and (not ready or scoring[0][-1].done()):
                group, prompts, samples, repeats, future = scoring.popleft()
                started = time.monotonic()
                try:
                    results = future.result()
                except Exception as exc:  # noqa: BLE001 - one group's gym failure must not sink the others
                    group.failed = True
                    if all(g.failed for g in groups):
                        raise  # nothing left to keep
                    warnings.warn(f"rollout: scoring trajectories {group.members[0]}-{group.members[-1]} failed at "
                                  f"turn {group.turn}, dropping them: {exc!r}", RuntimeWarning, stacklevel=2)
                    continue
                finally:
                    timings["gym_wait_s"] += time.monotonic() - started
                fresh = iter(results)
                for i, prompt, sample, repeat in zip(group.members, prompts, samples, repeats):
                    verdicts[i] = verdicts[i] if repeat else next(fresh)
                    trajectories[i].turns.append(turn_from_result(prompt, sample, verdicts[i]))
                group.turn += 1
                if group.turn < config.turns:
                    ready.append(group)
    finally:
        if scorer is not None:
            # Also on a policy error: queued submits are cancelled, the running one finishes before we return.
            scorer.shutdown(wait=True, cancel_futures=True)
    return [trajectories[i] for group in groups if not group.failed for i in group.members]
