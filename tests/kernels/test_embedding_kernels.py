"""embedding / embedding_rmsnorm against the float32 reference (outputs, dweight, dnorm_weight); embedding_rmsnorm's
custom ops' contracts."""
from __future__ import annotations

import re

import pytest
import torch

from proxycomp.kernels import embedding as E
from proxycomp.kernels.embedding import (
    KernelInputError,
    embedding,
    embedding_rmsnorm,
    embedding_rmsnorm_bwd,
    embedding_rmsnorm_fwd,
)
from proxycomp.kernels.reference import embedding_reference, embedding_rmsnorm_reference

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]

# (vocab, dim, batch, seq): the small shared vocabulary, and one with an SPM range.
if CUDA:
    CASES = [(320, 1024, 8, 2048), (8512, 1024, 4, 2048), (260, 96, 3, 1001)]
    pytestmark = pytest.mark.gpu
else:
    CASES = [(320, 48, 3, 100), (40, 64, 2, 700), (260, 20, 1, 37)]

# Shapes that reach every branch of the backward, small enough for the interpreter:
# (vocab, dim, tokens, id pattern).
EDGES = {
    "one row, many chunks": (50, 24, 700, "one"),  # the finishing kernel adds slots over > BLOCK_C chunks
    "sparse vocabulary": (5000, 40, 300, "uniform"),  # most rows unused: zeroed between and after the ids
    "int32 keys": (40000, 16, 500, "hot"),  # a vocabulary past int16 sort keys
    "columns in 3 blocks": (300, 300, 777, "hot"),  # the last column block partial
    "one token": (17, 33, 1, "uniform"),
    "ids at both ends": (64, 16, 403, "ends"),  # row 0 and row V-1 only
}


