"""flash_attention against the float32 reference: output and dq/dk/dv, odd shapes, GQA, documents.

On the CPU these run under Triton's interpreter at small sizes; with CUDA, `-m gpu` runs the same
checks at full size (S up to 2048, head_dim 64/128).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from proxycomp.kernels import attention
from proxycomp.kernels.attention import (SHORT_TILES, AttentionConfig, KernelInputError, default_config,
                                         document_bounds, flash_attention, with_short_tiles)
from proxycomp.kernels.reference import apply_rope, attention_reference
from proxycomp.model import rope_angles

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
# Relative L2 error vs the float32 reference on the same rounded inputs. float32 on the GPU runs
# tl.dot in tf32.
TOLERANCE = {torch.float32: 5e-3 if CUDA else 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}

# (batch, heads, kv_heads, seq, head_dim, documents)
if CUDA:
    CASES = [
        (2, 8, 2, 2048, 128, "random"),
        (2, 4, 4, 2048, 64, "random"),
        (1, 4, 1, 1000, 128, "none"),
        (2, 4, 2, 1537, 64, "none"),
        (1, 2, 2, 777, 64, "singletons"),
        (1, 2, 1, 2048, 128, "one"),
    ]
    DTYPES = [torch.bfloat16, torch.float16]
    pytestmark = pytest.mark.gpu
else:
    CASES = [
        (1, 2, 1, 37, 16, "none"),
        (2, 4, 2, 100, 32, "random"),
        (1, 2, 2, 129, 64, "random"),
        (1, 3, 1, 65, 16, "singletons"),
        (2, 2, 2, 48, 32, "one"),
    ]
    DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _doc_ids(kind: str, batch: int, seq: int) -> torch.Tensor | None:
    if kind == "none":
        return None
    if kind == "one":
        return torch.full((batch, seq), 7, dtype=torch.int64)
    if kind == "singletons":
        return torch.arange(seq, dtype=torch.int32).expand(batch, seq).contiguous()
    # Random boundaries; ids non-decreasing as packing makes them, with gaps in the id values.
    cuts = torch.rand(batch, seq) < 6.0 / seq
    cuts[:, 0] = False
    return (cuts.cumsum(dim=1) * 3).to(torch.int64)


def _inputs(batch, heads, kv_heads, seq, head_dim, dtype):
    # q arrives as the model makes it: a (B, S, H, D) projection seen as (B, H, S, D).
    q = torch.randn(batch, seq, heads, head_dim, device=DEVICE, dtype=dtype).transpose(1, 2)
    k = torch.randn(batch, seq, kv_heads, head_dim, device=DEVICE, dtype=dtype).transpose(1, 2)
    v = torch.randn(batch, kv_heads, seq, head_dim, device=DEVICE, dtype=dtype)
    return [t.requires_grad_() for t in (q, k, v)]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative L2 error; the floor (0.1 per element) keeps a zero reference (dq of one-token documents)
    from dividing rounding noise by zero."""
    floor = 0.1 * b.numel() ** 0.5
    return ((a.float() - b.float()).norm() / b.float().norm().clamp(min=floor)).item()


def _check_against_reference(q, k, v, doc_ids, causal, tol, rope=None, **kwargs):
    """With rope (cos, sin), q and k are given before RoPE and the reference rotates them in float32."""
    out = flash_attention(q, k, v, doc_ids, causal=causal, rope=rope, **kwargs)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref_in = [t.detach().float().requires_grad_() for t in (q, k, v)]
    rotated = ref_in[:2]
    if rope is not None:
        rotated = [apply_rope(t.transpose(1, 2), *rope).transpose(1, 2) for t in rotated]
    ref = attention_reference(*rotated, ref_in[2], doc_ids=doc_ids, causal=causal)
    ref.backward(grad_out.float())
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all()
    for name, got, want in (("out", out, ref), ("dq", q.grad, ref_in[0].grad), ("dk", k.grad, ref_in[1].grad),
                            ("dv", v.grad, ref_in[2].grad)):
        assert got.shape == want.shape
        err = _rel(got, want)
        assert err < tol, f"{name}: relative error {err:.2e} >= {tol:.0e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_matches_reference(case, dtype):
    batch, heads, kv_heads, seq, head_dim, docs = case
    doc_ids = _doc_ids(docs, batch, seq)
    doc_ids = None if doc_ids is None else doc_ids.to(DEVICE)
    q, k, v = _inputs(batch, heads, kv_heads, seq, head_dim, dtype)
    _check_against_reference(q, k, v, doc_ids, True, TOLERANCE[dtype])


