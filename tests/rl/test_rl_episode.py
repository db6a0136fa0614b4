import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycomp.gym_bridge.result import EvalResult
from proxycomp.gym_bridge.rl import (
    Trajectory,
    Turn,
    feedback_text,
    first_prompt,
    get_estimator,
    next_prompt,
    reward_to_go,
    stack_turns,
)
from proxycomp.gym_bridge.rl.episode import truncate_middle

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 16384)]


def get_init_inputs():
    return []
'''


def trajectory(codes, task_id="relu", rewards=None):
    rewards = rewards or [0.0] * len(codes)
    turns = [Turn(prompt="p", reply=f"```python\n{c}\n```", code=c, reward=r) for c, r in zip(codes, rewards)]
    return Trajectory(task_id=task_id, task_source=REFERENCE, turns=turns)


def test_first_prompt_holds_reference_and_asks_for_modelnew():
    prompt = first_prompt(REFERENCE)
    assert REFERENCE.strip() in prompt
    assert "`ModelNew`" in prompt
    assert "single ```python block" in prompt
    assert first_prompt(REFERENCE, "Do X.").rstrip().endswith("Do X.")


def test_next_prompt_carries_only_last_code_and_its_feedback():
    history = trajectory(["old_attempt_code()", "latest_attempt_code()"])
    result = EvalResult(id="1", task="relu", status="incorrect", trials=5, trials_passed=2, max_abs_err=3.2)
    prompt = next_prompt(history, result)
    assert "latest_attempt_code()" in prompt and "old_attempt_code()" not in prompt
    assert result.feedback() in prompt and "2/5 trials passed" in prompt and "def get_inputs" in prompt
    assert next_prompt(history, "plain text feedback").count("plain text feedback") == 1


def test_next_prompt_without_extracted_code_says_so():
    history = trajectory(["x"])
    history.turns[-1].code = None
    assert "no ```python block could be extracted" in next_prompt(history, "no code found")


def test_budget_cuts_long_feedback_but_keeps_code():
    code = "def kernel():\n    return 1\n" * 20
    traceback = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "RuntimeError: illegal memory access"
    prompt = next_prompt(trajectory([code]), traceback, max_bytes=4000)
    assert len(prompt.encode()) <= 4000
    assert code.strip() in prompt and REFERENCE.strip() in prompt
    assert "Traceback" in prompt and "RuntimeError: illegal memory access" in prompt  # head and tail survive
    assert "bytes cut ...]" in prompt


def test_budget_cuts_every_section_when_all_are_long():
    long_ref = REFERENCE + "# pad\n" * 3000
    history = Trajectory("t", long_ref, [Turn("p", "r", code="y = 1\n" * 3000)])
    prompt = next_prompt(history, "z\n" * 3000, max_bytes=3000)
    assert len(prompt.encode()) <= 3000
    assert prompt.count("bytes cut ...]") == 3
    assert "class Model" in prompt and "# pad" in prompt


def test_first_prompt_budget_and_too_small_budget():
    prompt = first_prompt(REFERENCE * 50, max_bytes=1500)
    assert len(prompt.encode()) <= 1500 and "class Model" in prompt and "get_init_inputs" in prompt
    with pytest.raises(ValueError, match="max_bytes: 50 is below the prompt's fixed text"):
        first_prompt(REFERENCE, max_bytes=50)


@settings(max_examples=60, deadline=None)
@given(
    reference=st.text(min_size=0, max_size=3000),
    code=st.text(min_size=1, max_size=3000),
    feedback=st.text(min_size=0, max_size=3000),
    max_bytes=st.integers(min_value=700, max_value=6000),
)
def test_budget_is_never_exceeded(reference, code, feedback, max_bytes):
    history = Trajectory("t", reference, [Turn("p", "r", code=code)])
    prompt = next_prompt(history, feedback, max_bytes=max_bytes)
    assert len(prompt.encode()) <= max_bytes
    if len(next_prompt(history, feedback).encode()) <= max_bytes:  # fits: nothing is cut
        assert prompt == next_prompt(history, feedback)


def test_truncate_middle_respects_multibyte_characters():
    text = "é€😀" * 100
    for limit in (0, 10, 40, 41, 99, 200):
        cut = truncate_middle(text, limit)
        assert len(cut.encode()) <= limit
    assert truncate_middle("short", 5) == "short"


def test_truncate_middle_cuts_at_line_boundaries():
    cut = truncate_middle("".join(f"line {i:03d}\n" for i in range(100)), 300)
    lines = cut.splitlines()
    assert lines[0] == "line 000" and lines[-1] == "line 099"
    assert all(line.startswith("line ") or line.startswith("[... ") for line in lines)
    assert sum(line.startswith("[... ") for line in lines) == 1 and len(cut.encode()) <= 300


def test_feedback_type_errors():
    with pytest.raises(TypeError, match="feedback: expected a str or an object with .feedback"):
        feedback_text(42)

    class Broken:
        def feedback(self):
            return None

    with pytest.raises(TypeError, match=r"Broken.feedback\(\) returned NoneType"):
        feedback_text(Broken())
    with pytest.raises(ValueError, match="history: trajectory 'relu' has no turns yet"):
        next_prompt(Trajectory("relu", REFERENCE), "x")


def test_stack_turns_feeds_returns_and_trloo():
    a = trajectory(["a0", "a1"], rewards=[0.5, 1.0])
    b = trajectory(["b0"], rewards=[0.25])
    c = trajectory(["c0", "c1"], task_id="gelu", rewards=[0.0, 2.0])
    a.turns[1].correct, a.turns[1].coverage, b.turns[0].hacks = True, 0.8, ("decoy_kernel",)
    batch = stack_turns([a, b, c])
    assert batch.group_ids.tolist() == [0, 0, 1]
    assert batch.turn_mask.tolist() == [[True, True], [True, False], [True, True]]
    assert batch.correct.tolist() == [[False, True], [False, False], [False, False]]
    assert batch.hacked.tolist() == [[False, False], [True, False], [False, False]]
    assert batch.coverage[0, 1].item() == 0.8 and torch.isnan(batch.coverage[0, 0])
    returns = reward_to_go(batch.rewards, batch.turn_mask)
    assert returns.tolist() == [[1.5, 1.0], [0.25, 0.0], [2.0, 2.0]]
    advantages = get_estimator("trloo")(returns, batch.turn_mask, batch.group_ids)
    assert advantages.tolist() == [[1.25, 1.0], [-1.25, 0.0], [2.0, 2.0]]
    with pytest.raises(ValueError, match="trajectories: 1 without turns"):
        stack_turns([a, Trajectory("empty", REFERENCE)])
    with pytest.raises(ValueError, match="trajectories: empty batch"):
        stack_turns([])
