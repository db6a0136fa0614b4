import contextlib
import sys

import pytest
import torch
import torch.nn.functional as F

from proxycomp.generate import generate, raw_bytes
from proxycomp.model import (
    KVCache,
    ModelConfig,
    ModelConfigError,
    Transformer,
    cu_seqlens,
    document_mask,
    flops_per_symbol,
    rope_angles,
)
from proxycomp.vocab import EOS, RAW_OFFSET, raw_prompt, raw_reply_ids

TINY = dict(vocab_size=330, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=64, max_seq_len=64)


def tiny_model(**overrides) -> Transformer:
    return Transformer(ModelConfig(**{**TINY, **overrides})).eval()


def test_shapes_and_gqa_projection_sizes():
    model = tiny_model()
    ids = torch.randint(0, 330, (3, 10))
    assert model(ids).shape == (3, 10, 330)
    assert model.blocks[0].attn.wk.weight.shape == (2 * 8, 32)  # 2 kv heads of size 8
    assert model.blocks[0].attn.wq.weight.shape == (4 * 8, 32)


def test_gqa_equals_multi_head_attention_with_shared_kv_heads():
    gqa = tiny_model()
    mha = tiny_model(n_kv_heads=4)
    state = gqa.state_dict()
    for i in range(TINY["n_layers"]):
        for name in ("wk", "wv"):
            w = state[f"blocks.{i}.attn.{name}.weight"].view(2, 8, 32)
            state[f"blocks.{i}.attn.{name}.weight"] = w.repeat_interleave(2, dim=0).reshape(32, 32)
    mha.load_state_dict(state)
    ids = torch.randint(0, 330, (2, 12))
    torch.testing.assert_close(gqa(ids), mha(ids))


def test_document_mask_isolates_documents_and_positions_reset():
    model = tiny_model()
    doc_a, doc_b = torch.randint(0, 330, (1, 7)), torch.randint(0, 330, (1, 5))
    doc_ids = torch.tensor([[0] * 7 + [1] * 5])
    positions = torch.cat([torch.arange(7), torch.arange(5)])[None]
    packed = model(torch.cat([doc_a, doc_b], 1), positions, doc_ids)
    other_a = model(torch.cat([torch.randint(0, 330, (1, 7)), doc_b], 1), positions, doc_ids)
    torch.testing.assert_close(packed[:, 7:], other_a[:, 7:])  # B does not see A
    assert not torch.allclose(packed[:, :7], other_a[:, :7])
    # Positions restart at B's first symbol, so B packed after A reads exactly as B alone.
    torch.testing.assert_close(packed[:, 7:], model(doc_b), atol=1e-5, rtol=1e-5)


def test_single_document_mask_matches_plain_causal():
    model = tiny_model()
    ids = torch.randint(0, 330, (2, 9))
    torch.testing.assert_close(model(ids), model(ids, doc_ids=torch.zeros(2, 9, dtype=torch.long)))


def test_document_mask_and_cu_seqlens_on_a_hand_case():
    doc = torch.tensor([[0, 0, 1, 1, 1]])
    mask = document_mask(doc, doc)[0, 0]
    assert mask.tolist()[3] == [False, False, True, True, False]
    bounds, longest = cu_seqlens(torch.tensor([[0, 0, 1], [5, 5, 5]]))
    assert bounds.tolist() == [0, 2, 3, 6] and longest == 3


def test_kv_cache_decoding_matches_full_recompute():
    model = tiny_model()
    ids = torch.randint(0, 330, (2, 11))
    full = model(ids)
    from proxycomp.model import KVCache

    cache = KVCache(model.config, 2, 11, torch.device("cpu"), torch.float32)
    steps = [model(ids[:, :6], cache=cache)]
    for t in range(6, 11):
        steps.append(model(ids[:, t:t + 1], cache=cache))
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_batched_greedy_generation_equals_one_by_one():
    model = tiny_model()
    prompts = [raw_prompt(b"def fib("), raw_prompt(b"x"), raw_prompt(b"import torch\n")]
    batched = generate(model, prompts, 12, temperature=0, stop_ids=())
    for i, prompt in enumerate(prompts):
        alone = generate(model, [prompt], 12, temperature=0, stop_ids=())
        assert batched.ids[i] == alone.ids[0]
        torch.testing.assert_close(torch.tensor(batched.logprobs[i]), torch.tensor(alone.logprobs[0]),
                                   atol=1e-5, rtol=0)


