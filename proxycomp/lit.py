"""`ProxyLM`: the LightningModule that trains the transformer on packed, mixed-view batches.

Training loss is plain next-symbol cross-entropy over every target (raw, compressed, sentinels), as
in the paper's code; it is also logged per vocabulary range so the views can be told apart. With
`loss_targets="raw"` only raw-byte targets are trained on (the comparison's loss-masked twin of a proxy run: the
same batches, without learning to predict the compressed views).
Validation reads the raw view only and reports bits per raw byte. The vocabulary layout is a
hyper-parameter, so a checkpoint alone is enough to generate from or evaluate.

Under DDP the loss is normalized by the target count of the whole global batch (one small all-reduce per
step), so N processes take the same gradient step as one process with N times the batch; validation sums
(nats, bytes) over all ranks' windows before dividing, so val/bpb equals the single-process figure.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import lightning as L
import torch

from proxycomp.config_diff import changed_fields
from proxycomp.losses import IGNORE_INDEX, LN2, batch_nats, byte_nats
from proxycomp.model import ModelConfig, ModelConfigError, Transformer, flops_per_symbol
from proxycomp.progress import ThroughputWindow
from proxycomp.vocab import RAW_OFFSET, RAW_SIZE, Vocabulary


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """LR multiplier: linear warmup to 1, then cosine down to min_lr_ratio at total_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


# Architecture fields that fix the weights' shapes (the backends and max_seq_len may differ between runs).
WEIGHT_FIELDS = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "tie_embeddings")
LOSS_TARGETS = ("all", "raw")
RAW_GROUP = 1  # index of the raw bytes among `range_groups`


def range_groups(vocabulary: Vocabulary, vocab_size: int) -> tuple[list[str], torch.Tensor]:
    """Names of the loss groups (specials, raw, each compressed view) and each id's group index."""
    names = ["special", "raw"]
    group = torch.zeros(vocab_size, dtype=torch.long)
    group[RAW_OFFSET:RAW_OFFSET + RAW_SIZE] = RAW_GROUP
    for view in vocabulary.views[1:]:
        ids = vocabulary.range(view)
        group[ids.start:ids.stop] = len(names)
        names.append(view)
    return names, group


@dataclass
class OptimConfig:
    """AdamW as in the paper's code (betas (0.9, 0.95), eps 1e-15, weight decay on matrices only) and a
    linear-warmup cosine schedule down to min_lr_ratio * lr.

    Args:
        lr: peak learning rate
        betas: AdamW's moment decays
        eps: AdamW's epsilon
        weight_decay: decoupled weight decay of the weight matrices (norms and other vectors get none)
        warmup_steps: steps of linear warmup from 0 to lr
        min_lr_ratio: the cosine ends at min_lr_ratio * lr at the last step
    """

    lr: float = 1.5e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-15
    weight_decay: float = 0.1
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        if self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1 or self.lr <= 0:
            raise ModelConfigError("need model.optim.lr > 0, model.optim.warmup_steps >= 0 and "
                                   "0 <= model.optim.min_lr_ratio <= 1")