def _rope(batch: int, seq: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's angles at random positions, so that each row and batch has its own (a wrong stride shows)."""
    return rope_angles(torch.randint(0, 5000, (batch, seq), device=DEVICE), head_dim, 1e4)


# The last: whole blocks without documents, the forward's TMA build that Triton 3.6 could not make at 2 stages.
@pytest.mark.parametrize("case", [CASES[1], CASES[3], (2, 4, 2, 2048, 64, "none")] if CUDA else
                         [CASES[1], CASES[2], (1, 2, 1, 64, 32, "none")], ids=lambda c: "-".join(map(str, c)))
def test_rope_is_applied_and_its_gradient_turned_back(case):
    """q and k given before RoPE: the output and the gradients of the unrotated q and k (RoPE's backward in the
    backward kernels' epilogues), in odd shapes, GQA, documents and none."""
    batch, heads, kv_heads, seq, head_dim, docs = case
    doc_ids = _doc_ids(docs, batch, seq)
    doc_ids = None if doc_ids is None else doc_ids.to(DEVICE)
    dtype = torch.bfloat16 if CUDA else torch.float32
    q, k, v = _inputs(batch, heads, kv_heads, seq, head_dim, dtype)
    _check_against_reference(q, k, v, doc_ids, True, TOLERANCE[dtype], rope=_rope(batch, seq, head_dim))


@pytest.mark.parametrize("docs", ["none", "random"])
def test_non_causal(docs):
    batch, heads, kv_heads, seq, head_dim = (1, 4, 2, 1100, 64) if CUDA else (1, 2, 1, 70, 32)
    dtype = torch.bfloat16 if CUDA else torch.float32
    doc_ids = _doc_ids(docs, batch, seq)
    doc_ids = None if doc_ids is None else doc_ids.to(DEVICE)
    _check_against_reference(*_inputs(batch, heads, kv_heads, seq, head_dim, dtype), doc_ids, False, TOLERANCE[dtype])


@pytest.mark.parametrize("tail_first", [True, False], ids=["tail_first", "in_order"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_steps_longer_than_blocks(causal, tail_first):
    """Each pass stepping past its own block (the forward's and dq's key step over their query rows, the dk/dv
    query step over its keys): the diagonal phase, walked before the document bounds are known, then reaches past
    a block's first row or its last key's document, where only the mask may keep it right. In both of the
    forward's phase orders."""
    batch, heads, kv_heads, seq, head_dim = (2, 4, 2, 1100, 64) if CUDA else (2, 2, 1, 83, 16)
    blocks = (64, 128, 4, 2, 32, 64, 64, 128, 4, 2) if CUDA else (8, 32, 4, 1, 8, 32, 8, 32, 4, 1)
    cfg = AttentionConfig(*blocks, fwd_tail_first=tail_first)
    dtype = torch.bfloat16 if CUDA else torch.float32
    for docs in ("random", "singletons"):
        _check_against_reference(*_inputs(batch, heads, kv_heads, seq, head_dim, dtype),
                                 _doc_ids(docs, batch, seq).to(DEVICE), causal, TOLERANCE[dtype], config=cfg)


def test_dkdv_masked_loops_at_their_own_stages():
    """dkdv_masked_stages pipelines only the dk/dv pass's masked loops otherwise (a build choice, on the GPU): the
    gradients stay those of the reference, with documents and RoPE as the model runs them."""
    batch, heads, kv_heads, seq, head_dim = (2, 4, 2, 2048, 64) if CUDA else (1, 2, 1, 70, 32)
    dtype = torch.bfloat16 if CUDA else torch.float32
    cfg = dataclasses.replace(default_config(head_dim, torch.device(DEVICE)), dkdv_masked_stages=1)
    _check_against_reference(*_inputs(batch, heads, kv_heads, seq, head_dim, dtype),
                             _doc_ids("random", batch, seq).to(DEVICE), True, TOLERANCE[dtype],
                             rope=_rope(batch, seq, head_dim), config=cfg)


@pytest.mark.parametrize("tile_group", [2, 5, 64])
def test_each_tile_computed_once_in_any_launch_order(tile_group):
    """tile_group reorders which program takes which (block, row): a group that divides the rows, one that does not
    (the largest divisor below it is taken) and one larger than the grid must still give every tile of every pass to
    exactly one program (a tile no program took would leave its rows of the empty outputs unwritten). GQA: the dk/dv
    pass's rows are the kv heads, fewer than the others'."""
    batch, heads, kv_heads, seq, head_dim = (3, 6, 2, 1100, 64) if CUDA else (3, 2, 1, 70, 16)
    dtype = torch.bfloat16 if CUDA else torch.float32
    cfg = dataclasses.replace(default_config(head_dim, torch.device(DEVICE)), tile_group=tile_group)
    _check_against_reference(*_inputs(batch, heads, kv_heads, seq, head_dim, dtype),
                             _doc_ids("random", batch, seq).to(DEVICE), True, TOLERANCE[dtype],
                             rope=_rope(batch, seq, head_dim), config=cfg)


@pytest.mark.parametrize("rows, tile_group, grid", [(96, 24, (24, 7, 4)), (6, 5, (3, 7, 2)), (6, 64, (6, 7, 1)),
                                                     (7, 5, (7, 7)), (96, 1, (7, 96))])
def test_grid_groups_whole_rows(rows, tile_group, grid):
    """(row in group, block, group): the largest group up to tile_group that divides the rows; (block, row) at 1."""
    assert attention._grid(7, rows, tile_group)[0] == grid


def test_skipping_does_not_change_the_result():
    batch, heads, seq, head_dim = (2, 4, 2048, 64) if CUDA else (1, 2, 90, 16)
    dtype = torch.bfloat16 if CUDA else torch.float32
    doc_ids = _doc_ids("random", batch, seq).to(DEVICE)
    q, k, v = _inputs(batch, heads, heads, seq, head_dim, dtype)
    grad_out = torch.randn(batch, heads, seq, head_dim, device=DEVICE, dtype=dtype)
    results = []
    for skip in (True, False):
        out = flash_attention(q, k, v, doc_ids, skip_masked_blocks=skip)
        results.append((out,) + torch.autograd.grad(out, (q, k, v), grad_out))
    for got, want in zip(*results):
        assert _rel(got, want) < TOLERANCE[dtype] / 4


def test_runs_of_equal_ids_are_documents():
    """Ids that come back to an earlier value start a new document (a run), as document_bounds says."""
    seq = 40
    ids = torch.tensor([[0] * 10 + [1] * 10 + [0] * 10 + [2] * 10])
    start, end = document_bounds(ids)
    assert start[0, 25].item() == 20 and end[0, 25].item() == 30
    q, k, v = _inputs(1, 2, 2, seq, 16, torch.float32)
    _check_against_reference(q, k, v, ids.to(DEVICE), True, TOLERANCE[torch.float32])


def test_softmax_scale_is_applied():
    q, k, v = _inputs(1, 2, 1, 33, 16, torch.float32)
    out = flash_attention(q, k, v, softmax_scale=0.37)
    ref = attention_reference(q.float(), k.float(), v.float(), softmax_scale=0.37)
    assert _rel(out, ref) < TOLERANCE[torch.float32]


def test_output_merges_heads_without_copy():
    q, k, v = _inputs(2, 2, 2, 20, 16, torch.float32)
    out = flash_attention(q, k, v)
    assert out.transpose(1, 2).is_contiguous()


# ---------------------------------------------------------------------------------------------- TMA loads
def _layouts(batch, heads, kv_heads, seq, head_dim, dtype):
    """q, k, v in the layouts TMA reads: the model's (B, S, H, D) projections seen as (B, H, S, D), a fused
    (B, S, 3, H, D) projection's slices, and contiguous (B, H, S, D)."""
    new = dict(device=DEVICE, dtype=dtype)
    fused = torch.randn(batch, seq, 3, heads, head_dim, **new)
    return {"model": _inputs(batch, heads, kv_heads, seq, head_dim, dtype),
            "fused qkv": [fused[:, :, i].transpose(1, 2) for i in range(3)],
            "contiguous": [torch.randn(batch, h, seq, head_dim, **new) for h in (heads, kv_heads, kv_heads)]}


@pytest.mark.parametrize("layout", ["model", "fused qkv", "contiguous"])
def test_tma_forward_equals_pointer_forward(layout, monkeypatch):
    """Where the inputs allow TMA the forward loads through descriptors (counted here), and its results equal the
    pointer path's, which the reference checks above cover; with tma off no descriptor is made."""
    batch, heads, kv_heads, seq, head_dim = (2, 4, 2, 1024, 64) if CUDA else (2, 2, 1, 64, 16)
    dtype = torch.bfloat16 if CUDA else torch.float32
    q, k, v = (t.detach().requires_grad_() for t in _layouts(batch, heads, kv_heads, seq, head_dim, dtype)[layout])
    doc_ids = _doc_ids("random", batch, seq).to(DEVICE)
    grad_out = torch.randn(batch, heads, seq, head_dim, device=DEVICE, dtype=dtype)
    made = []
    real = attention._descriptor
    monkeypatch.setattr(attention, "_descriptor", lambda t, block: made.append(block) or real(t, block))
    results = []
    for tma in (True, False):
        made.clear()
        cfg = dataclasses.replace(default_config(head_dim, q.device), tma=tma)
        out = flash_attention(q, k, v, doc_ids, config=cfg)
        results.append((out, *torch.autograd.grad(out, (q, k, v), grad_out)))
        assert bool(made) == tma
    for got, want in zip(*results):
        assert _rel(got, want) < 1e-6


def test_tma_takes_only_layouts_it_reads_whole():
    """Descriptors only where every block stays inside its (b, h) slice and the slice is one run of rows: else the
    pointers, whose masks keep a block past S from reading the next slice."""
    blocks = (64, 64)
    base = _layouts(2, 4, 4, 128, 64, torch.float32)
    for layout, (q, _, _) in base.items():
        assert attention._tma_layout(q.detach(), blocks), layout
    odd = torch.randn(2, 100, 4, 64).transpose(1, 2)  # 100 positions: the last block would cross S
    seq_first = torch.randn(128, 2, 4, 64).permute(1, 2, 0, 3)  # batch stride not a whole number of rows
    unaligned = torch.randn(2 * 128 * 4 * 64 + 1)[1:].view(2, 128, 4, 64).transpose(1, 2)
    for t in (odd, seq_first, unaligned):
        assert not attention._tma_layout(t, blocks)
    cfg = default_config(64, torch.device("cpu"))
    assert attention._descriptors(cfg, (base["model"][0].detach(), 32), (odd, 16)) == [None, None]


# ---------------------------------------------------------------------------------------------- short documents
def _short_and_long_doc_ids(batch: int, seq: int, long: int) -> torch.Tensor:
    """Per row, a document of `long` positions at a random offset among documents of 1-9 positions (so lengths of
    1 among them), different in every row."""
    rows = []
    for _ in range(batch):
        lengths, at = [], int(torch.randint(0, seq - long, ()))
        while sum(lengths) < at:
            lengths.append(int(torch.randint(1, 10, ())))
        lengths.append(long)
        while sum(lengths) < seq:
            lengths.append(int(torch.randint(1, 10, ())))
        rows.append(torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))[:seq])
    return torch.stack(rows)


def _tile_spans(doc_ids: torch.Tensor, tile: int) -> torch.Tensor:
    """The keys each query tile of `tile` rows would walk (causal): what the launcher splits long from short by."""
    start = document_bounds(doc_ids)[0].long()
    first = torch.arange(0, doc_ids.shape[1], tile)
    last = (first + tile).clamp(max=doc_ids.shape[1])
    return last - start[:, first]


def _short_config(head_dim):
    """The default config with its short-document tiles on (the GPU default leaves them off at head size 64)."""
    return with_short_tiles(default_config(head_dim, torch.device(DEVICE)), head_dim)


def test_short_tiles_turn_on_once_and_by_head_size():
    cpu = default_config(64, torch.device("cpu"))
    assert cpu.short_span and with_short_tiles(cpu, 64) is cpu  # a config's own short tiles are kept
    for head_dim, size in ((32, 64), (64, 64), (96, 128), (128, 128)):
        on = with_short_tiles(dataclasses.replace(cpu, short_span=0), head_dim)
        assert (on.short_span, on.short_block, on.short_step) == tuple(SHORT_TILES[size].values())


# (batch, heads, kv_heads, seq, head_dim, long document, config changes)
SHORT_CASES = [
    (2, 2, 1, 120, 16, 50, {}),  # long and short tiles in one row
    (1, 2, 1, 97, 64, 5, dict(short_span=10**6, short_step=8)),  # every tile short, a step below the block
    (1, 3, 3, 61, 16, 33, dict(short_block=8, short_step=16)),
] if not CUDA else [
    (2, 8, 2, 4096, 128, 1500, {}),
    (2, 12, 12, 4096, 64, 2000, {}),
    (1, 4, 4, 3001, 64, 100, dict(short_span=10**6)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16] if not CUDA else [torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", SHORT_CASES, ids=lambda c: "-".join(map(str, c[:6])))
def test_short_document_tiles_match_reference(case, dtype):
    batch, heads, kv_heads, seq, head_dim, long, changes = case
    cfg = dataclasses.replace(_short_config(head_dim), **changes)
    doc_ids = _short_and_long_doc_ids(batch, seq, long)
    spans = _tile_spans(doc_ids, cfg.fwd_block_m)
    assert (spans <= cfg.short_span).any(), "no tile takes the short launch"
    if not changes:
        assert (spans > cfg.short_span).any(), "no tile takes the long launch"
    q, k, v = _inputs(batch, heads, kv_heads, seq, head_dim, dtype)
    _check_against_reference(q, k, v, doc_ids.to(DEVICE), True, TOLERANCE[dtype], config=cfg)


def test_short_document_tiles_non_causal():
    cfg = _short_config(32)
    seq = 70 if not CUDA else 1100
    doc_ids = _short_and_long_doc_ids(1, seq, seq // 2)
    dtype = torch.float32 if not CUDA else torch.bfloat16
    _check_against_reference(*_inputs(1, 2, 1, seq, 32, dtype), doc_ids.to(DEVICE), False, TOLERANCE[dtype],
                             config=cfg)


def test_short_tiles_equal_the_single_launch():
    """The same documents with the short launch off: only the tile shapes differ, so the results agree to rounding."""
    batch, heads, seq, head_dim = (2, 2, 90, 16) if not CUDA else (2, 8, 2048, 64)
    dtype = torch.float32 if not CUDA else torch.bfloat16
    cfg = _short_config(head_dim)
    doc_ids = _short_and_long_doc_ids(batch, seq, seq // 3).to(DEVICE)
    q, k, v = _inputs(batch, heads, heads, seq, head_dim, dtype)
    grad_out = torch.randn(batch, heads, seq, head_dim, device=DEVICE, dtype=dtype)
    results = []
    for config in (cfg, dataclasses.replace(cfg, short_span=0)):
        out = flash_attention(q, k, v, doc_ids, config=config)
        results.append((out,) + torch.autograd.grad(out, (q, k, v), grad_out))
    for got, want in zip(*results):
        assert _rel(got, want) < TOLERANCE[dtype] / 4


@pytest.mark.parametrize("changes", [dict(short_block=24), dict(short_block=128), dict(short_step=0)])
def test_short_blocks_must_split_the_tiles(changes):
    cfg = dataclasses.replace(_short_config(16), **changes)
    with pytest.raises(KernelInputError, match="short_block"):
        flash_attention(*_qkv(), torch.zeros(1, 16, dtype=torch.int64, device=DEVICE), config=cfg)


def test_tile_group_must_be_positive():
    cfg = dataclasses.replace(default_config(16, torch.device(DEVICE)), tile_group=0)
    with pytest.raises(KernelInputError, match="tile_group must be at least 1"):
        flash_attention(*_qkv(), config=cfg)


def test_dkdv_masked_stages_must_not_be_negative():
    cfg = dataclasses.replace(default_config(16, torch.device(DEVICE)), dkdv_masked_stages=-1)
    with pytest.raises(KernelInputError, match="dkdv_masked_stages must be 0"):
        flash_attention(*_qkv(), config=cfg)


# ---------------------------------------------------------------------------------------------- errors
def _qkv(heads=2, kv_heads=2, seq=16, dim=16, dtype=torch.float32):
    return (torch.randn(1, heads, seq, dim, device=DEVICE, dtype=dtype),
            torch.randn(1, kv_heads, seq, dim, device=DEVICE, dtype=dtype),
            torch.randn(1, kv_heads, seq, dim, device=DEVICE, dtype=dtype))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: (*_qkv(dtype=torch.float64), None), "dtype torch.float64"),
        (lambda: (_qkv()[0][0], *_qkv()[1:], None), "must have shape"),
        (lambda: (*_qkv(heads=3, kv_heads=2), None), "not a multiple"),
        (lambda: (*_qkv(dim=24), None), "head_dim 24"),
        (lambda: (_qkv()[0].half(), *_qkv()[1:], None), "share one dtype"),
        (lambda: (_qkv()[0], _qkv(seq=17)[1], _qkv()[2], None), "same shape"),
        (lambda: (_qkv()[0], _qkv(seq=17)[1], _qkv(seq=17)[2], None), "does not match"),
        (lambda: (_qkv()[0].transpose(2, 3), *_qkv()[1:], None), "unit stride"),
        (lambda: (*_qkv(), torch.zeros(1, 15, dtype=torch.int64, device=DEVICE)), "doc_ids must have shape"),
        (lambda: (*_qkv(), torch.zeros(1, 16, device=DEVICE)), "doc_ids must be int32 or int64"),
        (lambda: (*_qkv(), torch.zeros(1, 16, dtype=torch.int64, device="meta")), "doc_ids is on meta"),
    ],
)
def test_bad_inputs_raise(make, message):
    q, k, v, doc_ids = make()
    with pytest.raises(KernelInputError, match=message):
        flash_attention(q, k, v, doc_ids)


@pytest.mark.parametrize(
    "change",
    [lambda c: c[:, :, :4], lambda c: c.double(), lambda c: c[:, :15], lambda c: c.new_empty(1, 16, 16)[:, :, :8]
     .copy_(c), lambda c: c.expand(2, -1, -1)],
    ids=["half width", "float64", "short", "other strides than cos", "batch"],
)
def test_bad_rope_angles_raise(change):
    cos, sin = _rope(1, 16, 16)
    with pytest.raises(KernelInputError, match="rope's sin must be float32 of shape"):
        flash_attention(*_qkv(), rope=(cos, change(sin)))


@pytest.mark.parametrize("scale", [0.0, -0.5, float("nan")])
def test_non_positive_softmax_scale_raises(scale):
    with pytest.raises(KernelInputError, match="softmax_scale must be positive"):
        flash_attention(*_qkv(), softmax_scale=scale)


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = (torch.randn(1, 2, 16, 16) for _ in range(3))
    with pytest.raises(KernelInputError, match="TRITON_INTERPRET=1"):
        flash_attention(q, k, v)
