"""The text side of multi-turn kernel episodes: prompts, turn records, their stacking into tensors, and their
summary metrics.

A turn's prompt carries the task's reference code and, after the first turn, only the *last* attempt and
its gym feedback (not the whole history), so an episode fits a small model's context. ``max_bytes`` bounds
the UTF-8 size of a prompt; long sections are cut in the middle (keeping a head and a tail: definitions at
the top, shapes and the final error line at the bottom) with the code of the last attempt favoured.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from ._checks import require_2d, require_bool, require_same_shape

FAST_THRESHOLDS = (1.0, 1.2)  # the speedups p of the fast@p metrics
# Verdicts where the environment failed, not the candidate: the gym's own fault after its retries. Timeouts,
# crashes and resource limits stay the candidate's (a slow or greedy kernel), so they are not here.
ERRORED_STATUSES = frozenset({"infra_error"})
DEFAULT_INSTRUCTIONS = (
    "Write an optimized replacement for `Model` that does its computation in custom Triton kernels "
    "(`@triton.jit`). Name the class `ModelNew`, keep the same `__init__` and `forward` signatures, and "
    "reply with the complete code in a single ```python block."
)

_FIRST = "Here is a PyTorch reference model:\n```python\n{reference}\n```\n\n{instructions}\n"
_NEXT = (
    "Here is a PyTorch reference model:\n```python\n{reference}\n```\n\n"
    "Your previous attempt:\n```python\n{code}\n```\n\n"
    "Evaluation feedback on that attempt:\n{feedback}\n\n"
    "Fix what the feedback reports or make it faster. {instructions}\n"
)
_NO_CODE = "# (no ```python block could be extracted from your previous reply)"
# Relative claim of each section on a tight budget: the model edits the last code, so it gets the most.
_SECTION_WEIGHTS = {"code": 2.0, "reference": 1.0, "feedback": 1.0}


@runtime_checkable
class SupportsFeedback(Protocol):
    def feedback(self) -> str: ...


@dataclass
class Turn:
    prompt: str
    reply: str
    code: str | None = None  # the code extracted from the reply; None when extraction failed
    reward: float = 0.0
    status: str = ""  # the gym's verdict (EvalResult.status): no_code, error, incorrect, ok, ...
    correct: bool = False
    coverage: float | None = None  # Triton share of CUDA time; None when not profiled (CPU)
    hacks: tuple[str, ...] = ()  # names of the reward-hacking checks the candidate tripped
    feedback: str = ""
    logprobs: torch.Tensor | None = None  # rollout log-probs of the reply tokens, (n_reply_tokens,)
    tokens: list[int] | None = None  # the policy's symbols of the reply, for re-scoring by the trainer
    speedup: float | None = None  # reference time / candidate time; None when not timed (CPU) or failed
    stage_s: dict = field(default_factory=dict)  # the gym worker's seconds per stage (EvalResult.stage_s)

    @property
    def hacked(self) -> bool:
        return bool(self.hacks)


@dataclass
class Trajectory:
    task_id: str
    task_source: str
    turns: list[Turn] = field(default_factory=list)


@dataclass(frozen=True)
class TurnBatch:
    """Per-turn fields of a batch of trajectories as (n_traj, max_turns) tensors, padded past each end."""

    rewards: torch.Tensor  # float64, 0 on padding
    turn_mask: torch.Tensor  # bool, True on turns that exist
    correct: torch.Tensor  # bool
    hacked: torch.Tensor  # bool
    coverage: torch.Tensor  # float64, NaN where unknown or padding
    group_ids: torch.Tensor  # (n_traj,) int64, one id per distinct task_id in order of first appearance
    errored: torch.Tensor  # (n_traj,) bool, True where a turn's status is in ERRORED_STATUSES


def feedback_text(feedback: str | SupportsFeedback) -> str:
    """The feedback as text: a plain string, or the result of ``.feedback()`` (e.g. the gym's EvalResult)."""
    if isinstance(feedback, str):
        return feedback
    if isinstance(feedback, SupportsFeedback):
        text = feedback.feedback()
        if not isinstance(text, str):
            raise TypeError(f"feedback: {type(feedback).__name__}.feedback() returned {type(text).__name__}, not str")
        return text
    raise TypeError(f"feedback: expected a str or an object with .feedback() -> str, got {type(feedback).__name__}")


def truncate_middle(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, keeping its head and tail around a marker.

    The cut snaps to line boundaries when that loses at most half of each kept part, so code and
    tracebacks stay readable.
    """
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    keep = max_bytes - len(f"\n[... {len(data)} bytes cut ...]\n".encode())
    if keep <= 0:
        return ""
    head_size, tail_size = keep // 2, keep - keep // 2
    head, tail = data[:head_size], data[len(data) - tail_size :]
    head_break, tail_break = head.rfind(b"\n"), tail.find(b"\n")
    if head_break >= head_size // 2:
        head = head[: head_break + 1]
    if 0 <= tail_break < tail_size // 2:
        tail = tail[tail_break + 1 :]
    marker = f"[... {len(data) - len(head) - len(tail)} bytes cut ...]\n"
    if not head.endswith(b"\n"):
        marker = "\n" + marker
    # errors="ignore" drops a character split by the cut, so the result can only get shorter.
    return head.decode(errors="ignore") + marker + tail.decode(errors="ignore")


def _allot(sizes: dict[str, int], weights: dict[str, float], budget: int) -> dict[str, int]:
    """Weighted water-filling: sections that fit their share stay whole, the rest split what is left."""
    allotted: dict[str, int] = {}
    open_sections = dict(sizes)
    while open_sections:
        total_weight = sum(weights[name] for name in open_sections)
        shares = {name: budget * weights[name] / total_weight for name in open_sections}
        fitting = [name for name, size in open_sections.items() if size <= shares[name]]
        if not fitting:
            allotted.update({name: int(shares[name]) for name in open_sections})
            break
        for name in fitting:
            allotted[name] = open_sections.pop(name)
            budget -= allotted[name]
    return allotted


def _render(template: str, sections: dict[str, str], instructions: str, max_bytes: int | None) -> str:
    if max_bytes is not None:
        framing = len(template.format(instructions=instructions, **{name: "" for name in sections}).encode())
        if framing > max_bytes:
            raise ValueError(f"max_bytes: {max_bytes} is below the prompt's fixed text and instructions "
                             f"({framing} bytes); raise it or shorten the instructions")
        sizes = {name: len(text.encode()) for name, text in sections.items()}
        limits = _allot(sizes, {name: _SECTION_WEIGHTS[name] for name in sections}, max_bytes - framing)
        sections = {name: truncate_middle(text, limits[name]) for name, text in sections.items()}
    return template.format(instructions=instructions, **sections)


def first_prompt(task_source: str, instructions: str = DEFAULT_INSTRUCTIONS, *, max_bytes: int | None = None) -> str:
    """Prompt of turn 0: the reference code and the instructions to write ``ModelNew``."""
    return _render(_FIRST, {"reference": task_source.strip()}, instructions, max_bytes)


def next_prompt(
    history: Trajectory,
    feedback: str | SupportsFeedback,
    instructions: str = DEFAULT_INSTRUCTIONS,
    *,
    max_bytes: int | None = None,
) -> str:
    """Prompt of the next turn: the reference, the last turn's code and the gym's feedback on it."""
    if not history.turns:
        raise ValueError(f"history: trajectory {history.task_id!r} has no turns yet; use first_prompt")
    code = history.turns[-1].code
    sections = {
        "reference": history.task_source.strip(),
        "code": code.strip() if code else _NO_CODE,
        "feedback": feedback_text(feedback).strip(),
    }
    return _render(_NEXT, sections, instructions, max_bytes)


def stack_turns(trajectories: Sequence[Trajectory]) -> TurnBatch:
    """Stack the per-turn fields of ``trajectories`` for returns, advantages and PRS."""
    if not trajectories:
        raise ValueError("trajectories: empty batch")
    empty = [t.task_id for t in trajectories if not t.turns]
    if empty:
        raise ValueError(f"trajectories: {len(empty)} without turns (first: task {empty[0]!r}); drop them")
    shape = (len(trajectories), max(len(t.turns) for t in trajectories))
    rewards = torch.zeros(shape, dtype=torch.float64)
    turn_mask = torch.zeros(shape, dtype=torch.bool)
    correct = torch.zeros(shape, dtype=torch.bool)
    hacked = torch.zeros(shape, dtype=torch.bool)
    coverage = torch.full(shape, float("nan"), dtype=torch.float64)
    for i, trajectory in enumerate(trajectories):
        for t, turn in enumerate(trajectory.turns):
            rewards[i, t] = turn.reward
            turn_mask[i, t] = True
            correct[i, t] = turn.correct
            hacked[i, t] = turn.hacked
            if turn.coverage is not None:
                coverage[i, t] = turn.coverage
    first_seen: dict[str, int] = {}
    group_ids = torch.tensor([first_seen.setdefault(t.task_id, len(first_seen)) for t in trajectories])
    errored = torch.tensor([any(turn.status in ERRORED_STATUSES for turn in t.turns) for t in trajectories])
    return TurnBatch(rewards, turn_mask, correct, hacked, coverage, group_ids, errored)


def void_turn_mask(rewards: torch.Tensor, turn_mask: torch.Tensor, errored: torch.Tensor) -> torch.Tensor:
    """``turn_mask`` less the void turns, as KernelGYM's mask_void_turn: a turn rewarded <= 0 after an earlier
    turn of its trajectory was rewarded > 0 (the episode had a kernel and lost it), and every turn of an errored
    trajectory (the gym failed, so its rewards say nothing of the policy). A zero before any success is kept:
    it is the ordinary failure the baseline must see. Returns a bool (n_traj, T) tensor, rows possibly with gaps.
    """
    require_2d("rewards", rewards)
    require_same_shape("turn_mask", turn_mask, "rewards", rewards)
    require_bool("turn_mask", turn_mask)
    if errored.shape != (rewards.shape[0],) or errored.dtype != torch.bool:
        raise ValueError(f"errored: expected a bool tensor of shape ({rewards.shape[0]},), got "
                         f"{errored.dtype} {tuple(errored.shape)}")
    scored = (turn_mask & (rewards > 0)).long()
    scored_before = (scored.cumsum(dim=1) - scored) > 0
    void = (rewards <= 0) & scored_before
    return turn_mask & ~void & ~errored[:, None]


def rollout_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per episode: reward, correct at turn 0 / at any turn / at the last turn, fast@p at turn 0 and at its best
    turn (correct, unflagged and speedup > p; an untimed turn is never fast). Per turn: coverage, hack rate, and
    the gym's verdict counts (``verdict/<status>``: why a reward is 0, e.g. no_code for a reply without a code block;
    ``hack/<kind>`` by the part of a hack's name before ':')."""
    turns = [t for traj in trajectories for t in traj.turns]
    covered = [t.coverage for t in turns if t.coverage is not None]

    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values) if values else math.nan

    def fast(turn: Turn, p: float) -> bool:
        return turn.correct and not turn.hacked and turn.speedup is not None and turn.speedup > p

    metrics = {
        "episodes": float(len(trajectories)),
        "reward/mean": mean([t.reward for t in turns]),
        "reward/turn0": mean([traj.turns[0].reward for traj in trajectories]),
        "reward/final": mean([traj.turns[-1].reward for traj in trajectories]),
        "correct/turn0": mean([float(traj.turns[0].correct) for traj in trajectories]),
        "correct/any": mean([float(any(t.correct for t in traj.turns)) for traj in trajectories]),
        "correct/final": mean([float(traj.turns[-1].correct) for traj in trajectories]),
        "coverage/mean": mean(covered),
        "hack_rate": mean([float(t.hacked) for t in turns]),
    }
    for p in FAST_THRESHOLDS:
        metrics[f"fast@{p:g}/turn0"] = mean([float(fast(traj.turns[0], p)) for traj in trajectories])
        metrics[f"fast@{p:g}/best"] = mean([float(any(fast(t, p) for t in traj.turns)) for traj in trajectories])
    for turn in turns:
        metrics[f"verdict/{turn.status}"] = metrics.get(f"verdict/{turn.status}", 0.0) + 1
        for hack in turn.hacks:
            kind = f"hack/{hack.split(':', 1)[0]}"
            metrics[kind] = metrics.get(kind, 0.0) + 1
    return metrics