class ProxyLM(L.LightningModule):
    def __init__(
        self,
        arch: ModelConfig = ModelConfig(),
        optim: OptimConfig = OptimConfig(),
        compile: bool = False,
        compile_mode: str = "default",
        vocabulary: dict | None = None,
        loss_targets: str = "all",
    ) -> None:
        """The transformer and how it is trained.

        Args:
            arch: the transformer (vocab_size and max_seq_len are linked from the data by the CLI)
            optim: optimizer and learning-rate schedule
            compile: torch.compile the model together with its loss (`compile_step`; GPU runs)
            compile_mode: Inductor's mode; "reduce-overhead" replays each compiled forward and backward as a CUDA
                graph, so the host launches a few graphs per step instead of every kernel (on the H200 within 1%
                of the default mode's speed, with less memory: BENCHMARKS)
            vocabulary: `Vocabulary.to_dict()`, linked from the data module by the CLI
            loss_targets: all (every target, as the paper's code) or raw (raw-byte targets only; the rest still
                logged per view, untrained)
        """
        super().__init__()
        # A checkpoint stores the configs as plain dicts (loadable with weights_only); they come back as dicts.
        arch = ModelConfig(**arch) if isinstance(arch, dict) else arch
        optim = OptimConfig(**optim) if isinstance(optim, dict) else optim
        self.save_hyperparameters({"arch": asdict(arch), "optim": asdict(optim), "compile": compile,
                                   "compile_mode": compile_mode, "vocabulary": vocabulary,
                                   "loss_targets": loss_targets})
        if loss_targets not in LOSS_TARGETS:
            raise ModelConfigError(f"model.loss_targets must be one of {', '.join(LOSS_TARGETS)}, got {loss_targets!r}")
        self.optim = optim
        self.loss_targets = loss_targets
        self.vocabulary = Vocabulary.from_dict(vocabulary or {})
        if arch.vocab_size < self.vocabulary.size:
            raise ModelConfigError(
                f"model.arch.vocab_size ({arch.vocab_size}) is smaller than the vocabulary ({self.vocabulary.size} "
                "ids); let the CLI link it from the data module"
            )
        modes = list(torch._inductor.list_mode_options())
        if compile_mode not in modes:
            raise ModelConfigError(f"model.compile_mode={compile_mode!r} is not a torch.compile mode; choose from "
                                   f"{', '.join(modes)}")
        self.config = arch
        self.model = Transformer(arch)
        if compile:
            self.compile_step(mode=compile_mode)
        self.group_names, group_of_id = range_groups(self.vocabulary, arch.vocab_size)
        self.register_buffer("group_of_id", group_of_id, persistent=False)
        self.flops_per_symbol = flops_per_symbol(arch, arch.max_seq_len)
        # (nats, symbols, raw-byte nats, raw bytes) of the validation epoch so far, on this rank.
        self._val_sums: torch.Tensor | None = None
        self._throughput = ThroughputWindow()  # perf/symbols_per_s: over the steps between logged figures
        # Targets per loss group in the batches trained on so far (all ranks), moved to the device by the first step;
        # it travels in the checkpoint. Counted whether or not `loss_targets` trains on them. None: unknown (resumed
        # from a checkpoint that did not count them).
        self._targets_seen: torch.Tensor | None = torch.zeros(len(self.group_names), dtype=torch.float64)

    def weight_changes(self, hparams: dict) -> list[str]:
        """"field: saved -> now" for what in a checkpoint's hyper-parameters gives weights of another shape or
        meaning than this model's: the shape fields of the architecture and the vocabulary layout."""
        def weights(hp: dict) -> dict:
            arch = hp.get("arch") or {}
            return {"arch": {k: arch.get(k) for k in WEIGHT_FIELDS},
                    "vocabulary": Vocabulary.from_dict(hp.get("vocabulary") or {}).to_dict()}

        return changed_fields(weights(hparams), weights(self.hparams))

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # Before Lightning loads the state dict: a config that does not match gets one line, not a size-mismatch dump.
        changes = self.weight_changes(checkpoint.get("hyper_parameters") or {})
        if changes:
            raise ModelConfigError(f"the checkpoint's weights do not fit this model ({'; '.join(changes)}); use the "
                                   "config it was trained with (its run folder keeps config.yaml)")
        seen = checkpoint.get("targets_seen")
        self._targets_seen = None if seen is None else torch.tensor(
            [seen.get(name, 0) for name in self.group_names], dtype=torch.float64)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["targets_seen"] = self.targets_seen()

    def targets_seen(self) -> dict[str, int] | None:
        """Targets per loss group (special, raw, each compressed view) in the batches trained on so far, summed over
        ranks: what the run saw, e.g. its raw bytes. None after resuming from a checkpoint that did not count them."""
        if self._targets_seen is None:
            return None
        return dict(zip(self.group_names, (int(n) for n in self._targets_seen.tolist())))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model(batch["input_ids"], batch["positions"], batch["doc_ids"])

    def batch_nats(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Cross-entropy in nats per target of `batch`, flattened; 0 at IGNORE_INDEX targets."""
        return batch_nats(self.model, batch)

    def compile_step(self, **options) -> None:
        """torch.compile `batch_nats` (torch.compile's `options`): the model and its cross-entropy become one graph,
        so Inductor fuses the loss and its backward into the model's rather than leaving them to eager kernels the
        host launches one by one (on the H200 as fast as compiling the model alone: BENCHMARKS). The per-view sums
        stay eager: they are detached statistics."""
        self.batch_nats = torch.compile(self.batch_nats, **options)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self._log_throughput(batch["input_ids"].numel())
        targets = batch["targets"].flatten()
        nats = self.batch_nats(batch)  # 0 at IGNORE_INDEX targets
        # Per-group sums by index_add_ with 0/1 weights, not boolean indexing or .tolist(): the step stays free of
        # host syncs, so the CPU can queue the next kernels while the GPU works (the logger syncs every n steps).
        valid = (targets != IGNORE_INDEX).double()
        groups = self.group_of_id[targets.clamp(min=0)]
        n_groups = len(self.group_names)
        local = torch.zeros(2 * n_groups, dtype=torch.float64, device=nats.device)
        local[:n_groups].index_add_(0, groups, nats.detach().double() * valid)
        local[n_groups:].index_add_(0, groups, valid)
        sums, counts = self._sum_over_ranks(local).split(n_groups)
        if self._targets_seen is not None:
            self._targets_seen = self._targets_seen.to(counts.device) + counts.detach()
        trained_sum, n_trained = sums.sum(), counts.sum()
        if self.loss_targets == "raw":  # every target is still scored and logged; only raw bytes are trained on
            nats = nats * (groups == RAW_GROUP)
            trained_sum, n_trained = sums[RAW_GROUP], counts[RAW_GROUP]
        n_trained = n_trained.clamp(min=1)
        # DDP averages gradients over ranks, hence the world size: the result is the global batch's mean.
        loss = nats.sum() * (self._world_size() / n_trained).to(nats.dtype)
        # Not prog_bar: Lightning turns progress-bar metrics into Python numbers after every batch (a GPU sync each
        # step, found by the gpu test); SparseMetricsProgressBar shows it from the callback metrics every n steps.
        self.log("train/loss", trained_sum / n_trained)
        if self._logging_step():
            # A view with no target in this batch logs NaN (no loss to report), decided on the device.
            per_group = torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, math.nan))
            for name, value in zip(self.group_names, per_group):
                self.log(f"train/loss_{name}", value)
        return loss

    def on_validation_epoch_start(self) -> None:
        # Made inside the loop's own grad mode (validate() runs under inference_mode, fit's loop may not).
        self._val_sums = torch.zeros(4, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        targets = batch["targets"]
        nats = self.batch_nats(batch)
        byte_sum, n_bytes = byte_nats(nats, targets)
        step = torch.stack([nats.sum().double(), (targets != IGNORE_INDEX).sum().double(), byte_sum.double(),
                            torch.as_tensor(n_bytes, device=nats.device).double()])
        self._val_sums += step

    def on_validation_epoch_end(self) -> None:
        # Sums over every rank's windows, then one division: val/bpb is total bits / total raw bytes, the same
        # figure a single process gets.
        nats, symbols, byte_nats_sum, n_bytes = self._sum_over_ranks(self._val_sums).tolist()
        if symbols:
            self.log("val/loss", nats / symbols, prog_bar=True)
        if n_bytes:
            self.log("val/bpb", byte_nats_sum / LN2 / n_bytes, prog_bar=True)

    def _world_size(self) -> int:
        return self._trainer.world_size if self._trainer is not None else 1

    def _sum_over_ranks(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._trainer.strategy.reduce(tensor, reduce_op="sum") if self._world_size() > 1 else tensor

    def _logging_step(self) -> bool:
        """Whether Lightning writes this step's logs (every trainer.log_every_n_steps; other steps' values are
        dropped), or it is the last step (whose values the run ends with). Each `self.log` costs a fraction of a
        millisecond of host time, so the per-view and throughput figures are logged only on these steps. Lightning's
        own monitors (learning rate, throughput, device stats) ask the same property."""
        trainer = self._trainer
        if trainer is None:
            return True
        last = 0 < trainer.max_steps <= self.global_step + 1
        return last or trainer._logger_connector.should_update_logs

    def _log_throughput(self, symbols: int) -> None:
        rate = self._throughput.step(time.perf_counter(), symbols, self._logging_step())
        if rate is not None:
            # Host tensors: Lightning turns a Python number into a tensor on the module's device by a blocking copy,
            # which waits for the GPU to finish every queued kernel. Once per step, that kept the CPU from queueing
            # ahead and left the H200 idle ~10% of a d768 step (tools/bench_train.py profile, 2026-12-03).
            figures = {"perf/symbols_per_s": rate, "perf/tflops_per_s": rate * self.flops_per_symbol / 1e12,
                       "perf/flops_per_symbol": float(self.flops_per_symbol)}
            for name, value in figures.items():
                self.log(name, torch.tensor(value, dtype=torch.float64))

    def on_train_epoch_start(self) -> None:
        self._throughput.reset()  # validation and epoch ends are not training time

    def on_validation_start(self) -> None:
        self._throughput.reset()

    def _grad_scaler(self):
        return getattr(self.trainer.precision_plugin, "scaler", None)  # only fp16 mixed precision has one

    def configure_optimizers(self):
        hp = self.optim
        params = [p for p in self.model.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": hp.weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
        # Fused AdamW (one kernel for all parameters) unless a GradScaler must unscale gradients before clipping.
        impl = {"fused": True} if self._grad_scaler() is None else {"foreach": self.device.type == "cuda"}
        optimizer = torch.optim.AdamW(groups, lr=hp.lr, betas=tuple(hp.betas), eps=hp.eps, **impl)
        total = self.trainer.max_steps if self.trainer.max_steps > 0 else int(self.trainer.estimated_stepping_batches)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, hp.warmup_steps, total, hp.min_lr_ratio)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        # Lightning refuses to clip for any fused optimizer, as if it had to unscale fp16 gradients itself; with no
        # GradScaler (bf16, fp32) the gradients are already true, so clip them here (sync-free, foreach kernels).
        if not gradient_clip_val or self._grad_scaler() is not None:
            return super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if gradient_clip_algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
