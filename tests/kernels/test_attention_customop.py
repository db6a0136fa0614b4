"""The flash attention's ops and the autograd.Function over them: op contracts (opcheck), the eager path against the
ops, the compiled graphs, precomputed document bounds, and a compiled model with the triton backend in one graph
whose loss and gradients equal eager's.

CPU runs use Triton's interpreter at small sizes.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from proxycomp.kernels.attention import (
    KernelInputError,
    default_config,
    document_bounds,
    flash_attention,
    flash_attn_bwd,
    flash_attn_fwd,
)
from proxycomp.model import ModelConfig, Transformer, rope_angles

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# head_dim 16: the smallest the kernel takes. (batch, heads, kv_heads, seq)
SHAPES = [(2, 4, 2, 37), (1, 2, 2, 50)]
TINY = dict(vocab_size=330, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=96, max_seq_len=64)


def _qkv(batch, heads, kv_heads, seq, requires_grad=True):
    # q and k arrive as the model makes them: (B, S, H, D) projections seen as (B, H, S, D).
    q = torch.randn(batch, seq, heads, 16, device=DEVICE).transpose(1, 2)
    k = torch.randn(batch, seq, kv_heads, 16, device=DEVICE).transpose(1, 2)
    v = torch.randn(batch, kv_heads, seq, 16, device=DEVICE)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def _random_doc_ids(batch, seq):
    """Non-decreasing ids with a few random boundaries per row, as packing makes them."""
    cuts = torch.rand(batch, seq) < 4.0 / seq
    cuts[:, 0] = False
    return cuts.cumsum(dim=1).to(DEVICE)


def _angles(q):
    """RoPE's cos and sin (B, S, D/2) at random positions."""
    return rope_angles(torch.randint(0, 500, (q.shape[0], q.shape[2]), device=DEVICE), q.shape[-1], 1e4)


def _op_args(q, docs, causal=True, scale=0.3, skip=True):
    bounds = document_bounds(_random_doc_ids(q.shape[0], q.shape[2])) if docs else (None, None)
    return (*bounds, causal, scale, skip, default_config(16, q.device).ints())