def test_generation_logprobs_are_those_of_the_tempered_softmax():
    model = tiny_model()
    prompt = raw_prompt(b"abc")
    out = generate(model, [prompt], 6, temperature=0.7, top_k=50, seed=3, stop_ids=())
    seq = torch.tensor([prompt + out.ids[0]])
    logp = (model(seq)[0, len(prompt) - 1:-1] / 0.7).log_softmax(-1)
    expected = logp.gather(-1, torch.tensor(out.ids[0])[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(out.logprobs[0]), expected, atol=1e-5, rtol=1e-5)
    again = generate(model, [prompt], 6, temperature=0.7, top_k=50, seed=3, stop_ids=())
    assert again.ids == out.ids  # seeded


def test_top_k_one_and_tiny_top_p_are_greedy():
    model = tiny_model()
    prompt = [raw_prompt(b"hello")]
    greedy = generate(model, prompt, 8, temperature=0, stop_ids=()).ids
    assert generate(model, prompt, 8, temperature=1.0, top_k=1, seed=0, stop_ids=()).ids == greedy
    assert generate(model, prompt, 8, temperature=1.0, top_p=1e-6, seed=0, stop_ids=()).ids == greedy


def test_generation_stops_at_a_stop_id_per_row():
    model = tiny_model()
    prompts = [raw_prompt(b"a"), raw_prompt(b"bcd")]
    free = generate(model, prompts, 10, temperature=0, stop_ids=())
    stop = free.ids[0][2]
    stopped = generate(model, prompts, 10, temperature=0, stop_ids=(stop,))
    for row, out in zip(free.ids, stopped.ids):
        end = row.index(stop) + 1 if stop in row else len(row)
        assert out == row[:end]
    assert len(stopped.ids[0]) <= 3 and len(stopped.logprobs[0]) == len(stopped.ids[0])


def test_checking_for_stops_less_often_changes_nothing(monkeypatch):
    import proxycomp.generate as gen

    model = tiny_model()
    prompts = [raw_prompt(b"a"), raw_prompt(b"bcd"), raw_prompt(b"ef")]
    free = generate(model, prompts, 40, temperature=1.0, seed=1, stop_ids=())
    stops = (free.ids[0][3], free.ids[1][9], free.ids[2][5])  # every row stops early, at different steps
    runs = []
    for every in (1, 16):
        monkeypatch.setattr(gen, "DONE_CHECK_EVERY", every)
        runs.append(generate(model, prompts, 40, temperature=1.0, seed=1, stop_ids=stops))
    assert runs[0].ids == runs[1].ids and runs[0].logprobs == runs[1].logprobs
    assert all(len(ids) < 40 and ids[-1] in stops for ids in runs[0].ids)


def _decode_modes_agree(model, prompts, modes, device, autocast=None, atol=1e-5):
    runs = {}
    for mode in modes:
        with torch.autocast(device, dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            runs[mode] = (generate(model, prompts, 30, temperature=0, stop_ids=(), decode=mode),
                          generate(model, prompts, 30, temperature=1.0, seed=2, stop_ids=(), decode=mode))
    first, *rest = runs.values()
    for other in rest:
        for a, b in zip(first, other):
            assert a.ids == b.ids
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=atol, rtol=0)


def test_fixed_slot_decoding_draws_what_the_growing_cache_draws():
    torch.manual_seed(0)
    model = tiny_model(max_seq_len=128)
    prompts = [raw_prompt(b"def fib(n):"), raw_prompt(b"x"), raw_prompt(b"import torch\n")]  # left padding
    _decode_modes_agree(model, prompts, ("dynamic", "static"), "cpu")
    _decode_modes_agree(model, prompts, ("dynamic", "static"), "cpu", autocast=True, atol=0.1)  # bf16 keys


@pytest.mark.gpu
def test_cuda_graph_decoding_draws_what_eager_decoding_draws():
    torch.manual_seed(0)
    model = tiny_model(max_seq_len=128).cuda()
    prompts = [raw_prompt(b"def fib(n):"), raw_prompt(b"x"), raw_prompt(b"import torch\n")]
    _decode_modes_agree(model, prompts, ("dynamic", "static", "graph"), "cuda", atol=1e-4)
    _decode_modes_agree(model, prompts, ("dynamic", "graph"), "cuda", autocast=True, atol=0.1)


def test_fixed_slot_cache_refuses_what_it_cannot_do():
    model = tiny_model()
    with pytest.raises(ValueError, match="decode must be one of"):
        generate(model, [[1, 2]], 2, decode="fast")
    with pytest.raises(ValueError, match="CUDA device"):
        generate(model, [[1, 2]], 2, decode="graph")
    cache = KVCache(model.config, 1, 8, torch.device("cpu"), torch.float32)
    cache.slot = torch.tensor([0])
    with pytest.raises(ValueError, match="explicit positions"):
        model(torch.tensor([[1]]), cache=cache)
    with pytest.raises(ValueError, match="one symbol per forward"):
        model(torch.tensor([[1, 2]]), torch.tensor([[0, 1]]), cache=cache)


def test_generate_rejects_bad_prompts():
    model = tiny_model()
    with pytest.raises(ValueError, match="prompt ids"):
        generate(model, [[1, 400]], 2)
    with pytest.raises(ValueError, match="empty"):
        generate(model, [[]], 2)


def test_raw_bytes_stops_at_first_non_byte_symbol():
    assert raw_bytes([RAW_OFFSET + 104, RAW_OFFSET + 105, EOS, RAW_OFFSET + 33]) == b"hi"


def test_flops_per_symbol_on_a_hand_computed_config():
    cfg = ModelConfig(vocab_size=100, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1, ffn_hidden=16)
    per_layer = 8 * 8 + 8 * 4 + 8 * 4 + 8 * 8 + 3 * 8 * 16  # q, k, v, o, SwiGLU
    n = 2 * per_layer + 8 * 100  # + output head; the embedding gather is not counted
    assert flops_per_symbol(cfg, 32) == 6 * n + 12 * 2 * 8 * 32


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(attn_backend="xformers"),
         "unknown model.arch.attn_backend 'xformers'; valid: sdpa, triton, flash_attn, flex"),
        (dict(embed_backend="cuda"), "unknown model.arch.embed_backend 'cuda'; valid: torch, triton"),
        (dict(d_model=30), "must be divisible by model.arch.n_heads"),
        (dict(n_kv_heads=3), "multiple of model.arch.n_kv_heads"),
        (dict(n_layers=0), "model.arch.n_layers must be positive"),
    ],
)
def test_config_errors_name_the_field(overrides, message):
    with pytest.raises(ModelConfigError, match=message.replace("(", r"\(")):
        ModelConfig(**{**TINY, **overrides})


