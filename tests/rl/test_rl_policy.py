import pytest
import torch

from proxycomp.gym_bridge.policy import ByteLMPolicy, Policy
from proxycomp.vocab import is_raw_byte

PROMPTS = ["def relu(x):", "Here is a PyTorch reference model:\n```python\nclass Model: ...\n```\n"]


def test_byte_lm_policy_implements_the_protocol(tiny_policy):
    assert isinstance(tiny_policy, Policy)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_equal_recomputed(tiny_policy, temperature):
    generator = torch.Generator().manual_seed(1)
    groups = tiny_policy.generate(PROMPTS, n=3, max_bytes=40, temperature=temperature, top_p=1.0, generator=generator)
    assert [len(g) for g in groups] == [3, 3]
    prompts = [p for p, g in zip(PROMPTS, groups) for _ in g]
    samples = [s for g in groups for s in g]
    scored = tiny_policy.score(prompts, [s.tokens for s in samples], temperature)
    for row, sample in enumerate(samples):
        n = len(sample.tokens)
        assert scored.mask[row].sum() == n
        torch.testing.assert_close(scored.logprobs[row, :n], torch.tensor(sample.logprobs), atol=1e-4, rtol=0)


def test_replies_end_at_the_first_non_byte_symbol(tiny_policy):
    groups = tiny_policy.generate(PROMPTS, n=4, max_bytes=30, temperature=1.0, top_p=1.0,
                                  generator=torch.Generator().manual_seed(2))
    for sample in (s for g in groups for s in g):
        assert all(is_raw_byte(t) for t in sample.tokens[:-1])
        assert sample.truncated == is_raw_byte(sample.tokens[-1])
        assert len(sample.tokens) <= 30 and len(sample.tokens) == len(sample.logprobs)


def test_batched_scoring_equals_single(tiny_policy):
    replies = [tiny_policy.encode_reply("```python\nx = 1\n```"), tiny_policy.encode_reply("y")]
    batched = tiny_policy.score(PROMPTS, replies, 1.0)
    for row, (prompt, reply) in enumerate(zip(PROMPTS, replies)):
        single = tiny_policy.score([prompt], [reply], 1.0)
        n = len(reply)
        torch.testing.assert_close(batched.logprobs[row, :n], single.logprobs[0, :n], atol=1e-5, rtol=0)
        torch.testing.assert_close(batched.entropy[row, :n], single.entropy[0, :n], atol=1e-5, rtol=0)
    chunked = ByteLMPolicy(tiny_policy.module, score_batch=1).score(PROMPTS, replies, 1.0)
    torch.testing.assert_close(chunked.logprobs, batched.logprobs, atol=1e-5, rtol=0)
    assert torch.equal(chunked.mask, batched.mask)


def test_scores_are_differentiable(tiny_policy):
    scored = tiny_policy.score(PROMPTS[:1], [tiny_policy.encode_reply("abc")], 1.0)
    scored.logprobs.sum().backward()
    assert tiny_policy.module.head.weight.grad.abs().sum() > 0


def test_encode_reply_is_bytes_then_stop(tiny_policy):
    assert tiny_policy.encode_reply("é") == [0xC3 + 64, 0xA9 + 64, ByteLMPolicy.STOP]


def test_context_overflow_names_the_setting(tiny_policy):
    policy = ByteLMPolicy(tiny_policy.module, max_context=16)
    with pytest.raises(ValueError, match="rollout.prompt_max_bytes"):
        policy.generate(["a" * 10], n=1, max_bytes=8, temperature=1.0, top_p=1.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=0.0), "temperature"),
    (dict(n=0), "n and max_bytes"),
])
def test_bad_sampling_arguments(tiny_policy, kwargs, message):
    args = dict(n=1, max_bytes=4, temperature=1.0, top_p=1.0) | kwargs
    with pytest.raises(ValueError, match=message):
        tiny_policy.generate(["a"], **args)


def test_score_rejects_mismatched_lengths(tiny_policy):
    with pytest.raises(ValueError, match="2 prompts but 1 replies"):
        tiny_policy.score(PROMPTS, [[70]], 1.0)
