"""Training throughput of the byte model: tokens/s and MFU of our fit path beside a plain PyTorch loop, one run.

Arms, at every model size of the preset (warmup steps excluded; one timed window per arm, CUDA events with a
single synchronize at its end):
  fit-triton[-compile|-graphs]  `proxycomp fit`'s path: ProxyLM + Lightning Trainer (bf16-mixed, clipping 1.0, a
                        CSV logger every 25 steps), our Triton attention with the document mask
  fit-triton-compile-embed  fit-triton-compile with the Triton embedding fused with block 0's RMSNorm
  fit-sdpa[-compile]    the same with SDPA, which takes the document mask as a dense boolean mask
  plain[-compile|-graphs]  a minimal loop over the same Transformer: SDPA is_causal (no document mask), fused AdamW,
                        bf16 autocast, batches already on the device
  plain-flex-compile    the plain loop with fit's semantics (document mask, positions restarting per document)
                        through FlexAttention, whose block mask the compiled model makes once per step (CUDA only:
                        torch has no FlexAttention backward on the CPU)
  plain-triton-compile  the same loop with our Triton attention: the control that splits fit-triton-compile's
                        ratio to plain-flex-compile into the kernel's part (plain-triton ÷ plain-flex, one loop)
                        and the fit path's (fit-triton ÷ plain-triton, one kernel: Lightning, per-view losses,
                        clipping, logging)
All arms of a model size train on the same windows, prepared in memory (a tiny data module for the fit arms), so
data loading is not what they measure: one batch per timed step, which the warmup steps replay from the first.
`--windows raw` (default): random raw bytes packed in documents as long as the corpus files, the byte-only recipe's
workload; with `--doc_len N`, documents of N symbols each instead (FlexAttention's published document-masking loop
ran at 512). `--windows spm`: windows of the real TrainStream of the spm proxy recipe past its warmup (each document
compressed with probability 0.9, sentinel mixing; compressed documents are ~3.6x shorter in symbols), with the
vocabulary of its 8192 pieces. The summary states the share of causal attention the windows' documents keep, which
bounds what the document mask can skip. `--rounds N` runs the arms N times in turn; each ratio is then the median of
the rounds' own ratios, with their range: a ratio near an issue's threshold says whether it is outside the noise.
`-compile` wraps the Transformer and its cross-entropy in one torch.compile (the fit arms: as ProxyLM(compile=True)
does; the plain arms: model and loss in one function); the Triton attention is an opaque op inside the graph.
`-graphs` is the same in mode "reduce-overhead" (ProxyLM's compile_mode): each compiled forward and backward is
replayed as a CUDA graph. The tiny preset compiles with aot_eager, which has no modes, so there `-graphs` equals
`-compile`.

MFU = flops_per_symbol (6N + 12*L*d*T: the full-context convention, which ignores causal and document masking)
x tokens/s / the FLOP/s of a square matmul in the same dtype measured first in the same run.
Data pipeline: symbols/s per CPU core of the real TrainStream for the raw, spm and zstd views
(`proxycomp.bench.data.measure`), and the cores each model's fastest arm would need.

    python tools/bench_train.py --sizes h200 --out train.json [--models d768] [--arms fit-triton,plain] \
        [--windows spm | --doc_len 512] [--rounds 3] [--record]
    python tools/bench_train.py --sizes tiny    # CPU, seconds: every path runs; the figures mean nothing
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

if not torch.cuda.is_available():
    # The Triton attention backend runs under Triton's interpreter on CPU; the flag is read when triton is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import lightning as L  # noqa: E402 - after TRITON_INTERPRET is settled (lightning imports triton)
import numpy as np  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from proxycomp.bench.data import measure  # noqa: E402
from proxycomp.bench.record import add_benchmarks_option, append_block  # noqa: E402
from proxycomp.data import CorpusConfig, MixingSchedule, TrainStream, load_corpus  # noqa: E402
from proxycomp.data.packing import collate, pack_window  # noqa: E402
from proxycomp.defaults import GRAD_CLIP, SPM_VOCAB_SIZE, default_device, default_precision  # noqa: E402
from proxycomp.losses import IGNORE_INDEX  # noqa: E402
from proxycomp.lit import OptimConfig, ProxyLM  # noqa: E402
from proxycomp.model import ModelConfig, Transformer, flops_per_symbol, matmul_params  # noqa: E402
from proxycomp.views import ViewConfig, train_spm  # noqa: E402
from proxycomp.vocab import RAW_OFFSET, RAW_SIZE, Vocabulary  # noqa: E402

BENCHMARKS = Path("BENCHMARKS.md")  # --benchmarks' default
SECTION = "## Training throughput"
LOG_EVERY_N_STEPS = 25  # the pretrain recipes' value: the logger's metric syncs land in the timed window as in fit
DATA_VIEWS = ("raw", "spm", "zstd")
PROXY_R = 0.9  # the paper schedule's r past its warmup: the share of documents in their compressed view
WINDOW_WORDS = {"raw": "synthetic raw bytes in documents as long as the corpus files",
                "spm": f"the spm proxy recipe's stream (r = {PROXY_R}, sentinel mixing)"}


@dataclass(frozen=True)
class ModelSize:
    name: str
    d_model: int
    n_layers: int
    n_heads: int
    seq_len: int
    batch_size: int

    def config(self, attn_backend: str, vocab_size: int) -> ModelConfig:
        return ModelConfig(vocab_size=vocab_size, d_model=self.d_model, n_layers=self.n_layers,
                           n_heads=self.n_heads, max_seq_len=self.seq_len, attn_backend=attn_backend)


@dataclass(frozen=True)
class Preset:
    models: tuple[ModelSize, ...]
    warmup: int
    steps: int
    matmul_size: int
    compile_backend: str  # tiny: "aot_eager", which checks the same Dynamo capture without Inductor's ~25 s C++ build
    data_documents: int
    spm_vocab_size: int


PRESETS = {
    # GPT-2 small/medium widths and depths (head size 64) at the context and batch.
    "h200": Preset((ModelSize("d768", 768, 12, 12, 4096, 8), ModelSize("d1024", 1024, 24, 16, 4096, 4)),
                   warmup=5, steps=20, matmul_size=8192, compile_backend="inductor", data_documents=600,
                   spm_vocab_size=SPM_VOCAB_SIZE),
    "tiny": Preset((ModelSize("d64", 64, 2, 2, 64, 2),), warmup=1, steps=2, matmul_size=256,
                   compile_backend="aot_eager", data_documents=40, spm_vocab_size=512),
}


@dataclass(frozen=True)
class Arm:
    name: str
    loop: str  # "fit" or "plain"
    attn_backend: str
    compile_mode: str | None  # None: eager; else a torch.compile mode
    embed_backend: str = "torch"
    needs_cuda: bool = False

    def compile_options(self, preset: Preset) -> dict:
        """torch.compile's arguments for this arm under the preset's backend (only Inductor takes a mode)."""
        mode = {"mode": self.compile_mode} if preset.compile_backend == "inductor" else {}
        return {"backend": preset.compile_backend, **mode}


ARMS = (
    Arm("fit-triton", "fit", "triton", None), Arm("fit-triton-compile", "fit", "triton", "default"),
    Arm("fit-triton-graphs", "fit", "triton", "reduce-overhead"),
    Arm("fit-triton-compile-embed", "fit", "triton", "default", embed_backend="triton"),
    Arm("fit-sdpa", "fit", "sdpa", None), Arm("fit-sdpa-compile", "fit", "sdpa", "default"),
    Arm("plain", "plain", "sdpa", None), Arm("plain-compile", "plain", "sdpa", "default"),
    Arm("plain-graphs", "plain", "sdpa", "reduce-overhead"),
    Arm("plain-flex-compile", "plain", "flex", "default", needs_cuda=True),
    Arm("plain-triton-compile", "plain", "triton", "default"),
)
BY_NAME = {arm.name: arm for arm in ARMS}
DOCUMENT_BACKENDS = ("flex", "triton")  # attention that takes the documents; sdpa attends over the whole window


class WindowTimer:
    """Seconds between start() and stop(): CUDA events on a GPU, so the only synchronize is the one in stop().

    With `profile_to`, torch.profiler also records the window: its top kernels go to that file and its timeline to
    the same name with `.trace.json`; a diagnosis of where a step's time goes, not a benchmark (the profiler's own
    overhead lands in the window's figures).
    """

    def __init__(self, device: torch.device, profile_to: Path | None = None) -> None:
        self.cuda = device.type == "cuda"
        self.profile_to = profile_to
        self._profiler: torch.profiler.profile | None = None
        self._start: torch.cuda.Event | float | None = None

    def start(self) -> None:
        if self.profile_to is not None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            activities += [torch.profiler.ProfilerActivity.CUDA] if self.cuda else []
            self._profiler = torch.profiler.profile(activities=activities)
            self._profiler.__enter__()
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def stop(self) -> float:
        if self._start is None:
            raise RuntimeError("WindowTimer.stop() before start()")
        if not self.cuda:
            seconds = time.perf_counter() - self._start
        else:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            seconds = self._start.elapsed_time(end) / 1e3
        if self._profiler is not None:
            self._profiler.__exit__(None, None, None)
            self._write_profile(seconds)
        return seconds

    def _write_profile(self, seconds: float) -> None:
        events = self._profiler.key_averages()
        kind = "device" if self.cuda else "cpu"
        # On a GPU, only the kernels themselves: an op's row repeats the time of the kernels it launched, and a
        # user annotation's GPU range (Optimizer.step#AdamW.step) spans whole stretches of the step.
        counted = [e for e in events if (not self.cuda or e.device_type == torch.autograd.DeviceType.CUDA)
                   and not getattr(e, "is_user_annotation", False)]
        busy_us = sum(getattr(e, f"self_{kind}_time_total") for e in counted)
        table = events.table(sort_by=f"self_{kind}_time_total", row_limit=30, max_name_column_width=70)
        what = "GPU kernel" if self.cuda else "CPU op"
        self.profile_to.write_text(f"window {seconds * 1e3:.1f} ms; {what} time {busy_us / 1e3:.1f} ms "
                                   f"({busy_us / 1e6 / seconds:.0%} of the window)\n{table}\n")
        # The timeline too (chrome://tracing, Perfetto): where the GPU waits, and what the host does meanwhile.
        self._profiler.export_chrome_trace(str(self.profile_to.with_suffix(".trace.json")))


def matmul_flops(device: torch.device, dtype: torch.dtype, n: int, iters: int = 50) -> float:
    """FLOP/s of an n x n x n matmul: the ceiling MFU is measured against."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    out = torch.empty_like(a)
    for _ in range(3):
        torch.mm(a, b, out=out)
    timer = WindowTimer(device)
    timer.start()
    for _ in range(iters):
        torch.mm(a, b, out=out)
    return 2 * n**3 * iters / timer.stop()


