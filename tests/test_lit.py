import copy
import math

import lightning as L
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from proxycomp.checkpoint import AtomicCheckpointIO, CheckpointError, load_lm
from proxycomp.lit import OptimConfig, ProxyLM, warmup_cosine
from proxycomp.losses import restricted_nats, symbol_nats
from proxycomp.model import ModelConfig, ModelConfigError
from proxycomp.scoring import score_documents, sliding_windows
from proxycomp.views import RawView
from proxycomp.vocab import BOS, EOS, RAW_OFFSET, SENTINELS, Vocabulary, is_raw_byte, raw_reply_ids

VOCAB = Vocabulary((("spm", 16),))
SEQ = 32
ARCH = dict(vocab_size=VOCAB.size, d_model=32, n_layers=1, n_heads=2, ffn_hidden=64, max_seq_len=SEQ)


def tiny_lm(compile: bool = False, compile_mode: str = "default", **arch) -> ProxyLM:
    return ProxyLM(ModelConfig(**{**ARCH, **arch}), OptimConfig(warmup_steps=2, lr=3e-3), compile, compile_mode,
                   VOCAB.to_dict())


class PackedWindows(Dataset):
    """Windows honouring the batch contract: raw and spm documents packed with doc ids and positions."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.seed = n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1000 + i)
        symbols, docs, positions = [], [], []
        while len(symbols) < SEQ + 1:
            view = "raw" if torch.rand((), generator=g) < 0.5 else "spm"
            lo, hi = (RAW_OFFSET, RAW_OFFSET + 256) if view == "raw" else (VOCAB.offset("spm"), VOCAB.size)
            body = torch.randint(lo, hi, (int(torch.randint(3, 12, (), generator=g)),), generator=g).tolist()
            doc = [BOS, SENTINELS[view][0], *body, SENTINELS[view][1], EOS]
            symbols += doc
            docs += [len(set(docs))] * len(doc)
            positions += list(range(len(doc)))
        inputs, targets = torch.tensor(symbols[:SEQ]), torch.tensor(symbols[1:SEQ + 1])
        doc_ids = torch.tensor(docs[:SEQ], dtype=torch.int32)
        # No prediction across a document boundary.
        targets[:-1][doc_ids[1:] != doc_ids[:-1]] = -100
        return {"input_ids": inputs, "targets": targets, "doc_ids": doc_ids,
                "positions": torch.tensor(positions[:SEQ], dtype=torch.int32)}


class SyntheticData(L.LightningDataModule):
    """Train windows in a fixed order; its state is how many were consumed, so a resumed run goes on from there."""

    def __init__(self, batch_size: int = 2) -> None:
        super().__init__()
        self.batch_size, self.start = batch_size, 0

    def train_dataloader(self):
        windows = PackedWindows(1000, seed=1)
        # Pinned on a GPU, as the real data module's: a pageable batch's copy to the device waits for the GPU.
        return DataLoader(windows, batch_size=self.batch_size, sampler=range(self.start, len(windows)),
                          pin_memory=torch.cuda.is_available())

    def val_dataloader(self):
        return DataLoader(PackedWindows(2, seed=2), batch_size=2)

    def state_dict(self) -> dict:
        return {"consumed": self.trainer.global_step * self.batch_size}

    def load_state_dict(self, state: dict) -> None:
        self.start = state["consumed"]


def quiet_trainer(**kwargs) -> L.Trainer:
    defaults = dict(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0)
    return L.Trainer(**{**defaults, **kwargs})


class StopAfter(L.Callback):
    """Interrupts a run after `steps` optimizer steps, leaving its schedule (max_steps) untouched."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        trainer.should_stop = trainer.global_step >= self.steps