@pytest.mark.parametrize("docs", [False, True], ids=["causal", "docs"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_forward_op_passes_opcheck(shape, docs):
    # Inputs that need no gradient: the op alone is not differentiable (the autograd.Function is, tested below).
    q, k, v = _qkv(*shape, requires_grad=False)
    angles = _angles(q) if docs else (None, None)
    torch.library.opcheck(flash_attn_fwd, (q, k, v, *angles, *_op_args(q, docs)))


@pytest.mark.parametrize("docs", [False, True], ids=["causal", "docs and rope"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_backward_op_passes_opcheck(shape, docs):
    q, k, v = _qkv(*shape, requires_grad=False)
    args = _op_args(q, docs, causal=False)
    angles = _angles(q) if docs else (None, None)
    o, lse, q_rotated = flash_attn_fwd(q, k, v, *angles, *args)
    q = q_rotated if docs else q
    torch.library.opcheck(flash_attn_bwd, (torch.randn_like(o), q, k, v, o, lse, *angles, *args))


def test_fake_outputs_have_the_real_layout():
    q, k, v = _qkv(2, 4, 2, 37)
    args = _op_args(q, True)
    angles = _angles(q)
    real = flash_attn_fwd(q, k, v, *angles, *args)
    real_grads = flash_attn_bwd(torch.randn_like(real[0]), real[2], k, v, *real[:2], *angles, *args)
    with torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
        fake = flash_attn_fwd(q, k, v, *angles, *args)
        fake_grads = flash_attn_bwd(torch.empty_like(real[0]), fake[2], k, v, *fake[:2], *angles, *args)
    for got, want in zip((*fake, *fake_grads), (*real, *real_grads)):
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)


def test_precomputed_document_bounds_equal_doc_ids():
    q, k, v = _qkv(2, 4, 2, 45)
    doc_ids = _random_doc_ids(2, 45)
    grad_out = torch.randn(q.shape, device=DEVICE)
    results = []
    for kwargs in (dict(doc_ids=doc_ids), dict(doc_bounds=document_bounds(doc_ids))):
        out = flash_attention(q, k, v, **kwargs)
        results.append((out, *torch.autograd.grad(out, (q, k, v), grad_out)))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_eager_calls_skip_the_ops_and_equal_them():
    """Outside torch.compile the autograd.Function launches without the ops' dispatch (host cost), with the same
    launches: outputs and gradients equal the ops' bit for bit. The ops alone make outputs that need no gradient."""
    q, k, v = _qkv(2, 4, 2, 37)
    args = _op_args(q, True)
    grad_out = torch.randn(q.shape, device=DEVICE)
    eager = flash_attention(q, k, v, doc_bounds=args[:2], softmax_scale=args[3])
    assert type(eager.grad_fn).__name__ == "_AttentionBackward"
    o, lse, _ = flash_attn_fwd(q, k, v, None, None, *args)
    assert not o.requires_grad and not lse.requires_grad
    for got, want in zip((eager, *torch.autograd.grad(eager, (q, k, v), grad_out)),
                         (o, *flash_attn_bwd(grad_out, q, k, v, o, lse, None, None, *args))):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("docs", [False, True], ids=["causal", "docs and rope"])
def test_compiled_attention_is_one_op_each_way_and_equals_eager(aot_graph_recorder, docs):
    """With RoPE, its rotation is traced into the forward graph (for the compiler to fuse) and its backward is the
    backward op's: the backward graph holds nothing else."""
    q, k, v = _qkv(1, 2, 1, 33)
    doc_ids = _random_doc_ids(1, 33) if docs else None
    rope = _angles(q) if docs else None
    grad_out = torch.randn(q.shape, device=DEVICE)
    compiled = torch.compile(flash_attention, backend=aot_graph_recorder, fullgraph=True)
    results = [(out, *torch.autograd.grad(out, (q, k, v), grad_out))
               for out in (compiled(q, k, v, doc_ids, rope=rope), flash_attention(q, k, v, doc_ids, rope=rope))]
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    forward_ops, backward_ops = aot_graph_recorder.call_targets()
    assert forward_ops.count("proxycomp.flash_attn_fwd.default") == 1
    assert [op for op in backward_ops if "getitem" not in op] == ["proxycomp.flash_attn_bwd.default"]


def _bounds(batch=1, seq=16):
    return document_bounds(torch.zeros(batch, seq, dtype=torch.int64, device=DEVICE))


@pytest.mark.parametrize(
    "make_bounds, message",
    [
        (lambda: tuple(b.long() for b in _bounds()), "must be a contiguous int32"),
        (lambda: _bounds(seq=15), "must be a contiguous int32"),
        (lambda: tuple(b.t().contiguous().t() for b in _bounds(batch=2)), "must be a contiguous int32"),
        (lambda: tuple(b.to("meta") for b in _bounds()), "doc_start is on meta"),
    ],
)
def test_bad_doc_bounds_raise(make_bounds, message):
    bounds = make_bounds()
    q, k, v = _qkv(bounds[0].shape[0], 2, 2, 16, requires_grad=False)
    with pytest.raises(KernelInputError, match=message):
        flash_attention(q, k, v, doc_bounds=bounds)


def test_doc_ids_and_doc_bounds_together_raise():
    q, k, v = _qkv(1, 2, 2, 16, requires_grad=False)
    doc_ids = torch.zeros(1, 16, dtype=torch.int64, device=DEVICE)
    with pytest.raises(KernelInputError, match="not both"):
        flash_attention(q, k, v, doc_ids, doc_bounds=document_bounds(doc_ids))


# ---------------------------------------------------------------------------------------------- the model
def _model_and_batch():
    model = Transformer(ModelConfig(**TINY, attn_backend="triton")).to(DEVICE)
    ids = torch.randint(0, TINY["vocab_size"], (2, 41), device=DEVICE)
    doc_ids = torch.tensor([[0] * 17 + [1] * 9 + [2] * 15, [0] * 41], device=DEVICE)
    positions = torch.cat([torch.arange(17), torch.arange(9), torch.arange(15)]).to(DEVICE)
    return model, (ids, torch.stack([positions, torch.arange(41, device=DEVICE)]), doc_ids)


def _loss_and_grads(model, forward, batch):
    model.zero_grad()
    logits = forward(*batch)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[0].roll(-1, dims=1).flatten())
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def _assert_compiled_matches_eager(model, compiled, batch, tol):
    loss_eager, grads_eager = _loss_and_grads(model, model, batch)
    loss_compiled, grads_compiled = _loss_and_grads(model, compiled, batch)
    torch.testing.assert_close(loss_compiled, loss_eager, rtol=tol, atol=tol)
    assert grads_compiled.keys() == grads_eager.keys()
    for name, grad in grads_eager.items():
        assert grad.abs().sum() > 0, name  # every parameter takes part, so every comparison can fail
        torch.testing.assert_close(grads_compiled[name], grad, rtol=tol, atol=tol, msg=name)


def test_compiled_model_is_one_graph():
    """Every layer's attention and the RoPE angles (an opaque op, see model.rope_angles) inside one graph."""
    torch._dynamo.reset()
    model, batch = _model_and_batch()
    explanation = torch._dynamo.explain(model)(*batch)
    assert explanation.graph_break_count == 0, [str(r.reason) for r in explanation.break_reasons]
    assert explanation.graph_count == 1


def test_compiled_model_in_fullgraph_mode_matches_eager():
    torch._dynamo.reset()
    model, batch = _model_and_batch()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    _assert_compiled_matches_eager(model, compiled, batch, tol=1e-6)


@pytest.mark.slow
def test_inductor_compiled_model_matches_eager():
    """Inductor (a C++ compiler on the CPU) around the opaque attention and RoPE-angle ops."""
    torch._dynamo.reset()
    model, batch = _model_and_batch()
    _assert_compiled_matches_eager(model, torch.compile(model), batch, tol=1e-5)