def synthetic_batches(size: ModelSize, doc_lengths: np.ndarray, seed: int,
                      count: int) -> list[dict[str, torch.Tensor]]:
    """`count` batches of packed windows of random raw bytes whose documents have lengths drawn from
    `doc_lengths`."""
    rng = np.random.default_rng(seed)
    windows = []
    for _ in range(count * size.batch_size):
        pieces, room = [], size.seq_len + 1
        while room:
            n = min(room, int(rng.choice(doc_lengths)))
            pieces.append(rng.integers(RAW_OFFSET, RAW_OFFSET + RAW_SIZE, n))
            room -= n
        windows.append(pack_window(pieces, size.seq_len))
    b = size.batch_size
    return [collate(windows[i * b:(i + 1) * b]) for i in range(count)]


@dataclass(frozen=True)
class Workload:
    """The windows every arm of one model size trains on, and the vocabulary their ids are written in."""
    windows: str
    vocabulary: Vocabulary
    batches: list[dict[str, torch.Tensor]]

    def causal_work(self) -> float:
        """Share of full causal attention left inside documents: what the document mask can at best keep."""
        kept = []
        for batch in self.batches:
            for row in batch["doc_ids"].numpy():
                lengths = np.diff(np.flatnonzero(np.diff(row, prepend=row[0] - 1, append=row[-1] - 1)))
                kept.append((lengths * (lengths + 1)).sum() / (len(row) * (len(row) + 1)))
        return float(np.mean(kept))