def test_missing_triton_kernel_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "proxycomp.kernels.embedding", None)  # makes the import fail
    with pytest.raises(ModelConfigError, match="embed_backend='triton' needs proxycomp.kernels.embedding"):
        tiny_model(embed_backend="triton")
    monkeypatch.setitem(sys.modules, "proxycomp.kernels.attention", None)
    with pytest.raises(ModelConfigError, match="attn_backend='triton' needs proxycomp.kernels.attention"):
        tiny_model(attn_backend="triton")


def test_missing_flash_attn_gives_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    with pytest.raises(ModelConfigError, match="needs the flash-attn package"):
        tiny_model(attn_backend="flash_attn")


@pytest.mark.slow
def test_triton_backends_match_torch_on_packed_documents():
    pytest.importorskip("proxycomp.kernels.attention")
    pytest.importorskip("proxycomp.kernels.embedding")
    reference = tiny_model(d_model=64)  # the kernel takes head sizes from 16 up
    fused = tiny_model(d_model=64, attn_backend="triton", embed_backend="triton")
    fused.load_state_dict(reference.state_dict())
    ids = torch.randint(0, 330, (2, 16))
    doc_ids = torch.tensor([[0] * 9 + [1] * 7, [0] * 16])
    positions = torch.cat([torch.arange(9), torch.arange(7)])[None].repeat(2, 1)
    positions[1] = torch.arange(16)
    out_fused, out_ref = fused(ids, positions, doc_ids), reference(ids, positions, doc_ids)
    torch.testing.assert_close(out_fused, out_ref, atol=2e-4, rtol=2e-4)
    out_fused.square().mean().backward()
    out_ref.square().mean().backward()
    for (name, p_fused), p_ref in zip(fused.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p_fused.grad, p_ref.grad, atol=1e-4, rtol=1e-3, msg=name)


