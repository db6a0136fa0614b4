"""embedding_rmsnorm against the float32 reference (outputs, dweight, dnorm_weight), its ops' contracts, and its
autograd.Function against the ops."""
from __future__ import annotations

import re

import pytest
import torch

from proxycomp.kernels import embedding as E
from proxycomp.kernels.embedding import (
    KernelInputError,
    embedding_rmsnorm,
    embedding_rmsnorm_bwd,
    embedding_rmsnorm_fwd,
)
from proxycomp.kernels.reference import embedding_rmsnorm_reference

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]

# (vocab, dim, batch, seq): the small shared vocabulary, and one with an SPM range.
if CUDA:
    CASES = [(320, 1024, 8, 2048), (8512, 1024, 4, 2048), (260, 96, 3, 1001)]
    pytestmark = pytest.mark.gpu
else:
    CASES = [(320, 48, 3, 100), (260, 20, 1, 37)]

# Shapes that reach every branch of the backward, small enough for the interpreter:
# (vocab, dim, tokens, id pattern).
EDGES = {
    "one row, many chunks": (50, 24, 700, "one"),  # the finishing kernel adds slots over > BLOCK_C chunks
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


def _tables(vocab: int, dim: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.randn(vocab, dim, device=DEVICE, dtype=dtype, requires_grad=True)
    norm_weight = (1 + 0.3 * torch.randn(dim, device=DEVICE)).to(dtype).requires_grad_()
    return weight, norm_weight


def _check_embedding_rmsnorm(ids: torch.Tensor, vocab: int, dim: int, dtype: torch.dtype) -> None:
    weight, norm_weight = _tables(vocab, dim, dtype)
    grad_x, grad_y = (torch.randn(*ids.shape, dim, device=DEVICE, dtype=dtype) for _ in range(2))
    x, y = embedding_rmsnorm(ids, weight, norm_weight, 1e-5)
    torch.autograd.backward((x, y), (grad_x, grad_y))
    ref_w, ref_g = (t.detach().float().requires_grad_() for t in (weight, norm_weight))
    rx, ry = embedding_rmsnorm_reference(ids, ref_w, ref_g, 1e-5)
    torch.autograd.backward((rx, ry), (grad_x.float(), grad_y.float()))
    assert x.shape == y.shape == (*ids.shape, dim) and x.dtype == y.dtype == dtype
    assert torch.equal(x.float(), rx)
    tol = TOLERANCE[dtype]
    assert _rel(y, ry) < tol
    assert weight.grad.dtype == dtype and norm_weight.grad.dtype == dtype
    assert _rel(weight.grad, ref_w.grad) < tol
    assert _rel(norm_weight.grad, ref_g.grad) < tol
    unused = torch.bincount(ids.flatten(), minlength=vocab) == 0
    assert (weight.grad[unused] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_embedding_rmsnorm_matches_reference(case, dtype):
    vocab, dim, batch, seq = case
    _check_embedding_rmsnorm(_ids(vocab, (batch, seq)), vocab, dim, dtype)


@pytest.mark.parametrize("edge", EDGES, ids=str)
def test_embedding_rmsnorm_edge_cases(edge):
    vocab, dim, tokens, pattern = EDGES[edge]
    _check_embedding_rmsnorm(_ids(vocab, (tokens,), pattern), vocab, dim, torch.bfloat16)


def test_embedding_rmsnorm_sparse_vocabulary():
    # Unused rows must hold zero sums before the row kernel, or their dweight would not be zero.
    _check_embedding_rmsnorm(_ids(1500, (100,), "uniform"), 1500, 24, torch.float32)


def test_int32_sort_keys(monkeypatch):
    """A vocabulary past int16 keys, shrunk: the interpreter takes over a minute on a 40,000-row table."""
    monkeypatch.setattr(E, "INT16_KEY_ROWS", 64)
    ids = _ids(300, (500,))
    assert embedding_rmsnorm_fwd(ids, *_tables(300, 16), 1e-5)[2].dtype == torch.int32
    _check_embedding_rmsnorm(ids, 300, 16, torch.bfloat16)


@pytest.mark.parametrize("pattern", ["hot", "uniform", "one"])
def test_long_chunks_carry_runs_across_tiles(monkeypatch, pattern):
    """One program per ~1024 sorted tokens: runs go on across many tiles of a chunk."""
    monkeypatch.setattr(E, "TARGET_PROGRAMS", 1)
    assert E._chunk_size(1500, 1) == E.MAX_CHUNK > 8 * E.BLOCK_T
    _check_embedding_rmsnorm(_ids(70, (3, 500), pattern), 70, 48, torch.float32)


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


def test_sort_keys_are_the_narrowest_int():
    ids = torch.tensor([0, 2**15 - 1, 5], device=DEVICE)
    for vocab, key_dtype in ((2**15, torch.int16), (2**15 + 1, torch.int32)):
        keys = embedding_rmsnorm_fwd(ids, torch.randn(vocab, 8, device=DEVICE), torch.ones(8, device=DEVICE), 1e-5)[2]
        assert keys.dtype == key_dtype and torch.equal(keys.long(), ids)


def test_embedding_rmsnorm_keeps_any_id_shape_and_int32():
    weight, norm_weight = _tables(50, 16)
    ids = torch.randint(0, 50, (2, 3, 5), device=DEVICE, dtype=torch.int32)
    x, y = embedding_rmsnorm(ids, weight, norm_weight)
    assert torch.equal(x, weight.detach()[ids.long()]) and y.shape == x.shape


def test_backward_is_deterministic():
    weight, norm_weight = _tables(30, 32)
    ids = _ids(30, (2, 150))
    grads = [torch.randn(2, 150, 32, device=DEVICE) for _ in range(2)]
    first, second = (torch.autograd.grad(embedding_rmsnorm(ids, weight, norm_weight), (weight, norm_weight), grads)
                     for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


# ---------------------------------------------------------------------------------------------- the ops
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
    # Tables that need no gradient: the op alone is not differentiable (the autograd.Function is, tested below).
    ids, weight, norm_weight, eps = _op_inputs()
    torch.library.opcheck(embedding_rmsnorm_fwd, (ids, weight.detach(), norm_weight.detach(), eps))


def test_backward_op_passes_opcheck():
    ids, weight, norm_weight, eps = _op_inputs()
    weight, norm_weight = weight.detach(), norm_weight.detach()
    x, y, keys = embedding_rmsnorm_fwd(ids, weight, norm_weight, eps)
    torch.library.opcheck(embedding_rmsnorm_bwd, (keys, torch.randn_like(x), torch.randn_like(y), weight,
                                                  norm_weight, eps))


def test_eager_calls_skip_the_ops_and_equal_them():
    """Eagerly the autograd.Function launches without the ops' dispatch: the same outputs and gradients as the ops,
    bit for bit; an output left out of the loss adds nothing. The ops alone make outputs that need no gradient."""
    ids, weight, norm_weight, eps = _op_inputs()
    x, y = embedding_rmsnorm(ids, weight, norm_weight, eps)
    assert type(x.grad_fn).__name__ == "_EmbeddingRMSNormBackward"
    op_x, op_y, keys = embedding_rmsnorm_fwd(ids, weight, norm_weight, eps)
    assert not (op_x.requires_grad or op_y.requires_grad)
    grad_y = torch.randn_like(y)
    got = torch.autograd.grad(y, (weight, norm_weight), grad_y)
    want = embedding_rmsnorm_bwd(keys, torch.zeros_like(op_x), grad_y, weight, norm_weight, eps)
    for a, b in zip((x, y, *got), (op_x, op_y, *want)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_compiled_embedding_is_one_op_each_way_and_equals_eager(aot_graph_recorder):
    ids, weight, norm_weight, eps = _op_inputs()
    compiled = torch.compile(embedding_rmsnorm, backend=aot_graph_recorder, fullgraph=True)
    results = []
    for fn in (compiled, embedding_rmsnorm):
        x, y = fn(ids, weight, norm_weight, eps)
        results.append((x, y, *torch.autograd.grad((x * y).sum(), (weight, norm_weight))))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)
    forward_ops, backward_ops = aot_graph_recorder.call_targets()
    assert forward_ops.count("proxycomp.embedding_rmsnorm_fwd.default") == 1
    assert backward_ops.count("proxycomp.embedding_rmsnorm_bwd.default") == 1


# ---------------------------------------------------------------------------------------------- bad inputs
def _inputs(ids=((0, 1),), weight=(10, 8), norm=8, dtype=torch.float32, device=DEVICE):
    ids = torch.tensor(ids, device=device) if not isinstance(ids, torch.Tensor) else ids
    weight = torch.randn(*weight, device=DEVICE, dtype=dtype) if isinstance(weight, tuple) else weight
    return ids, weight, torch.ones(norm, device=DEVICE) if isinstance(norm, int) else norm


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: _inputs(ids=torch.zeros(2, 3, device=DEVICE)), "ids must be int32 or int64"),
        (lambda: _inputs(weight=(10,)), "weight must have shape"),
        (lambda: _inputs(dtype=torch.float64), "dtype torch.float64"),
        (lambda: _inputs(weight=torch.randn(8, 10, device=DEVICE).t()), "weight must have unit stride"),
        (lambda: _inputs(device="meta"), "is on meta"),
        (lambda: _inputs(norm=7), "norm_weight has 7 entries"),
        (lambda: _inputs(norm=torch.ones(16, device=DEVICE)[::2]), "norm_weight must have unit stride"),
        (lambda: _inputs(ids=torch.zeros(2, 0, dtype=torch.long, device=DEVICE)), "ids is empty"),
        (lambda: _inputs(weight=(0, 8)), "weight has no rows"),
    ],
)
def test_bad_inputs_raise(make, message):
    with pytest.raises(KernelInputError, match=message):
        embedding_rmsnorm(*make())


# On the GPU the id range check is a device-side assert (no host sync), which would end the CUDA context.
@pytest.mark.skipif(CUDA, reason="a device-side assert would end the CUDA context of the test session")
@pytest.mark.parametrize("bad, shown", [([[0, 10]], "[0, 10]"), ([[-1, 2]], "[-1, 2]")])
def test_out_of_range_ids_raise(bad, shown):
    with pytest.raises(KernelInputError,
                       match=r"embedding_rmsnorm: ids must lie in \[0, 10\) .*got range " + re.escape(shown)):
        embedding_rmsnorm(*_inputs(ids=bad))


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(KernelInputError, match="TRITON_INTERPRET=1"):
        embedding_rmsnorm(torch.tensor([[0, 1]]), torch.randn(10, 8), torch.ones(8))