def workload(windows: str, size: ModelSize, docs: list[bytes], doc_lengths: np.ndarray, spm_model: bytes,
             preset: Preset, seed: int, count: int) -> Workload:
    """`count` batches of `windows`. The timed steps take one each (`count` = --steps): with the 4 batches replayed
    in turn before, 32 windows of 4096 drawn from files of ~15k symbols kept 78-91% of causal attention inside
    documents across seeds (std 3.4 points), so which draw a record got moved fit's ratio to the full-causal plain
    loop by ~3%; 20 batches: 84-89% (std 1.3)."""
    if windows == "raw":
        return Workload("raw", Vocabulary(), synthetic_batches(size, doc_lengths, seed, count))
    config = ViewConfig(("raw", "spm"), spm_vocab_size=preset.spm_vocab_size)
    stream = iter(TrainStream(docs, config, spm_model, MixingSchedule("sentinel", r_peak=PROXY_R), size.seq_len,
                              batch_size=size.batch_size, seed=seed))
    batches = [{k: v for k, v in next(stream).items() if k != "stream_cursor"} for _ in range(count)]
    return Workload("spm", config.vocabulary(), batches)


class ReplayedBatches(Dataset):
    """`length` items cycling through a few prepared batches (already collated: use `batch_size=None`)."""

    def __init__(self, batches: list[dict[str, torch.Tensor]], length: int) -> None:
        self.batches, self.length = batches, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.batches[i % len(self.batches)]