def _ids(vocab: int, shape, pattern: str = "hot") -> torch.Tensor:
    ids = torch.randint(0, vocab, shape)
    if pattern == "hot":  # as the space byte is in code: in the larger cases it spans several chunks
        ids[torch.rand(shape) < 0.4] = 3
    elif pattern == "one":
        ids.fill_(vocab // 3)
    elif pattern == "ends":
        ids = torch.where(torch.rand(shape) < 0.5, 0, vocab - 1)
    return ids.to(DEVICE)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def _check_embedding(ids: torch.Tensor, vocab: int, dim: int, dtype: torch.dtype) -> None:
    weight = torch.randn(vocab, dim, device=DEVICE, dtype=dtype, requires_grad=True)
    grad = torch.randn(*ids.shape, dim, device=DEVICE, dtype=dtype)
    out = embedding(ids, weight)
    out.backward(grad)
    ref_weight = weight.detach().float().requires_grad_()
    ref = embedding_reference(ids, ref_weight)
    ref.backward(grad.float())
    assert out.shape == (*ids.shape, dim) and out.dtype == dtype
    assert torch.equal(out.float(), ref)
    assert weight.grad.dtype == dtype
    assert _rel(weight.grad, ref_weight.grad) < TOLERANCE[dtype]
    counts = torch.bincount(ids.flatten(), minlength=vocab)
    assert (weight.grad[counts == 0] == 0).all()
    # A row used by one token gets that token's gradient exactly (a 0/1 matmul, fp32 sums).
    single = (counts == 1).nonzero().flatten()
    position = {int(i): p for p, i in enumerate(ids.flatten().tolist())}
    for row in single[:20].tolist():
        assert torch.equal(weight.grad[row], grad.reshape(-1, dim)[position[row]])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_embedding_matches_reference(case, dtype):
    vocab, dim, batch, seq = case
    _check_embedding(_ids(vocab, (batch, seq)), vocab, dim, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("edge", EDGES, ids=str)
def test_embedding_backward_edge_cases(edge, dtype):
    vocab, dim, tokens, pattern = EDGES[edge]
    _check_embedding(_ids(vocab, (tokens,), pattern), vocab, dim, dtype)


@pytest.mark.parametrize("pattern", ["hot", "uniform", "one"])
def test_long_chunks_carry_runs_across_tiles(monkeypatch, pattern):
    """One program per ~1024 sorted tokens: runs go on across many tiles of a chunk."""
    monkeypatch.setattr(E, "TARGET_PROGRAMS", 1)
    vocab, dim, tokens = 90, 40, 1500
    assert E._chunk_size(tokens, 1) == E.MAX_CHUNK > 8 * E.BLOCK_T
    for dtype in (torch.float32, torch.bfloat16):
        _check_embedding(_ids(vocab, (tokens,), pattern), vocab, dim, dtype)


def test_sort_keys_are_the_narrowest_int():
    weight = torch.randn(2**15, 8, device=DEVICE)
    ids = torch.tensor([0, 2**15 - 1, 5], device=DEVICE)
    assert E.embedding_forward(ids, weight)[1].dtype == torch.int16
    assert E.embedding_forward(ids, torch.randn(2**15 + 1, 8, device=DEVICE))[1].dtype == torch.int32


def _check_embedding_rmsnorm(ids: torch.Tensor, vocab: int, dim: int, dtype: torch.dtype) -> None:
    weight = torch.randn(vocab, dim, device=DEVICE, dtype=dtype, requires_grad=True)
    norm_weight = (1 + 0.3 * torch.randn(dim, device=DEVICE)).to(dtype).requires_grad_()
    grad_x, grad_y = (torch.randn(*ids.shape, dim, device=DEVICE, dtype=dtype) for _ in range(2))
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
    unused = torch.bincount(ids.flatten(), minlength=vocab) == 0
    assert (weight.grad[unused] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=lambda c: "-".join(map(str, c)))
def test_embedding_rmsnorm_matches_reference(case, dtype):
    vocab, dim, batch, seq = case
    _check_embedding_rmsnorm(_ids(vocab, (batch, seq)), vocab, dim, dtype)


@pytest.mark.parametrize("edge", ["one row, many chunks", "columns in 3 blocks", "ids at both ends"], ids=str)
def test_embedding_rmsnorm_edge_cases(edge):
    vocab, dim, tokens, pattern = EDGES[edge]
    _check_embedding_rmsnorm(_ids(vocab, (tokens,), pattern), vocab, dim, torch.bfloat16)


def test_embedding_rmsnorm_sparse_vocabulary():
    # Unused rows must hold zero sums before the row kernel, or their dweight would not be zero.
    _check_embedding_rmsnorm(_ids(1500, (100,), "uniform"), 1500, 24, torch.float32)


def test_embedding_rmsnorm_long_chunks(monkeypatch):
    monkeypatch.setattr(E, "TARGET_PROGRAMS", 1)
    _check_embedding_rmsnorm(_ids(70, (3, 700)), 70, 48, torch.float32)


def test_empty_ids_give_a_zero_gradient():
    weight = torch.randn(10, 8, device=DEVICE, requires_grad=True)
    out = embedding(torch.zeros(2, 0, dtype=torch.long, device=DEVICE), weight)
    assert out.shape == (2, 0, 8)
    out.sum().backward()
    assert torch.equal(weight.grad, torch.zeros_like(weight))


def test_embedding_keeps_any_id_shape_and_int32():
    weight = torch.randn(50, 16, device=DEVICE, requires_grad=True)
    ids = torch.randint(0, 50, (2, 3, 5), device=DEVICE, dtype=torch.int32)
    out = embedding(ids, weight)
    assert torch.equal(out, weight.detach()[ids.long()])


def test_backward_is_deterministic():
    weight = torch.randn(30, 32, device=DEVICE, requires_grad=True)
    ids = _ids(30, (2, 400))
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
@pytest.mark.parametrize("op", ["embedding", "embedding_rmsnorm"])
@pytest.mark.parametrize("bad, shown", [([[0, 10]], "[0, 10]"), ([[-1, 2]], "[-1, 2]")])
def test_out_of_range_ids_raise(op, bad, shown):
    args = (torch.tensor(bad), torch.randn(10, 8)) + ((torch.ones(8),) if op == "embedding_rmsnorm" else ())
    with pytest.raises(KernelInputError, match=rf"{op}: ids must lie in \[0, 10\) .*got range " + re.escape(shown)):
        getattr(E, op)(*args)


def test_embedding_rmsnorm_checks_norm_weight():
    ids = torch.tensor([[0, 1]], device=DEVICE)
    with pytest.raises(KernelInputError, match="norm_weight has 7 entries"):
        embedding_rmsnorm(ids, torch.randn(10, 8, device=DEVICE), torch.ones(7, device=DEVICE))
    with pytest.raises(KernelInputError, match="norm_weight must have unit stride"):
        embedding_rmsnorm(ids, torch.randn(10, 8, device=DEVICE), torch.ones(16, device=DEVICE)[::2])


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(KernelInputError, match="TRITON_INTERPRET=1"):
        embedding(torch.tensor([[0, 1]]), torch.randn(10, 8))


def _tables(vocab: int, dim: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.randn(vocab, dim, device=DEVICE, dtype=dtype, requires_grad=True)
    norm_weight = (1 + 0.3 * torch.randn(dim, device=DEVICE)).to(dtype).requires_grad_()
    return weight, norm_weight


def test_a_row_of_one_token_gets_its_residual_gradient_exactly():
    """With no gradient through the norm, dweight is the summed residual gradient: a 0/1 matmul, fp32 sums."""
    ids = _ids(300, (2, 150))
    weight, norm_weight = _tables(300, 40, torch.bfloat16)
    grad_x = torch.randn(2, 150, 40, device=DEVICE, dtype=torch.bfloat16)
    x, _ = embedding_rmsnorm(ids, weight, norm_weight)
    x.backward(grad_x)
    single = (torch.bincount(ids.flatten(), minlength=300) == 1).nonzero().flatten()
    position = {int(i): p for p, i in enumerate(ids.flatten().tolist())}
    assert len(single) > 10
    for row in single.tolist():
        assert torch.equal(weight.grad[row], grad_x.reshape(-1, 40)[position[row]])
    assert norm_weight.grad is not None and not norm_weight.grad.any()


# ---------------------------------------------------------------------------------------------- the custom ops
def _op_inputs(vocab=37, dim=24, shape=(3, 13)):
    weight, norm_weight = _tables(vocab, dim)
    return _ids(vocab, shape), weight, norm_weight, 1e-5


def test_fake_outputs_have_the_real_layout():
    """The fake implementations are what torch.compile plans the graph with."""
    ids, weight, norm_weight, eps = _op_inputs()
    with torch.no_grad():
        real = embedding_rmsnorm_fwd(ids, weight, norm_weight, eps)
        real_grads = embedding_rmsnorm_bwd(real[2], torch.randn_like(real[0]), torch.randn_like(real[1]), weight,
                                           norm_weight, eps)
    with torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        fake = embedding_rmsnorm_fwd(ids, weight, norm_weight, eps)
        fake_grads = embedding_rmsnorm_bwd(fake[2], torch.empty_like(real[0]), torch.empty_like(real[1]), weight,
                                           norm_weight, eps)
    assert [t.shape for t in fake] == [(3, 13, 24), (3, 13, 24), (3 * 13,)]
    for got, want in zip((*fake, *fake_grads), (*real, *real_grads)):
        assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, want.device)


def test_forward_op_passes_opcheck():
    # opcheck also runs the op under aot_autograd and compares its outputs and gradients with eager.
    torch.library.opcheck(embedding_rmsnorm_fwd, _op_inputs())


def test_backward_op_passes_opcheck():
    ids, weight, norm_weight, eps = _op_inputs()
    weight, norm_weight = weight.detach(), norm_weight.detach()
    x, y, keys = embedding_rmsnorm_fwd(ids, weight, norm_weight, eps)
    torch.library.opcheck(embedding_rmsnorm_bwd, (keys, torch.randn_like(x), torch.randn_like(y), weight,
                                                  norm_weight, eps))


def test_embedding_rmsnorm_compiles_without_graph_breaks():
    ids, weight, norm_weight, eps = _op_inputs()
    compiled = torch.compile(embedding_rmsnorm, backend="aot_eager", fullgraph=True)
    results = []
    for fn in (compiled, embedding_rmsnorm):
        x, y = fn(ids, weight, norm_weight, eps)
        results.append((x, y, *torch.autograd.grad((x * y).sum(), (weight, norm_weight))))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)