def test_flex_backend_matches_sdpa_on_packed_documents():
    """FlexAttention's block mask keeps the same documents apart (forward only: torch has no flex backward on CPU)."""
    reference = tiny_model()
    flex = tiny_model(attn_backend="flex")
    flex.load_state_dict(reference.state_dict())
    ids = torch.randint(0, 330, (2, 21))
    doc_ids = torch.tensor([[0] * 9 + [1] + [2] * 11, [3] * 21])
    positions = torch.cat([torch.arange(9), torch.arange(1), torch.arange(11)])[None].repeat(2, 1)
    positions[1] = torch.arange(21)
    with torch.no_grad():
        torch.testing.assert_close(flex(ids, positions, doc_ids), reference(ids, positions, doc_ids))
        torch.testing.assert_close(flex(ids), reference(ids))  # no doc_ids: one causal document per row


def test_raw_reply_restriction_never_draws_compressed_ids():
    torch.manual_seed(3)
    model = tiny_model(vocab_size=900)  # raw bytes + a 580-symbol compressed range
    with torch.no_grad():  # make compressed ids the likeliest, so an unrestricted sampler would pick them
        model.head.weight[320:] += 5 * model.head.weight[320:].sign()
    allowed = raw_reply_ids(900)
    out = generate(model, [raw_prompt(b"def f(")] * 4, 40, temperature=1.0, seed=0, allowed_ids=allowed)
    drawn = {i for row in out.ids for i in row}
    assert drawn and drawn <= set(allowed)
    free = generate(model, [raw_prompt(b"def f(")] * 4, 40, temperature=1.0, seed=0)
    assert any(i >= 320 for row in free.ids for i in row)  # the restriction is what kept them out


def test_rope_angles_are_one_opaque_op_in_the_compiled_graph(graph_recorder):
    # Inductor would otherwise fuse cos/sin into every layer's rotation and recompute them per element.
    model = tiny_model()
    ids = torch.randint(0, 330, (2, 12))
    torch.testing.assert_close(torch.compile(model, backend=graph_recorder, fullgraph=True)(ids), model(ids))
    (ops,) = graph_recorder.call_targets()
    assert ops.count("proxycomp.rope_angles.default") == 1
    assert not [op for op in ops if "cos" in op or "sin" in op], ops


def test_rope_angles_match_their_formula():
    positions = torch.tensor([[0, 1, 2, 7], [5, 0, 1, 4000]])
    cos, sin = rope_angles(positions, 8, 1e5)
    inv_freq = 1e5 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angles = positions.double()[..., None] * inv_freq
    assert cos.shape == sin.shape == (2, 4, 4)
    torch.testing.assert_close(cos.double(), angles.cos(), atol=5e-4, rtol=0)  # fp32 angles at position 4000
    torch.testing.assert_close(sin.double(), angles.sin(), atol=5e-4, rtol=0)


