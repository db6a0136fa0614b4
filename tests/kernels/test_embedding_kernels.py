"""embedding / embedding_rmsnorm against the float32 reference: outputs and dweight / dnorm_weight."""
from __future__ import annotations

import re

import pytest
import torch

from proxycomp.kernels.embedding import MAX_CHUNK, KernelInputError, embedding, embedding_rmsnorm
from proxycomp.kernels.reference import embedding_reference, embedding_rmsnorm_reference

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

# (vocab, dim, batch, seq): the small shared vocabulary, and one with an SPM range.
if CUDA:
    CASES = [(320, 1024, 8, 2048), (8512, 1024, 4, 2048), (260, 96, 3, 1001)]
    pytestmark = pytest.mark.gpu
else:
    CASES = [(320, 48, 3, 100), (40, 64, 2, 700), (260, 20, 1, 37)]


def _ids(vocab: int, batch: int, seq: int) -> torch.Tensor:
    ids = torch.randint(0, vocab, (batch, seq))
    # A hot row, as the space byte is in code: in the larger cases it spans several backward chunks.
    ids[torch.rand(batch, seq) < 0.4] = 3
    return ids.to(DEVICE)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_embedding_matches_reference(case, dtype):
    vocab, dim, batch, seq = case
    ids = _ids(vocab, batch, seq)
    weight = torch.randn(vocab, dim, device=DEVICE, dtype=dtype, requires_grad=True)
    grad = torch.randn(batch, seq, dim, device=DEVICE, dtype=dtype)
    out = embedding(ids, weight)
    out.backward(grad)
    ref_weight = weight.detach().float().requires_grad_()
    ref = embedding_reference(ids, ref_weight)
    ref.backward(grad.float())
    assert out.shape == (batch, seq, dim) and out.dtype == dtype
    assert torch.equal(out.float(), ref)
    assert int((ids == 3).sum()) > MAX_CHUNK or batch * seq < 2 * MAX_CHUNK
    unused = torch.ones(vocab, dtype=torch.bool, device=DEVICE)
    unused[ids.flatten()] = False
    assert (weight.grad[unused] == 0).all()
    assert _rel(weight.grad, ref_weight.grad) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_embedding_rmsnorm_matches_reference(dtype):
    vocab, dim, batch, seq = CASES[0]
    ids = _ids(vocab, batch, seq)
    weight = torch.randn(vocab, dim, device=DEVICE, dtype=dtype, requires_grad=True)
    norm_weight = (1 + 0.3 * torch.randn(dim, device=DEVICE)).to(dtype).requires_grad_()
    grad_x, grad_y = (torch.randn(batch, seq, dim, device=DEVICE, dtype=dtype) for _ in range(2))
    x, y = embedding_rmsnorm(ids, weight, norm_weight, 1e-5)
    torch.autograd.backward((x, y), (grad_x, grad_y))
    ref_w, ref_g = (t.detach().float().requires_grad_() for t in (weight, norm_weight))
    rx, ry = embedding_rmsnorm_reference(ids, ref_w, ref_g, 1e-5)
    torch.autograd.backward((rx, ry), (grad_x.float(), grad_y.float()))
    assert torch.equal(x.float(), rx)
    tol = TOLERANCE[dtype]
    assert _rel(y, ry) < tol
    assert _rel(weight.grad, ref_w.grad) < tol
    assert _rel(norm_weight.grad, ref_g.grad) < tol


def test_embedding_keeps_any_id_shape_and_int32():
    weight = torch.randn(50, 16, device=DEVICE, requires_grad=True)
    ids = torch.randint(0, 50, (2, 3, 5), device=DEVICE, dtype=torch.int32)
    out = embedding(ids, weight)
    assert torch.equal(out, weight.detach()[ids.long()])


def test_backward_is_deterministic():
    weight = torch.randn(30, 32, device=DEVICE, requires_grad=True)
    ids = _ids(30, 2, 400)
    grad = torch.randn(2, 400, 32, device=DEVICE)
    first = torch.autograd.grad(embedding(ids, weight), weight, grad)[0]
    second = torch.autograd.grad(embedding(ids, weight), weight, grad)[0]
    assert torch.equal(first, second)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: (torch.zeros(2, 3, device=DEVICE), torch.randn(10, 8, device=DEVICE)), "ids must be int32 or int64"),
        (lambda: (torch.tensor([[0, 1]], device=DEVICE), torch.randn(10, device=DEVICE)), "weight must have shape"),
        (lambda: (torch.tensor([[0, 1]], device=DEVICE), torch.randn(10, 8, device=DEVICE, dtype=torch.float64)),
         "dtype torch.float64"),
        (lambda: (torch.tensor([[0, 1]], device=DEVICE), torch.randn(8, 10, device=DEVICE).t()), "unit stride"),
        (lambda: (torch.tensor([[0, 1]], device="meta"), torch.randn(10, 8, device=DEVICE)), "is on meta"),
    ],
)
def test_embedding_bad_inputs_raise(make, message):
    ids, weight = make()
    with pytest.raises(KernelInputError, match=message):
        embedding(ids, weight)


# On the GPU the id range check is a device-side assert (no host sync), which would end the CUDA context.
@pytest.mark.skipif(CUDA, reason="a device-side assert would end the CUDA context of the test session")
@pytest.mark.parametrize("bad, shown", [([[0, 10]], "[0, 10]"), ([[-1, 2]], "[-1, 2]")])
def test_out_of_range_ids_raise(bad, shown):
    with pytest.raises(KernelInputError, match=r"ids must lie in \[0, 10\) .*got range " + re.escape(shown)):
        embedding(torch.tensor(bad), torch.randn(10, 8))


def test_embedding_rmsnorm_checks_norm_weight():
    ids = torch.tensor([[0, 1]], device=DEVICE)
    with pytest.raises(KernelInputError, match="norm_weight has 7 entries"):
        embedding_rmsnorm(ids, torch.randn(10, 8, device=DEVICE), torch.ones(7, device=DEVICE))


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(KernelInputError, match="TRITON_INTERPRET=1"):
        embedding(torch.tensor([[0, 1]]), torch.randn(10, 8))