class InMemoryData(L.LightningDataModule):
    """Prepared batches, replayed in turn for `steps` steps, through a real DataLoader (pinned on a GPU)."""

    def __init__(self, batches: list[dict[str, torch.Tensor]], steps: int) -> None:
        super().__init__()
        self.batches, self.steps = batches, steps

    def train_dataloader(self) -> DataLoader:
        return DataLoader(ReplayedBatches(self.batches, self.steps), batch_size=None,
                          pin_memory=torch.cuda.is_available())


class TimedWindow(L.Callback):
    """Times the steps after the first `warmup` ones, from the end of the last warmup step to the end of the run."""

    def __init__(self, warmup: int, timer: WindowTimer) -> None:
        self.warmup, self.timer = warmup, timer
        self.seconds: float | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        if batch_idx == self.warmup - 1:
            self.timer.start()
        elif batch_idx == trainer.max_steps - 1:
            self.seconds = self.timer.stop()


def run_fit(arm: Arm, size: ModelSize, work: Workload, device: torch.device, preset: Preset, warmup: int,
            steps: int, profile_to: Path | None = None) -> float:
    """Seconds for `steps` optimizer steps of ProxyLM under the Lightning Trainer."""
    arch = ModelConfig(vocab_size=work.vocabulary.size, d_model=size.d_model, n_layers=size.n_layers,
                       n_heads=size.n_heads, max_seq_len=size.seq_len, attn_backend=arm.attn_backend,
                       embed_backend=arm.embed_backend)
    lm = ProxyLM(arch, OptimConfig(warmup_steps=warmup), vocabulary=work.vocabulary.to_dict())
    if arm.compile_mode is not None:
        lm.compile_step(**arm.compile_options(preset))  # what ProxyLM(compile=True, compile_mode=...) does
    timed = TimedWindow(warmup, WindowTimer(device, profile_to))
    with tempfile.TemporaryDirectory() as logs:
        trainer = L.Trainer(
            accelerator=device.type, devices=1, precision=default_precision(device.type),
            gradient_clip_val=GRAD_CLIP, max_steps=warmup + steps, log_every_n_steps=LOG_EVERY_N_STEPS,
            logger=CSVLogger(logs, name="bench_train"), callbacks=[timed], enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
        )
        trainer.fit(lm, InMemoryData(work.batches, warmup + steps))
    if timed.seconds is None:
        raise RuntimeError(f"the Trainer stopped after {trainer.global_step} of {warmup + steps} steps")
    return timed.seconds