# ---------------------------------------------------------------------------------------------- embed_backend="triton"
# Odd sizes: 3 heads of 16, a vocabulary that is no power of two, a sequence that fills no block.
ODD = dict(vocab_size=301, d_model=48, n_layers=2, n_heads=3, n_kv_heads=1, ffn_hidden=80, max_seq_len=64)


def _torch_and_triton_embedding(**overrides) -> tuple[Transformer, Transformer]:
    """Two models with the same fresh random weights, norm weights included (not their initial ones)."""
    reference = Transformer(ModelConfig(**{**ODD, **overrides}))
    with torch.no_grad():
        for p in reference.parameters():
            p.mul_(1 + 0.3 * torch.randn_like(p))
    fused = Transformer(ModelConfig(**{**ODD, **overrides, "embed_backend": "triton"}))
    fused.load_state_dict(reference.state_dict())
    return reference, fused


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_triton_embedding_matches_torch(tied, dtype, tol):
    pytest.importorskip("proxycomp.kernels.embedding")
    models = [m.to(dtype) for m in _torch_and_triton_embedding(tie_embeddings=tied)]
    ids = torch.randint(0, ODD["vocab_size"], (2, 37))
    results = []
    for model in models:
        logits = model(ids)
        F.cross_entropy(logits.flatten(0, 1).float(), ids.roll(-1, 1).flatten()).backward()
        results.append((logits, {name: p.grad for name, p in model.named_parameters()}))
    (logits_ref, grads_ref), (logits, grads) = results
    torch.testing.assert_close(logits, logits_ref, atol=tol, rtol=tol)
    assert grads.keys() == grads_ref.keys()
    for name, grad in grads_ref.items():
        assert grad.abs().sum() > 0, name  # every parameter takes part, so every comparison can fail
        torch.testing.assert_close(grads[name], grad, atol=tol * grad.abs().max().item(), rtol=tol, msg=name)


def test_triton_embedding_decodes_with_the_torch_path():
    pytest.importorskip("proxycomp.kernels.embedding")
    _, model = _torch_and_triton_embedding()
    ids = torch.randint(0, ODD["vocab_size"], (2, 11))
    with torch.no_grad():
        full = model(ids)
        cache = KVCache(model.config, 2, 11, torch.device("cpu"), torch.float32)
        steps = [model(ids[:, :6], cache=cache)] + [model(ids[:, t:t + 1], cache=cache) for t in range(6, 11)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_triton_embedding_is_one_opaque_op_in_the_compiled_graph(aot_graph_recorder):
    """With the triton attention too, as a training run compiles it: one graph, no break, each kernel one op in the
    forward and backward graphs AOTAutograd makes (what Inductor compiles), and loss and gradients equal eager's."""
    pytest.importorskip("proxycomp.kernels.embedding")
    _, model = _torch_and_triton_embedding(attn_backend="triton")
    ids = torch.randint(0, ODD["vocab_size"], (2, 37))
    logits = torch.compile(model, backend=aot_graph_recorder, fullgraph=True)(ids)
    torch.testing.assert_close(logits, model(ids))
    logits.sum().backward()
    forward_ops, backward_ops = aot_graph_recorder.call_targets()
    assert forward_ops.count("proxycomp.embedding_rmsnorm_fwd.default") == 1
    assert forward_ops.count("proxycomp.flash_attn_fwd.default") == ODD["n_layers"]
    assert backward_ops.count("proxycomp.embedding_rmsnorm_bwd.default") == 1
    assert backward_ops.count("proxycomp.flash_attn_bwd.default") == ODD["n_layers"]
    results = []
    for forward in (model, torch.compile(model, backend="aot_eager", fullgraph=True)):
        model.zero_grad()
        loss = F.cross_entropy(forward(ids).flatten(0, 1), ids.roll(-1, 1).flatten())
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss_eager, grads_eager), (loss_compiled, grads_compiled) = results
    torch.testing.assert_close(loss_compiled, loss_eager, atol=1e-6, rtol=1e-6)
    for got, want in zip(grads_compiled, grads_eager):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
