"""What crosses between gym processes: buffers the judge makes and sizes, and outputs of GPU size through them."""
import fcntl
import os

import pytest
import torch

from proxycomp.gym_bridge import Candidate, EvalConfig, Evaluator, LocalPool
from proxycomp.gym_bridge import wire

# An output of 256 MiB (8192 x 8192 float32), as the GPU sizes of the shipped tasks have: four times the candidate
# process's file-size limit, which once also capped the memfd its reply travelled in.
BIG_TASK = '''
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8192, 8192)]


def get_init_inputs():
    return []
'''
# A real Triton launch (the decoy check), the bulk in torch: legal beside a kernel, and quick on a CPU.
BIG_CANDIDATE = '''
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        head = torch.empty(16)
        relu_kernel[(1,)](x.reshape(-1)[:16].contiguous(), head, 16, BLOCK=16)
        return torch.relu(x)
'''


def test_a_reply_buffer_cannot_grow_and_refuses_what_does_not_fit():
    fd = wire.reply_buffer(64)
    try:
        with pytest.raises(OSError):
            os.ftruncate(fd, 1 << 20)  # sealed: the candidate cannot enlarge what the judge accepts
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_GROW
        items = wire.write_into(fd, [torch.arange(16, dtype=torch.float32)])
        assert torch.equal(wire.decode(items, fd, 64)[0], torch.arange(16, dtype=torch.float32))
        with pytest.raises(wire.WireError, match="more than the 64"):
            wire.write_into(fd, [torch.zeros(17)])
    finally:
        os.close(fd)


def test_a_description_outside_the_buffer_or_over_budget_is_refused():
    fd = wire.reply_buffer(16)
    try:
        wire.write_into(fd, [torch.ones(4)])
        with pytest.raises(wire.WireError, match="outside"):
            wire.decode([{"dtype": "float32", "shape": [8], "offset": 0}], fd, 1 << 10)
        with pytest.raises(wire.WireError, match="more than"):
            wire.decode([{"dtype": "float32", "shape": [4], "offset": 0}], fd, 8)
    finally:
        os.close(fd)


@pytest.mark.slow
def test_an_output_of_256_mib_is_judged(tmp_path):
    task = tmp_path / "big_relu.py"
    task.write_text(BIG_TASK)
    config = EvalConfig(size="cpu", correct_trials=1, timeout_s=120)
    with Evaluator(LocalPool(num_workers=1), config) as ev:
        (result,) = ev.submit([Candidate(str(task), BIG_CANDIDATE, "big")])
    assert result.status == "ok" and result.reward == 1.0, result.to_dict()