class LossRecorder(L.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def test_warmup_cosine_schedule():
    assert warmup_cosine(0, 4, 100, 0.1) == pytest.approx(0.25)
    assert warmup_cosine(3, 4, 100, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(4, 4, 100, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(52, 4, 100, 0.1) == pytest.approx(0.55)
    assert warmup_cosine(100, 4, 100, 0.1) == pytest.approx(0.1)


def test_loss_is_logged_per_vocabulary_range():
    lm = tiny_lm()
    before = copy.deepcopy(lm.model)
    data = SyntheticData()
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(lm, data)
    batch = next(iter(data.train_dataloader()))
    targets = batch["targets"].flatten()
    nats = symbol_nats(before(batch["input_ids"], batch["positions"], batch["doc_ids"]), batch["targets"]).detach()
    groups = {"raw": (targets >= 64) & (targets < 320), "spm": targets >= 320,
              "special": (targets >= 0) & (targets < 64)}
    logged = trainer.logged_metrics
    for name, mask in groups.items():
        assert mask.any()
        assert float(logged[f"train/loss_{name}"]) == pytest.approx(float(nats[mask].mean()), rel=1e-5)
    assert float(logged["train/loss"]) == pytest.approx(float(nats[targets != -100].mean()), rel=1e-5)


def test_per_view_and_throughput_figures_are_logged_only_on_the_steps_lightning_writes(monkeypatch):
    """Lightning keeps a training step's logged values only every log_every_n_steps, and each self.log costs host time:
    the per-view losses and throughput are logged on those steps and the last, the loss on every step."""
    lm, logged = tiny_lm(), []
    original = ProxyLM.log

    def log(self, name, value, *args, **kwargs):
        logged.append((self.global_step + 1, name))
        return original(self, name, value, *args, **kwargs)

    monkeypatch.setattr(ProxyLM, "log", log)
    quiet_trainer(max_steps=7, log_every_n_steps=3).fit(lm, SyntheticData())
    steps = {name: [step for step, n in logged if n == name] for _, name in logged}
    assert steps["train/loss"] == list(range(1, 8))
    assert steps["train/loss_raw"] == steps["train/loss_spm"] == [3, 6, 7]
    assert steps["perf/symbols_per_s"] == [3, 6, 7]  # from the second step on: a rate needs a step before it


def test_the_masked_twin_trains_on_the_proxy_loss_restricted_to_raw_targets():
    twin = ProxyLM(ModelConfig(**ARCH), OptimConfig(warmup_steps=2, lr=3e-3), vocabulary=VOCAB.to_dict(),
                   loss_targets="raw")
    before = copy.deepcopy(twin.model)
    data, losses = SyntheticData(), LossRecorder()
    trainer = quiet_trainer(max_steps=1, callbacks=[losses])
    trainer.fit(twin, data)
    batch = next(iter(data.train_dataloader()))
    targets = batch["targets"].flatten()
    nats = symbol_nats(before(batch["input_ids"], batch["positions"], batch["doc_ids"]), batch["targets"]).detach()
    raw, spm = is_raw_byte(targets), targets >= VOCAB.offset("spm")
    assert raw.any() and spm.any()
    # the proxy arm's loss on the same batch, restricted to raw-byte targets, is what the twin trains on
    assert losses.losses[0] == pytest.approx(float(nats[raw].mean()), rel=1e-5)
    logged = trainer.logged_metrics
    assert float(logged["train/loss"]) == pytest.approx(float(nats[raw].mean()), rel=1e-5)
    assert float(logged["train/loss_spm"]) == pytest.approx(float(nats[spm].mean()), rel=1e-5)  # scored, untrained
    with pytest.raises(ModelConfigError, match="loss_targets must be one of all, raw"):
        ProxyLM(ModelConfig(**ARCH), vocabulary=VOCAB.to_dict(), loss_targets="spm")


def test_throughput_is_logged_as_host_tensors(monkeypatch):
    """A Python number passed to self.log becomes a device tensor by a blocking copy (a GPU sync every step)."""
    lm = tiny_lm()
    logged: dict[str, object] = {}
    monkeypatch.setattr(lm, "log", lambda name, value, **kwargs: logged.__setitem__(name, value))
    lm._log_throughput(64)
    assert not logged  # the first step has no previous step to time against
    lm._log_throughput(64)
    assert set(logged) == {"perf/symbols_per_s", "perf/tflops_per_s", "perf/flops_per_symbol"}
    for value in logged.values():
        assert isinstance(value, torch.Tensor) and value.device.type == "cpu" and float(value) > 0


class NoSyncAfterWarmup(L.Callback):
    """Makes any host-device synchronization an error from the end of batch `warmup - 1` to the end of the last
    batch: the loop between batches (scheduler, logger connector, fetching, pinning and moving the next batch) and
    every step (training_step, backward, clipping, the optimizer). Warmup steps may sync (compilation, CUDA graph
    recording); so may the loggers every n steps, which the tests put out of reach."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.checked = warmup, 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == self.warmup - 1:
            torch.cuda.set_sync_debug_mode("error")
        elif batch_idx == trainer.max_steps - 1:
            torch.cuda.set_sync_debug_mode("default")
            self.checked = batch_idx - self.warmup + 1


def test_training_logs_nothing_lightning_converts_every_batch():
    """Lightning turns progress-bar metrics into Python numbers after every batch: a GPU sync per step."""
    trainer = quiet_trainer(max_steps=2)
    trainer.fit(tiny_lm(), SyntheticData())
    assert "train/loss" in trainer.callback_metrics
    assert not [name for name in trainer.progress_bar_metrics if name.startswith(("train/", "perf/"))]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("attn_backend, compile_mode", [("sdpa", None), ("triton", None), ("triton", "default"),
                                                        ("triton", "reduce-overhead")])
def test_optimizer_steps_never_wait_for_the_gpu(attn_backend, compile_mode):
    """No host-device synchronization from one optimizer step to the next (forward, loss, per-view sums, logging,
    backward, clipping, fused AdamW, the loop's own work), eager and compiled: the host can queue the next step
    while the GPU works."""
    torch._dynamo.reset()
    lm = tiny_lm(attn_backend=attn_backend, compile=compile_mode is not None,
                 compile_mode=compile_mode or "default")
    strict = NoSyncAfterWarmup(warmup=3)
    trainer = quiet_trainer(accelerator="cuda", devices=1, precision="bf16-mixed", max_steps=6,
                            log_every_n_steps=1000, gradient_clip_val=1.0, callbacks=[strict])
    try:
        trainer.fit(lm, SyntheticData())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert trainer.global_step == 6 and strict.checked == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_mode_trains_like_plain_compile():
    """compile_mode="reduce-overhead": every compiled graph is replayed as a CUDA graph (none skipped) and the losses
    follow the default-mode run's."""
    from torch._dynamo.utils import counters

    losses = {}
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        lm = tiny_lm(attn_backend="triton", compile=True, compile_mode=mode)
        recorder = LossRecorder()
        trainer = quiet_trainer(accelerator="cuda", devices=1, precision="bf16-mixed", max_steps=5,
                                gradient_clip_val=1.0, callbacks=[recorder], limit_val_batches=1)
        trainer.fit(lm, SyntheticData())
        trainer.validate(lm, SyntheticData(), verbose=False)  # inference-mode graphs beside the training ones
        losses[mode] = recorder.losses
        skips = counters["inductor"]["cudagraph_skips"]
        assert mode == "default" or skips == 0, f"{skips} graphs ran without CUDA graphs"
    assert losses["reduce-overhead"] == pytest.approx(losses["default"], rel=2e-2)


def test_compile_mode_reaches_torch_compile(monkeypatch):
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.update(kwargs) or fn)
    tiny_lm(compile=True, compile_mode="reduce-overhead")
    assert seen == {"mode": "reduce-overhead"}


def test_compiled_step_puts_the_model_and_its_loss_in_one_graph(graph_recorder):
    """compile_step: the graph that ends in the output head also computes the cross-entropy, and gives the eager
    nats and gradients."""
    lm = tiny_lm()
    batch = next(iter(DataLoader(PackedWindows(2, seed=3), batch_size=2)))
    eager = lm.batch_nats(batch)
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in lm.parameters()]
    lm.zero_grad()
    lm.compile_step(backend=graph_recorder)
    compiled = lm.batch_nats(batch)
    compiled.sum().backward()
    torch.testing.assert_close(compiled, eager)
    for p, grad in zip(lm.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, grad)
    calls = graph_recorder.call_targets()
    assert any(any("cross_entropy" in op for op in ops) and any("linear" in op for op in ops) for ops in calls), calls


def test_an_unknown_compile_mode_is_rejected_with_the_choices():
    with pytest.raises(ModelConfigError, match=r"compile_mode='reduce_overhead'.*reduce-overhead"):
        tiny_lm(compile=True, compile_mode="reduce_overhead")


class GradNormAfterStep(L.Callback):
    """Total gradient norm as the last optimizer step saw it (after clipping): Lightning zeroes the gradients at
    the next step, just before its backward, so this hook sees the previous step's gradients."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.max_abs: list[float] = []

    def on_before_zero_grad(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self.norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
            self.max_abs.append(max(float(g.abs().max()) for g in grads))


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_fused_adamw_and_gradients_are_clipped(algorithm):
    lm = tiny_lm()
    seen = GradNormAfterStep()
    trainer = quiet_trainer(max_steps=3, gradient_clip_val=1e-3, gradient_clip_algorithm=algorithm, callbacks=[seen])
    trainer.fit(lm, SyntheticData())
    assert trainer.optimizers[0].defaults["fused"] is True
    clipped = seen.norms if algorithm == "norm" else seen.max_abs
    assert len(clipped) == 2 and all(0 < x <= 1e-3 * (1 + 1e-4) for x in clipped)
    # Unclipped, the same model's gradients are far larger: the bound above is not met by accident.
    free = GradNormAfterStep()
    quiet_trainer(max_steps=2, callbacks=[free]).fit(tiny_lm(), SyntheticData())
    assert free.norms[0] > 0.1 and free.max_abs[0] > 0.01


def test_a_view_absent_from_the_batch_logs_nan():
    lm = tiny_lm()
    trainer = quiet_trainer(max_steps=1)

    class RawOnly(SyntheticData):
        def train_dataloader(self):
            pool = PackedWindows(200, seed=3)
            windows = [w for w in map(pool.__getitem__, range(len(pool))) if not (w["targets"] >= 320).any()][:2]
            assert len(windows) == 2
            return DataLoader(windows, batch_size=2)

    trainer.fit(lm, RawOnly())
    logged = trainer.logged_metrics
    assert math.isnan(float(logged["train/loss_spm"])) and math.isfinite(float(logged["train/loss_raw"]))


class FixedLogits(torch.nn.Module):
    """Stands in for the transformer: returns prepared logits, one tensor per call."""

    def __init__(self, logits: list[torch.Tensor]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.logits = logits

    def forward(self, input_ids, positions, doc_ids):
        return self.logits.pop(0)


def logits_giving(targets: torch.Tensor, prob: torch.Tensor, vocab: int) -> torch.Tensor:
    """Logits under which each target has probability `prob` (the other ids share the rest equally)."""
    logits = torch.zeros(*targets.shape, vocab)
    target_logit = torch.log(prob * (vocab - 1) / (1 - prob))
    logits.scatter_(-1, targets.clamp(min=0)[..., None], target_logit[..., None])
    return logits


def test_val_bpb_is_bits_per_raw_byte_over_all_batches():
    v = VOCAB.size
    byte = RAW_OFFSET + 65
    # Batch 1: three byte targets at p = 1/2 (1 bit each); a special target and padding do not count.
    t1 = torch.tensor([[byte, byte, byte, EOS, -100]])
    p1 = torch.tensor([[0.5, 0.5, 0.5, 0.01, 0.5]])
    # Batch 2: one byte target at p = 1/4 (2 bits) and a sentinel target.
    t2 = torch.tensor([[SENTINELS["raw"][1], byte, -100, -100, -100]])
    p2 = torch.tensor([[0.01, 0.25, 0.5, 0.5, 0.5]])
    batches = [{"input_ids": torch.zeros_like(t), "targets": t, "positions": torch.zeros_like(t),
                "doc_ids": torch.zeros_like(t)} for t in (t1, t2)]
    lm = tiny_lm()
    lm.model = FixedLogits([logits_giving(t1, p1, v), logits_giving(t2, p2, v)])
    metrics = quiet_trainer(limit_val_batches=1.0).validate(lm, DataLoader(batches, batch_size=None), verbose=False)[0]
    assert metrics["val/bpb"] == pytest.approx((3 * 1 + 2) / 4, rel=1e-5)  # not the mean of batch means (1.5)
    nats = [math.log(2)] * 3 + [-math.log(0.01), -math.log(0.01), math.log(4)]
    # val/loss is over every target, weighted by the count of targets in each batch.
    assert metrics["val/loss"] == pytest.approx(sum(nats) / 6, rel=1e-5)


def test_validate_then_fit_then_validate(tmp_path):
    # The demo's order: validate() runs under inference_mode, fit's own val loop then adds to fresh sums.
    lm, data = tiny_lm(), SyntheticData()
    trainer = quiet_trainer(max_steps=4, limit_val_batches=1.0, val_check_interval=2, default_root_dir=tmp_path)
    before = trainer.validate(lm, data, verbose=False)[0]["val/bpb"]
    trainer.fit(lm, data)
    after = trainer.validate(lm, data, verbose=False)[0]["val/bpb"]
    assert math.isfinite(before) and math.isfinite(after) and after != before


def test_resume_continues_the_same_loss_curve(tmp_path):
    straight = LossRecorder()
    L.seed_everything(0)
    quiet_trainer(max_steps=6, callbacks=[straight]).fit(tiny_lm(), SyntheticData())

    first, second = LossRecorder(), LossRecorder()
    L.seed_everything(0)
    half = quiet_trainer(max_steps=6, callbacks=[first, StopAfter(3)], plugins=[AtomicCheckpointIO()])
    half.fit(tiny_lm(), SyntheticData())
    ckpt = tmp_path / "half.ckpt"
    half.save_checkpoint(ckpt)
    assert not list(tmp_path.glob(".*tmp*"))
    quiet_trainer(max_steps=6, callbacks=[second]).fit(tiny_lm(), SyntheticData(), ckpt_path=ckpt)

    assert len(straight.losses) == 6 and len(first.losses) == len(second.losses) == 3
    torch.testing.assert_close(torch.tensor(first.losses + second.losses), torch.tensor(straight.losses),
                               atol=1e-5, rtol=0)


def test_checkpoint_carries_the_vocabulary(tmp_path):
    lm = tiny_lm()
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(lm, SyntheticData())
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    loaded = load_lm(tmp_path / "m.ckpt")
    assert loaded.vocabulary == VOCAB and not loaded.training
    torch.testing.assert_close(loaded.model.head.weight, lm.model.head.weight)
    triton = load_lm(tmp_path / "m.ckpt", attn_backend="triton")  # a backend override keeps the weights
    assert triton.config.attn_backend == "triton" and loaded.config.attn_backend == lm.config.attn_backend
    torch.testing.assert_close(triton.model.head.weight, lm.model.head.weight)


def test_load_lm_errors_are_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_lm(tmp_path / "missing.ckpt")
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot be loaded") as info:
        load_lm(bad)
    assert "\n" not in str(info.value)


def test_vocab_size_smaller_than_the_vocabulary_is_rejected():
    with pytest.raises(ModelConfigError,
                       match=r"model.arch.vocab_size \(320\) is smaller than the vocabulary \(336 ids\)"):
        tiny_lm(vocab_size=320)


def test_sliding_windows_score_every_target_once_with_bounded_context():
    symbols = np.arange(100, 123)  # 23 symbols, 22 targets; the first (<open> after <bos>) is the prompt's
    windows = list(sliding_windows(symbols, seq_len=8, stride=3))
    scored = [int(t) for piece, start in windows for t in piece[1 + start:]]
    assert scored == symbols[2:].tolist()
    for piece, _ in windows:
        assert len(piece) - 1 <= 8  # inputs (the piece's last symbol is only a target)
    assert windows[1][1] == 5  # the second window starts 3 later; its first 5 targets were scored


def test_score_documents_matches_a_direct_computation_and_counts_every_byte():
    lm = tiny_lm(max_seq_len=64)
    docs = [b"def f(x):\n    return x\n", b"print('hi')\n", bytes(range(200, 240))]
    result = score_documents(lm.model, docs, seq_len=64, stride=32, batch_size=2)
    assert result.bytes == sum(map(len, docs)) and result.documents == 3
    bits = 0.0
    for doc in docs:  # each fits one window: score it alone
        ids = torch.tensor([RawView(RAW_OFFSET).serialize(doc)])
        with torch.no_grad():
            nats = symbol_nats(lm.model(ids[:, :-1]), ids[:, 1:])
        bits += float(nats[is_raw_byte(ids[0, 1:])].sum()) / math.log(2)
    assert result.bits_per_byte == pytest.approx(bits / result.bytes, rel=1e-5)
    # Short windows only change how much context each byte sees, not which bytes count.
    assert score_documents(lm.model, docs, seq_len=16, stride=5).bytes == result.bytes


def test_raw_id_bpb_renormalizes_over_the_raw_reply_ids():
    lm = tiny_lm(max_seq_len=64)
    doc = b"def f(x):\n    return x\n"
    result = score_documents(lm.model, [doc], seq_len=64, stride=32)
    ids = torch.tensor([RawView(RAW_OFFSET).serialize(doc)])
    with torch.no_grad():
        logits = lm.model(ids[:, :-1])[0]
    allowed = raw_reply_ids(VOCAB.size)
    targets = ids[0, 1:]
    direct = -torch.log_softmax(logits[:, allowed], -1)[torch.arange(len(targets)), [
        allowed.index(int(t)) if int(t) in allowed else 0 for t in targets]]
    bits = float(direct[is_raw_byte(targets)].sum()) / math.log(2) / len(doc)
    assert result.raw_ids_bits_per_byte == pytest.approx(bits, rel=1e-5)
    assert result.raw_ids_bits_per_byte < result.bits_per_byte  # the mass on other ids is given back to the bytes
    outside = torch.tensor([[-100, VOCAB.offset("spm")]])  # ignored, and a compressed id: no raw-id loss
    assert (restricted_nats(logits[None, :2], outside, torch.tensor(allowed)) == 0).all()


@pytest.mark.parametrize("field, value", [("lr", 0.0), ("warmup_steps", -1), ("min_lr_ratio", 1.5)])
def test_bad_optimizer_settings_are_rejected(field, value):
    with pytest.raises(ModelConfigError, match="need model.optim.lr > 0"):
        OptimConfig(**{field: value})
