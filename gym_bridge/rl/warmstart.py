"""Supervised warm start: a kernel corpus built from the train tasks' solutions, and training on it.

A small policy cannot write Triton from scratch, so RL starts from a model that has seen kernels for the
train tasks. The corpus holds, per task, its solution and variants of it:

- *correct* variants of a shipped solution: other block sizes and ``num_warps`` values (kept only if the gym
  finds them correct);
- *broken* variants, kept only if the gym finds them incorrect or failing (never flagged), each with the gym's
  real feedback: for a generated task (``proxycomp gym generate``) the family's own (a wrong op, a missing op, a
  launch error), for a shipped one mechanical rewrites (a dropped store mask, an off-by-one offset, a wrong op).

A generated family has thousands of train tasks; ``label_tasks`` bounds how many go through the gym (their
variants and fix examples), the others give their solution alone, unjudged (the family's tests run samples of
its solutions through the gym).

Examples are (prompt, reply) pairs in the episode format: first-turn examples (reference -> code) and fix
examples (reference + broken code + its feedback -> the correct code it was broken from), like cold-start
trajectories that contain failed attempts and their repairs. ``first_turn_broken_share`` puts broken code
among the first-turn replies too, so the warm-started policy is sometimes wrong on the first turn and RL
has something to fix. The loss is next-symbol cross-entropy on reply symbols only.
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from proxycomp.checkpoint import (
    lm_from_checkpoint,
    lm_state,
    model_weights,
    read_checkpoint,
    reading,
    save_lm,
    spm_model_of,
)
from proxycomp.defaults import GRAD_CLIP
from proxycomp.errors import UserError
from proxycomp.files import write_atomic
from proxycomp.lit import ProxyLM

from ..config import Candidate
from ..evaluator import Evaluator
from ..family.broken import BROKEN_KINDS as FAMILY_BROKEN_KINDS
from ..family.files import read_broken
from ..policy import ByteLMPolicy, Policy
from ..tasks import Task
from ._checks import RLConfigError
from .episode import DEFAULT_INSTRUCTIONS, Trajectory, Turn, first_prompt, next_prompt
from .rollout import RolloutConfig

STATE_FILE = "state.ckpt"  # the warm start's training state, in OUT/warmstart/
CORRECT_KINDS = ("solution", "block", "num_warps")
BROKEN_KINDS = tuple(dict.fromkeys(("dropped_mask", "wrong_offset", "wrong_op", *FAMILY_BROKEN_KINDS)))

_BLOCK_CONST = re.compile(r"^(BLOCK\w*) = (\d+)$", re.M)
_NUM_WARPS = re.compile(r"num_warps=(\d+)")
_MASKED_STORE = re.compile(r"(tl\.store\([^\n]*?), mask=[\w<>= ]+\)")
_LOAD_POINTER = re.compile(r"tl\.load\((\w+) \+ (\w+)")
# (pattern, replacement): the first rule that matches the solution makes its wrong-op variant.
_WRONG_OPS = (
    (re.compile(r"tl\.where\((\w+) > 0"), r"tl.where(\1 < 0"),
    (re.compile(r"tl\.sigmoid\("), "tl.exp("),
    (re.compile(r"tl\.maximum\("), "tl.minimum("),
    (re.compile(r"tl\.exp\("), "tl.exp2("),
    (re.compile(r"tl\.sum\("), "tl.max("),
    (re.compile(r"tl\.max\("), "tl.min("),
)


@dataclass
class Variant:
    task: str
    kind: str  # one of CORRECT_KINDS or BROKEN_KINDS
    code: str
    base: str  # the correct code this variant was made from (itself for correct kinds)
    status: str = ""  # the gym's verdict, filled by build_corpus
    feedback: str = ""

    @property
    def broken(self) -> bool:
        return self.kind in BROKEN_KINDS


@dataclass
class Example:
    prompt: str
    reply: str
    kind: str  # "first_turn", "first_turn_broken" or "fix"


@dataclass
class WarmStartConfig:
    """The supervised warm start on the kernel corpus, before RL.

    Args:
        steps: optimizer steps; 0 skips the warm start
        batch_size: examples per step
        lr: AdamW learning rate (a fresh AdamW, no warm-up: far above the rate a policy's pretraining ended at,
            its first steps wreck the language model, docs/rl.md)
        weight_decay: AdamW weight decay
        grad_clip: gradient norm clip
        label_tasks: train tasks whose variants the gym judges (the first N); the rest give their solution alone;
            null: every train task
        sft_tasks: train tasks the warm start learns from (the first N); RL then trains on the others, so that what
            RL gains on its tasks is not the warm start's memory of them; null: every train task for both
        fix_share: share of fix examples (broken code and its feedback -> the correct code) in a batch
        first_turn_broken_share: share of broken code among the first-turn replies
        log_every: print the mean loss every this many steps
        save_every: write OUT/warmstart/state.ckpt every this many steps (and after the last), so a killed warm
            start goes on from it
    """

    steps: int = 0
    batch_size: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = GRAD_CLIP
    label_tasks: int | None = None
    sft_tasks: int | None = None
    fix_share: float = 0.4
    first_turn_broken_share: float = 0.0
    log_every: int = 10
    save_every: int = 50

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or self.lr <= 0 or self.log_every < 1 or self.save_every < 1:
            raise RLConfigError("warmstart: need steps >= 0, batch_size >= 1, lr > 0, log_every >= 1 and "
                                "save_every >= 1")
        if self.label_tasks is not None and self.label_tasks < 0:
            raise RLConfigError(f"warmstart.label_tasks: must be >= 0 (or null for all), got {self.label_tasks}")
        if self.sft_tasks is not None and self.sft_tasks < 1:
            raise RLConfigError(f"warmstart.sft_tasks: must be >= 1 (or null for all), got {self.sft_tasks}")
        for name in ("fix_share", "first_turn_broken_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise RLConfigError(f"warmstart.{name}: must be in [0, 1], got {getattr(self, name)}")


def reply_text(code: str) -> str:
    """A reply as the policy should write it: the code in one ```python block."""
    return f"```python\n{code.strip()}\n```"


def code_variants(task: str, solution: str) -> list[Variant]:
    """The solution and every variant the rewrite rules apply to (unchecked: the gym decides)."""
    variants = [Variant(task, "solution", solution, solution)]
    for match in _BLOCK_CONST.finditer(solution):
        value = int(match.group(2))
        for new in (value // 2, value * 2):
            if new >= 16:
                code = solution[:match.start(2)] + str(new) + solution[match.end(2):]
                variants.append(Variant(task, "block", code, code))
    warps = {int(w) for w in _NUM_WARPS.findall(solution)}
    for new in sorted({2, 4, 8} - warps)[:2]:
        code = _NUM_WARPS.sub(f"num_warps={new}", solution)
        variants.append(Variant(task, "num_warps", code, code))
    broken = {
        "dropped_mask": _MASKED_STORE.sub(r"\1)", solution, count=1),
        # Shift only the first load: shifting load and store alike would leave a result that is merely moved.
        "wrong_offset": _LOAD_POINTER.sub(r"tl.load(\1 + \2 + 1", solution, count=1),
    }
    for pattern, replacement in _WRONG_OPS:
        if pattern.search(solution):
            broken["wrong_op"] = pattern.sub(replacement, solution, count=1)
            break
    variants += [Variant(task, kind, code, solution) for kind, code in broken.items() if code != solution]
    return variants


def _solution(task: Task) -> str:
    if task.solution_path is None:
        raise UserError(f"warm start: task {task.name!r} has no solution; pick train tasks that do")
    return task.solution_path.read_text()


def task_variants(task: Task) -> list[Variant]:
    """A task's solution and its variants: a generated family's broken variants where the task has them, else the
    rewrite rules of :func:`code_variants` (unchecked: the gym decides)."""
    solution = _solution(task)
    generated = read_broken(task.path)
    if not generated:
        return code_variants(task.name, solution)
    return [Variant(task.name, "solution", solution, solution),
            *(Variant(task.name, kind, code, solution) for kind, code in generated.items())]


def build_corpus(tasks: Sequence[Task], evaluator: Evaluator, path: Path,
                 label_tasks: int | None = None) -> list[Variant]:
    """Variants of the first ``label_tasks`` tasks (all with None), labelled by the gym in one batch, and the solution
    alone of every other task; written to `path` (JSON lines, read back by `load_variants`), so that a warm start going
    on later does not label them again.

    Correct kinds are kept when the gym finds them correct, broken kinds when it finds them incorrect or
    failing without a hacking verdict. A solution the gym rejects is an error (the corpus would teach wrong code).
    """
    labelled = list(tasks) if label_tasks is None else list(tasks)[:label_tasks]
    variants = [v for task in labelled for v in task_variants(task)]
    paths = {task.name: str(task.path) for task in labelled}
    results = evaluator.submit([Candidate(paths[v.task], v.code, f"{v.task}:{v.kind}:{i}")
                                for i, v in enumerate(variants)]) if variants else []
    kept = []
    for variant, result in zip(variants, results):
        variant.status, variant.feedback = result.status, result.feedback()
        if variant.kind == "solution" and not result.correct:
            raise RuntimeError(f"warm start: the solution of {variant.task!r} fails in the gym "
                               f"({result.status}: {result.reason}); fix the solution or drop the task")
        if result.correct != variant.broken and not result.hacks:
            kept.append(variant)
    solutions = [(task.name, _solution(task)) for task in list(tasks)[len(labelled):]]
    corpus = kept + [Variant(name, "solution", code, code) for name, code in solutions]
    write_atomic(path, "".join(json.dumps(asdict(v)) + "\n" for v in corpus))
    return corpus


def load_variants(path: Path) -> list[Variant]:
    variants = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            variants.append(Variant(**json.loads(line)))
        except (json.JSONDecodeError, TypeError) as err:
            raise UserError(f"{path}:{number}: not a corpus record ({err}); delete the file to rebuild it") from None
    return variants


def corpus_examples(
    variants: Sequence[Variant],
    tasks: Sequence[Task],
    instructions: str = DEFAULT_INSTRUCTIONS,
    prompt_text_bytes: int | None = None,
) -> list[Example]:
    """First-turn examples for every variant and a fix example for every broken one, their prompts cut as the
    rollout cuts them (`RolloutConfig.prompt_text_bytes`)."""
    sources = {task.name: task.source for task in tasks}
    examples = []
    for v in variants:
        source = sources[v.task]
        opening = first_prompt(source, instructions, max_bytes=prompt_text_bytes)
        examples.append(Example(opening, reply_text(v.code), "first_turn_broken" if v.broken else "first_turn"))
        if v.broken:
            history = Trajectory(v.task, source, [Turn(opening, reply_text(v.code), code=v.code)])
            fix_prompt = next_prompt(history, v.feedback, instructions, max_bytes=prompt_text_bytes)
            examples.append(Example(fix_prompt, reply_text(v.base), "fix"))
    return examples


def example_weights(examples: Sequence[Example], config: WarmStartConfig) -> torch.Tensor:
    """Sampling weight per example so the kinds get the configured shares (a missing kind gives its share away)."""
    shares = {
        "fix": config.fix_share,
        "first_turn": (1 - config.fix_share) * (1 - config.first_turn_broken_share),
        "first_turn_broken": (1 - config.fix_share) * config.first_turn_broken_share,
    }
    counts = {kind: sum(e.kind == kind for e in examples) for kind in shares}
    weights = torch.tensor([shares[e.kind] / counts[e.kind] for e in examples], dtype=torch.float64)
    if weights.sum() <= 0:
        raise UserError("warmstart: the configured shares give every corpus example weight 0; "
                         "raise warmstart.fix_share or lower warmstart.first_turn_broken_share")
    return weights


def batches(
    examples: Sequence[Example], config: WarmStartConfig, generator: torch.Generator
) -> Iterator[list[Example]]:
    weights = example_weights(examples, config)
    while True:
        picks = torch.multinomial(weights, config.batch_size, replacement=True, generator=generator)
        yield [examples[i] for i in picks.tolist()]


def reply_nll(policy: Policy, batch: Sequence[Example]) -> torch.Tensor:
    """Mean negative log-likelihood per reply symbol (prompt symbols carry no loss)."""
    scored = policy.score([e.prompt for e in batch], [policy.encode_reply(e.reply) for e in batch], temperature=1.0)
    return -(scored.logprobs * scored.mask).sum() / scored.mask.sum().clamp(min=1)


def warm_start(
    policy: Policy,
    examples: Sequence[Example],
    config: WarmStartConfig,
    *,
    step_fn: Callable[[torch.Tensor], None],
    generator: torch.Generator,
    log: Callable[[int, float], None] = lambda step, loss: None,
    start: int = 0,
    after_step: Callable[[int], None] = lambda step: None,
) -> list[float]:
    """Supervised steps `start` to ``config.steps``; ``step_fn(loss)`` does backward, clipping and the optimizer
    step, ``after_step(steps done)`` follows each (to checkpoint). Batches are drawn from `generator` alone, so a
    run going on from step k with the generator's state at k draws what an uninterrupted one would."""
    if not examples:
        raise UserError("warm start: the corpus has no examples; check the train tasks' solutions")
    losses = []
    for step, batch in zip(range(start, config.steps), batches(examples, config, generator)):
        loss = reply_nll(policy, batch)
        step_fn(loss)
        losses.append(float(loss.detach()))
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            log(step + 1, sum(losses[-config.log_every:]) / len(losses[-config.log_every:]))
        after_step(step + 1)
    return losses


@dataclass
class BaseModel:
    """The model RL starts from: its module, against which a saved model is checked, and its hyper-parameters and
    tokenizer, which every checkpoint of the run carries besides its own weights."""

    lm: ProxyLM
    hyper_parameters: dict
    spm_model: bytes | None

    @classmethod
    def read(cls, ckpt: Path) -> BaseModel:
        """The model of a .ckpt; a missing or damaged one is a UserError. The sampler decodes with SDPA over a KV
        cache; scoring with the same attention and embedding code keeps the trainer/rollout probability ratio at
        rounding level (a Triton/TF32 path would trip mismatch rejection)."""
        saved = read_checkpoint(ckpt)
        return cls(lm_from_checkpoint(saved, ckpt, attn_backend="sdpa", embed_backend="torch"),
                   saved["hyper_parameters"], spm_model_of(saved))

    def load_into(self, module: torch.nn.Module, fabric, path: Path, state: dict | None = None) -> None:
        """Load the weights of checkpoint `path` into `module` (and its other `state`, as fabric.load does), after
        checking that they were trained from a model of this one's shape."""
        with reading(path):
            saved = fabric.load(path, state)
        changes = self.lm.weight_changes(saved.get("hyper_parameters") or {})
        if changes:
            raise UserError(f"{path} does not fit the model of --ckpt ({'; '.join(changes)}); use another --out "
                            "or delete that file")
        module.load_state_dict(model_weights(saved))


class WarmStarter:
    """The warm start of a run, in OUT/warmstart/: the corpus (corpus.jsonl, reloaded when there), supervised steps
    on it with its own optimizer, and the result, model.ckpt (reused when there). Its training state (weights,
    optimizer, sampler) is checkpointed to state.ckpt as it goes and kept after the last step: a killed warm start
    goes on from it, and so does a longer one from a finished one (rl-compare's SFT-only control, which takes away
    model.ckpt and asks for more steps)."""

    def __init__(self, *, fabric, policy: ByteLMPolicy, base: BaseModel, config: WarmStartConfig,
                 rollout: RolloutConfig, out_dir: Path, seed: int) -> None:
        self.fabric, self.policy, self.base, self.config, self.rollout = fabric, policy, base, config, rollout
        self.dir = Path(out_dir) / "warmstart"
        self.optimizer = fabric.setup_optimizers(torch.optim.AdamW(
            policy.module.parameters(), lr=config.lr, weight_decay=config.weight_decay))
        self.generator = torch.Generator().manual_seed(seed)
        self.step = 0

    @property
    def model_path(self) -> Path:
        return self.dir / "model.ckpt"

    @property
    def state_path(self) -> Path:
        return self.dir / STATE_FILE

    def start(self, tasks: Sequence[Task], gym: Evaluator) -> Path | None:
        """Load model.ckpt into the policy, or make it (with warmstart.steps > 0); the folder that holds it, or None
        when there is no warm start."""
        if self.model_path.is_file():
            self.base.load_into(self.policy.module, self.fabric, self.model_path)
            print(f"warm start: reusing {self.model_path}", flush=True)
        elif self.config.steps > 0:
            self.fit(self.examples(tasks, gym))
        else:
            return None
        return self.dir

    def examples(self, tasks: Sequence[Task], gym: Evaluator) -> list[Example]:
        started, corpus_path = time.monotonic(), self.dir / "corpus.jsonl"
        if corpus_path.is_file():
            variants = load_variants(corpus_path)
        else:
            variants = build_corpus(tasks, gym, corpus_path, self.config.label_tasks)
        examples = corpus_examples(variants, tasks, self.rollout.instructions, self.rollout.prompt_text_bytes)
        longest = max(len(e.reply.encode()) for e in examples)
        if longest >= self.rollout.max_bytes:
            raise UserError(f"rollout.max_bytes={self.rollout.max_bytes} cannot hold the longest warm-start reply "
                            f"({longest} bytes); raise it or drop the task with the longest solution")
        kinds = {k: sum(e.kind == k for e in examples) for k in ("first_turn", "first_turn_broken", "fix")}
        print(f"warm start: {len(variants)} variants ({time.monotonic() - started:.0f} s), examples {kinds}",
              flush=True)
        return examples

    def fit(self, examples: Sequence[Example]) -> None:
        """Steps to warmstart.steps (going on from state.ckpt), then model.ckpt."""
        started = time.monotonic()
        if self.state_path.is_file():  # a killed or shorter warm start: its weights, optimizer and sampling go on
            state = self._training_state()
            self.base.load_into(self.policy.module, self.fabric, self.state_path, state)
            self.step = state["step"]
            if self.step > self.config.steps:
                raise UserError(f"{self.state_path} is the warm start after {self.step} steps, past warmstart.steps="
                                f"{self.config.steps}; ask for {self.step} or more, or use another --out")
            self.generator.set_state(state["generator"])
            print(f"warm start: going on from step {self.step} ({self.state_path})", flush=True)
        warm_start(self.policy, examples, self.config, step_fn=self._optimizer_step, generator=self.generator,
                   start=self.step, after_step=self._after_step,
                   log=lambda step, loss: print(f"warm start step {step:>4}  nll/byte {loss:.4f}", flush=True))
        print(f"warm start: {self.config.steps} steps in {time.monotonic() - started:.0f} s", flush=True)
        save_lm(self.model_path, self.base.hyper_parameters, self.policy.module, self.base.spm_model)

    def _training_state(self) -> dict:
        """What going on needs besides the weights (Fabric restores the optimizer in place)."""
        return {"optimizer": self.optimizer, "step": self.step, "generator": self.generator.get_state()}

    def _optimizer_step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.fabric.backward(loss)
        self.fabric.clip_gradients(self.policy.module, self.optimizer, max_norm=self.config.grad_clip)
        self.optimizer.step()

    def _after_step(self, step: int) -> None:
        self.step = step
        if step % self.config.save_every == 0 or step == self.config.steps:
            self._save_state()

    def _save_state(self) -> None:
        base = self.base
        self.fabric.save(self.state_path, {**lm_state(base.hyper_parameters, self.policy.module, base.spm_model),
                                           **self._training_state()})