def run_plain(arm: Arm, size: ModelSize, work: Workload, device: torch.device, preset: Preset, warmup: int,
              steps: int, profile_to: Path | None = None) -> float:
    """Seconds for `steps` steps of a minimal loop: bf16 autocast, fused AdamW; causal SDPA over the whole window,
    or FlexAttention or our Triton attention inside documents with positions restarting at each (fit's
    semantics). Compiled arms compile the model with its cross-entropy, as the fit arms do (ProxyLM.compile_step):
    left eager, the loss's float32 passes over the logits would handicap the baseline, by more the larger the
    vocabulary (the spm stream's 8.5k symbols)."""
    model = Transformer(size.config(arm.attn_backend, work.vocabulary.size)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    documents = arm.attn_backend in DOCUMENT_BACKENDS
    on_device = [{k: b[k].to(device) for k in ("input_ids", "positions", "doc_ids", "targets")} for b in work.batches]

    def batch_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        input_ids = batch["input_ids"]
        # sdpa: no doc_ids, is_causal over the whole window
        logits = model(input_ids, batch["positions"], batch["doc_ids"]) if documents else model(input_ids)
        return F.cross_entropy(logits.flatten(0, 1).float(), batch["targets"].flatten(), ignore_index=IGNORE_INDEX)

    if arm.compile_mode is not None:
        batch_loss = torch.compile(batch_loss, **arm.compile_options(preset))

    def step(i: int) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = batch_loss(on_device[i % len(on_device)])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(i)
    timer = WindowTimer(device, profile_to)
    timer.start()
    for i in range(warmup, warmup + steps):
        step(i)
    return timer.stop()


def run_arm(arm: Arm, size: ModelSize, work: Workload, device: torch.device, preset: Preset, warmup: int,
            steps: int, matmul: float, profile_dir: Path | None = None) -> dict:
    """One arm's figures (or its error), from a fresh model and optimizer."""
    config = size.config(arm.attn_backend, work.vocabulary.size)
    shape = asdict(size)
    result = {"model": shape.pop("name"), "arm": arm.name, **shape, "windows": work.windows,
              "vocab_size": work.vocabulary.size, "matmul_params": matmul_params(config),
              "flops_per_symbol": flops_per_symbol(config, size.seq_len)}
    torch._dynamo.reset()  # a fresh model per arm would otherwise count against Dynamo's recompile limit
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    run = run_fit if arm.loop == "fit" else run_plain
    try:
        profile_to = profile_dir / f"{size.name}_{arm.name}.txt" if profile_dir is not None else None
        seconds = run(arm, size, work, device, preset, warmup, steps, profile_to)
    except Exception as err:  # noqa: BLE001 - one arm failing (OOM, compile) must not cost the other arms of a device run
        print(f"bench_train: {size.name} {arm.name} failed: {type(err).__name__}: {err}", file=sys.stderr)
        return {**result, "error": f"{type(err).__name__}: {err}"}
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    tokens_per_s = steps * size.batch_size * size.seq_len / seconds
    achieved = tokens_per_s * result["flops_per_symbol"]
    result.update(seconds=seconds, step_ms=seconds / steps * 1e3, tokens_per_s=tokens_per_s,
                  tflops=achieved / 1e12, mfu=achieved / matmul)
    if device.type == "cuda":
        result["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return result


def merge_rounds(runs: list[dict]) -> dict:
    """One arm's rounds as one result: the median tokens/s, the figures that follow from it, and each round's
    tokens/s (`round_tokens_per_s`, which the table's ratios are taken from). A round that failed fails the arm."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    each = [r["tokens_per_s"] for r in runs]
    first, median = runs[0], statistics.median(each)
    scale = median / first["tokens_per_s"]
    merged = {**first, "tokens_per_s": median, "seconds": first["seconds"] / scale,
              "step_ms": first["step_ms"] / scale, "tflops": first["tflops"] * scale, "mfu": first["mfu"] * scale,
              "round_tokens_per_s": each}
    if "peak_gib" in first:
        merged["peak_gib"] = max(r["peak_gib"] for r in runs)
    return merged


def data_rates(docs: list[bytes], spm_model: bytes, preset: Preset, seq_len: int) -> list[dict]:
    """Symbols/s per core of the real training stream, one view at a time."""
    config = ViewConfig(DATA_VIEWS, spm_vocab_size=preset.spm_vocab_size)
    return [measure(view, docs, config, spm_model, seq_len) for view in DATA_VIEWS]


def throughput_table(arms: list[dict]) -> str:
    """One row per arm; `vs plain (SDPA)` against the model's fastest plain arm on torch's SDPA (no document mask),
    `vs flex` against plain-flex-compile (the plain loop with the same document mask as fit). Ratios carry three
    decimals: issue targets are thresholds such as 1.10x, and two decimals print 1.095 as 1.10x. Over several
    rounds a ratio is the median of the rounds' ratios (each of two arms run minutes apart, not a median over
    either arm's other rounds) with their range in parentheses: the run's own noise."""
    lines = ["| model | arm | tokens/s | step ms | TFLOP/s | MFU | vs plain (SDPA) | vs flex | peak GiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in arms:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['arm']} | failed: {r['error'][:80]} | | | | | | |")
            continue
        ok = [p for p in arms if p["model"] == r["model"] and "error" not in p]
        plain = [p["round_tokens_per_s"] for p in ok
                 if BY_NAME[p["arm"]].loop == "plain" and BY_NAME[p["arm"]].attn_backend == "sdpa"]
        flex = [p["round_tokens_per_s"] for p in ok if p["arm"] == "plain-flex-compile"]
        ratio = _ratio(r["round_tokens_per_s"], [max(each) for each in zip(*plain)]) if plain else "n/a"
        versus_flex = _ratio(r["round_tokens_per_s"], flex[0]) if flex else "n/a"
        peak = f"{r['peak_gib']:.1f}" if "peak_gib" in r else "n/a"
        lines.append(f"| {r['model']} | {r['arm']} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | "
                     f"{r['tflops']:.1f} | {r['mfu']:.1%} | {ratio} | {versus_flex} | {peak} |")
    return "\n".join(lines)


def _ratio(rounds: list[float], baseline: list[float]) -> str:
    each = [a / b for a, b in zip(rounds, baseline, strict=True)]
    spread = f" ({min(each):.3f}-{max(each):.3f})" if len(each) > 1 else ""
    return f"{statistics.median(each):.3f}x{spread}"


def best_rates(arms: list[dict]) -> dict[str, float]:
    """The fastest arm's tokens/s per model: what the data pipeline has to keep up with."""
    best: dict[str, float] = {}
    for r in arms:
        if "error" not in r:
            best[r["model"]] = max(best.get(r["model"], 0.0), r["tokens_per_s"])
    return best


def data_table(rows: list[dict], best: dict[str, float]) -> str:
    head = "| view | symbols/s per core | raw bytes/symbol | " + " | ".join(
        f"cores for {m} ({rate:,.0f}/s)" for m, rate in best.items()) + " |"
    lines = [head, "|---" * (3 + len(best)) + "|"]
    for r in rows:
        cores = " | ".join(f"{rate / r['symbols_per_s']:.2f}" for rate in best.values())
        lines.append(f"| {r['view']} | {r['symbols_per_s'] / 1e6:.2f} M | {r['bytes_per_symbol']:.2f} | {cores} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Preset, list[ModelSize], list[Arm]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--sizes", choices=sorted(PRESETS), default="h200", help="preset: model sizes, steps, data scale")
    p.add_argument("--models", help="comma-separated subset of the preset's models (default: all)")
    p.add_argument("--arms", help=f"comma-separated subset of {', '.join(a.name for a in ARMS)} (default: all)")
    p.add_argument("--warmup", type=int, help="untimed steps per arm (default: the preset's)")
    p.add_argument("--steps", type=int, help="timed steps per arm (default: the preset's)")
    p.add_argument("--windows", choices=sorted(WINDOW_WORDS), default="raw",
                   help="what the arms train on: synthetic byte-only windows, or the spm proxy recipe's stream")
    p.add_argument("--doc_len", type=int, metavar="N",
                   help="raw windows only: documents of N symbols each instead of the corpus files' lengths")
    p.add_argument("--rounds", type=int, default=1,
                   help="run the arms this many times in turn (A B C A B C ...): tokens/s is each arm's median, "
                        "and each ratio prints the range of the rounds' ratios")
    p.add_argument("--seed", type=int, default=0, help="seed of the models and data")
    p.add_argument("--out", type=Path, help="write every figure to this JSON file")
    p.add_argument("--device_note", default="", help="extra words on the machine for BENCHMARKS.md")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="also profile each arm's timed window into DIR/MODEL_ARM.txt (top kernels) and "
                        "DIR/MODEL_ARM.trace.json (timeline); a diagnosis: do not --record figures from a profiled run")
    p.add_argument("--record", action="store_true", help=f"append a dated block to BENCHMARKS.md under {SECTION!r}")
    add_benchmarks_option(p, BENCHMARKS)
    args = p.parse_args(argv)
    preset = PRESETS[args.sizes]

    def subset(option: str, value: str | None, known: dict):
        if value is None:
            return list(known.values())
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            p.error(f"--{option}: unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(known)}")
        return [known[n] for n in names]

    models = subset("models", args.models, {m.name: m for m in preset.models})
    arms = subset("arms", args.arms, BY_NAME)
    if not torch.cuda.is_available():
        gpu_only = [a.name for a in arms if a.needs_cuda]
        if args.arms is not None and gpu_only:
            p.error(f"--arms: {', '.join(gpu_only)} needs a CUDA GPU (torch has no FlexAttention backward on the CPU)")
        arms = [a for a in arms if not a.needs_cuda]
    args.warmup = preset.warmup if args.warmup is None else args.warmup
    args.steps = preset.steps if args.steps is None else args.steps
    if args.warmup < 1 or args.steps < 1:
        p.error(f"--warmup must be >= 1 (the first step compiles) and --steps >= 1; got {args.warmup}, {args.steps}")
    if args.doc_len is not None and (args.doc_len < 1 or args.windows != "raw"):
        p.error(f"--doc_len {args.doc_len}: takes a positive length, with --windows raw (the spm stream's documents "
                "are the corpus files, compressed)")
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.profile is not None and args.rounds > 1:
        p.error("--profile and --rounds: each round would overwrite the last one's profile; profile one round")
    if args.profile is not None and args.record:
        p.error("--profile and --record: the profiler's overhead would land in the recorded figures; run them apart")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    if args.out is not None and not args.out.parent.is_dir():
        p.error(f"--out {args.out}: folder {args.out.parent} does not exist; create it or pick another path")
    return args, preset, models, arms


def main(argv: list[str] | None = None) -> int:
    args, preset, models, arms = parse_args(argv)
    lightning_log = logging.getLogger("lightning.pytorch")
    level = lightning_log.level
    lightning_log.setLevel(logging.WARNING)  # one Trainer per arm: no banner each time
    try:
        return _run(args, preset, models, arms, argv if argv is not None else sys.argv[1:])
    finally:
        lightning_log.setLevel(level)  # a caller's later runs (tests, notebooks) keep their messages


def _run(args, preset, models, arms, argv: list[str]) -> int:
    device = torch.device(default_device())
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # the arms' matmul dtype (autocast or fp32)
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({platform.machine()})"

    matmul = matmul_flops(device, dtype, preset.matmul_size)
    print(f"{device_name}: {preset.matmul_size}^3 {str(dtype).removeprefix('torch.')} matmul {matmul / 1e12:.2f} "
          f"TFLOP/s", flush=True)
    corpus = load_corpus(CorpusConfig(max_documents=preset.data_documents), seed=args.seed)
    docs = [d.data for d in corpus.train]
    file_lengths = np.array([len(d) + 4 for d in docs])  # the raw view adds <bos><raw> ... </raw><eos>
    doc_lengths, windows_words = file_lengths, WINDOW_WORDS[args.windows]
    if args.doc_len is not None:
        doc_lengths = np.array([args.doc_len])
        windows_words = f"synthetic raw bytes in documents of {args.doc_len} symbols each"
    spm_model = train_spm(docs, preset.spm_vocab_size)

    results, work_kept = [], {}
    for size in models:
        work = workload(args.windows, size, docs, doc_lengths, spm_model, preset, args.seed, args.steps)
        work_kept[size.name] = work.causal_work()
        runs: list[list[dict]] = [[] for _ in arms]
        for round_ in range(args.rounds):
            for arm, arm_runs in zip(arms, runs):
                arm_runs.append(run_arm(arm, size, work, device, preset, args.warmup, args.steps, matmul,
                                        args.profile))
                if "error" not in arm_runs[-1]:
                    which = f" (round {round_ + 1} of {args.rounds})" if args.rounds > 1 else ""
                    print(f"{size.name} {arm.name}{which}: {arm_runs[-1]['tokens_per_s']:,.0f} tokens/s", flush=True)
        results += [merge_rounds(arm_runs) for arm_runs in runs]
    data = data_rates(docs, spm_model, preset, max(m.seq_len for m in models))
    best = best_rates(results)
    for row in data:
        row["cores_needed"] = {m: rate / row["symbols_per_s"] for m, rate in best.items()}

    command = "python tools/bench_train.py " + " ".join(argv)
    rounds_words = f", {args.rounds} rounds of the arms in turn (medians)" if args.rounds > 1 else ""
    summary = (f"{device_name}, torch {torch.__version__}; matmul ceiling {matmul / 1e12:.1f} TFLOP/s "
               f"({preset.matmul_size}^3, {str(dtype).removeprefix('torch.')}); {args.warmup} warmup + {args.steps} "
               f"timed steps per arm{rounds_words}; windows: {windows_words}; corpus: {len(docs)} python-sources "
               f"files (raw mean {file_lengths.mean():,.0f} symbols); "
               f"{', '.join(f'{kept:.0%} ({name})' for name, kept in work_kept.items())} of causal attention inside "
               f"documents; data pipeline per view on one core of this host (spm vocab {preset.spm_vocab_size}, "
               f"zstd level 3)")
    tables = f"{data_table(data, best)}\n\n{throughput_table(results)}"
    if args.out is not None:
        args.out.write_text(json.dumps({
            "device": device_name, "torch": torch.__version__, "command": command.strip(), "preset": args.sizes,
            "dtype": str(dtype), "matmul_size": preset.matmul_size, "matmul_flops": matmul, "warmup": args.warmup,
            "steps": args.steps, "rounds": args.rounds, "windows": args.windows, "doc_len": args.doc_len,
            "causal_work": work_kept, "arms": results, "data": data,
        }, indent=1))
    if args.record:
        stamp = datetime.date.today().isoformat()
        note = f" ({args.device_note})" if args.device_note else ""
        append_block(args.benchmarks, SECTION, f"### {stamp} · {device_name}{note} · {os.cpu_count()} CPU cores\n\n"
                     f"`{command.strip()}`\n\n{summary}.\n\n{tables}\n")
        print(f"recorded in {args.benchmarks}")
    print(summary)
    print(tables)
    return 1 if any("error" in r for r in results) else 0
