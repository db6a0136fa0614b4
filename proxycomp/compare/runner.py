"""Runs a comparison: each arm trained through `proxycomp fit`'s own LightningCLI, scored, and recorded.

A run is one arm at one training seed (initialization, document order and view draws); every run shares the
corpus split and the SentencePiece model, made with the spec's `seed`. State lives in two folders. `out` holds what
a reader needs and what must survive a device call: the results JSON (spec, per-run status, plans, curves, scores),
the markdown table, the plot and the shared SentencePiece model. `work_dir` holds what is large or disposable: each
run's generated `proxycomp fit` config, checkpoints and logs. A finished run is skipped; an unfinished one resumes
from its last checkpoint in `work_dir` if there is one, else starts again.
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import yaml

from proxycomp.compare.arms import ARMS, Arm, CompareError
from proxycomp.compare.budget import ArmPlan, Budget, plan_arm
from proxycomp.compare.curve import ValBpbCurve, sample_documents
from proxycomp.compare.report import contrasts, markdown, plot
from proxycomp.compare.spec import CompareSpec
from proxycomp.compare.stability import compressor_stats, delete_characters
from proxycomp.data import Corpus, DataConfig, MixingSchedule, load_corpus
from proxycomp.defaults import GRAD_CLIP, default_device, default_precision
from proxycomp.files import write_atomic
from proxycomp.scoring import score_documents
from proxycomp.views import ViewConfig, train_spm

RESULTS_FORMAT = 3  # 2: runs per training seed; 3: held-out documents drawn at random, raw_subset steps with proxy_spm
RESULTS_FILE, TABLE_FILE, PLOT_FILE, SPM_FILE = "results.json", "results.md", "bpb_vs_compute.png", "spm.model"
STATS_VIEWS = ("raw", "spm", "zstd", "brotli")


class Comparison:
    def __init__(self, spec: CompareSpec, out: Path, work_dir: Path | None = None,
                 log: Callable[[str], None] = lambda m: print(f"[compare] {m}", file=sys.stderr, flush=True)):
        self.spec = spec
        self.out = Path(out)
        self.work_dir = Path(work_dir) if work_dir else self.out / "work"
        self.log = log
        self.budget = Budget(spec.budget, spec.match)
        self.results = self._load_results()
        self._corpus: Corpus | None = None

    # ---- results folder ---------------------------------------------------------------------------------
    def _load_results(self) -> dict[str, Any]:
        path = self.out / RESULTS_FILE
        if not path.is_file():
            return {"format": RESULTS_FORMAT, "spec": self.spec.to_dict(), "arms": {}, "compressors": None}
        try:
            results = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise CompareError(f"{path}: not valid JSON ({err.msg}); delete it to start the comparison over") from None
        if results.get("format") != RESULTS_FORMAT:
            raise CompareError(f"{path}: results format {results.get('format')!r}, this code reads {RESULTS_FORMAT}")
        changed = self.spec.differences(results["spec"])
        if changed:
            raise CompareError(
                f"{path} was made with other settings ({'; '.join(changed)}); use the same settings to resume "
                "or another --out"
            )
        results["spec"] = self.spec.to_dict()  # execution fields may have changed
        return results

    def save(self) -> None:
        """Results JSON, markdown table and plot, each written atomically."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.results["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.results["contrasts"] = contrasts(self.results["arms"])
        write_atomic(self.out / RESULTS_FILE, json.dumps(self.results, indent=1))
        write_atomic(self.out / TABLE_FILE, markdown(self.results, "Byte vs proxy vs tokenizer at equal compute"))
        if any(run.get("curve") for runs in self.results["arms"].values() for run in runs.values()):
            plot(self.results, self.out / PLOT_FILE)

    def record(self, arm: str, seed: int) -> dict[str, Any]:
        """The results of one run (empty if it never started); JSON keys seeds as strings."""
        return self.results["arms"].get(arm, {}).get(str(seed), {})

    # ---- plans --------------------------------------------------------------------------------------------
    def plan(self, arm: Arm) -> ArmPlan:
        """The arm's steps: from the budget, or a twin's from its partner's."""
        s = self.spec
        steps = self.plan(ARMS[arm.twin_of]).max_steps if arm.twin_of else None
        return plan_arm(arm, self.budget, s.model, s.seq_len, s.batch_size, s.spm_vocab_size, steps)

    def dry_run(self, arms: Sequence[Arm]) -> list[ArmPlan]:
        return [self.plan(arm) for arm in arms]

    # ---- the run ------------------------------------------------------------------------------------------
    def run(self, arms: Sequence[Arm], seeds: Sequence[int] | None = None) -> dict[str, Any]:
        """Every arm at every training seed (default: the spec's seed), seed by seed: a call cut short by a time
        limit leaves whole seeds of every arm, which is what the contrasts pair, rather than all seeds of the first
        arms."""
        seeds = list(seeds or [self.spec.seed])
        if self.spec.cpu_threads and not torch.cuda.is_available():
            torch.set_num_threads(self.spec.cpu_threads)
        if any("spm" in arm.views for arm in arms) or self.results["compressors"] is None:
            self.spm_model()
        if self.results["compressors"] is None:
            self.log("measuring compressor ratio and stability")
            self.results["compressors"] = self.compressor_stats()
            self.save()
        for seed in seeds:
            for arm in arms:
                if self.record(arm.name, seed).get("status") == "done":
                    self.log(f"{arm.name} seed {seed}: done, skipped")
                    continue
                self.results["arms"].setdefault(arm.name, {})[str(seed)] = self.run_arm(arm, seed)
                self.save()
        self.save()
        return self.results

    def run_arm(self, arm: Arm, seed: int) -> dict[str, Any]:
        from proxycomp.lightning_cli import build_cli  # Lightning is slow to import; the dry run does without

        plan = self.plan(arm)
        name = f"{arm.name} seed {seed}"
        arm_dir = self.work_dir / arm.name / f"seed{seed}"
        last = arm_dir / "checkpoints" / "last.ckpt"
        config = self.fit_config(arm, plan, arm_dir, seed)
        arm_dir.mkdir(parents=True, exist_ok=True)
        config_path = arm_dir / "fit.yaml"
        write_atomic(config_path, yaml.safe_dump(config, sort_keys=False))
        record = {"status": "running", "plan": plan.to_dict(), "data": config["data"], "fit_config": str(config_path)}
        self.results["arms"].setdefault(arm.name, {})[str(seed)] = record
        self.save()
        resume = last.is_file()
        self.log(f"{name}: {plan.max_steps} steps of {plan.symbols_per_step} symbols at {plan.flops_per_symbol:.3g} "
                 f"FLOPs/symbol{', resuming from ' + str(last) if resume else ''}")
        start = time.perf_counter()
        cli = build_cli(["fit", "--config", str(config_path), *(["--ckpt_path", str(last)] if resume else [])])
        trainer, lm, dm = cli.trainer, cli.model, cli.datamodule
        if trainer.global_step != plan.max_steps:
            raise CompareError(f"{name} stopped at step {trainer.global_step} of {plan.max_steps}; "
                               "run the tool again to resume it")
        if lm.flops_per_symbol != plan.flops_per_symbol:
            raise RuntimeError(f"{name}: the model counts {lm.flops_per_symbol} FLOPs/symbol, the plan "
                               f"{plan.flops_per_symbol}; budget accounting and ProxyLM disagree")
        fit_s = time.perf_counter() - start
        curve = next(c for c in trainer.callbacks if isinstance(c, ValBpbCurve)).points
        self.log(f"{name}: fit in {fit_s:.0f} s (data setup included), scoring")
        documents = self.eval_documents([d.data for d in dm.corpus.val])
        # Lightning's teardown leaves the model on the CPU; score it where it trained (the Triton backend needs CUDA).
        model = lm.model.to(default_device())
        s, view = self.spec, dm.scored_view
        clean = score_documents(model, documents, s.seq_len, s.stride, view, s.eval_batch_size)
        perturbed = score_documents(model, self.perturbed(documents), s.seq_len, s.stride, view, s.eval_batch_size)
        used = plan.flops if self.budget.match == "flops" else plan.symbols
        seen = lm.targets_seen()
        record.update({
            "status": "done", "steps": trainer.global_step, "symbols": plan.symbols, "flops": plan.flops,
            # what the run saw: targets per view (raw: its raw bytes) and passes over the train documents
            "targets_seen": seen, "raw_bytes_seen": seen and seen["raw"], "epochs": dm.epochs_passed(),
            "train_bytes": dm.corpus.report.train_bytes,
            "budget_share": used / self.budget.value, "resumed": resume, "curve": curve,
            "val_bpb": clean.bits_per_byte, "val_bpb_raw_ids": clean.raw_ids_bits_per_byte,
            "val_bpb_perturbed": perturbed.bits_per_byte, "eval_bytes": clean.bytes, "eval_documents": clean.documents,
            "fit_s": fit_s, "wall_s": time.perf_counter() - start,
        })
        self.log(f"{name}: val bpb {clean.bits_per_byte:.4f} (perturbed {perturbed.bits_per_byte:.4f})")
        return record

    def fit_config(self, arm: Arm, plan: ArmPlan, arm_dir: Path, seed: int) -> dict[str, Any]:
        """The `proxycomp fit` config of one run (linked fields — vocab, context, total_steps — left to the CLI).

        Arms with the same views and schedule (a proxy arm and its twins) get the same data settings, so the same
        batches at the same seed (raw_subset's without the dropped views), and the same initialization."""
        s = self.spec
        every = max(1, plan.max_steps // s.curve_points)
        data = DataConfig(
            corpus=s.corpus,
            views=ViewConfig(names=tuple(arm.views), spm_vocab_size=s.spm_vocab_size,
                             spm_train_bytes=s.spm_train_bytes,
                             spm_model_file=str(self.out / SPM_FILE) if "spm" in arm.views else None),
            mixing=MixingSchedule(kind=arm.schedule),
            seq_len=s.seq_len, batch_size=s.batch_size, num_workers=s.num_workers,
            artifacts_dir=str(arm_dir / "data"), seed=s.seed, stream_seed=seed, drop_views=arm.drop_views,
        ).to_dict()
        del data["mixing"]["total_steps"]  # linked from trainer.max_steps by the CLI
        return {
            "seed_everything": seed,
            "trainer": {
                "max_steps": plan.max_steps,
                "precision": s.precision or default_precision(),
                "gradient_clip_val": GRAD_CLIP,
                "limit_val_batches": 0,  # the curve callback scores the arm's own metric instead
                "num_sanity_val_steps": 0,
                "log_every_n_steps": max(1, min(50, every)),
                "enable_progress_bar": False,
                "enable_model_summary": False,
                "default_root_dir": str(arm_dir),
                "logger": [{"class_path": "lightning.pytorch.loggers.CSVLogger",
                            "init_args": {"save_dir": str(arm_dir), "name": "logs"}}],
                "callbacks": [{"class_path": "proxycomp.compare.curve.ValBpbCurve",
                               "init_args": {"every_n_steps": every, "max_bytes": s.curve_max_bytes,
                                             "stride": s.stride, "batch_size": s.eval_batch_size,
                                             "seed": s.seed}}],
            },
            "checkpoint": {"dirpath": str(arm_dir / "checkpoints"), "monitor": None, "save_top_k": 0,
                           "save_last": True, "every_n_train_steps": every},
            "model": {"arch": {**s.model, "attn_backend": s.attn_backend},
                      "optim": {"lr": s.peak_lr, "warmup_steps": max(1, round(s.lr_warmup_frac * plan.max_steps))},
                      "compile": s.compile, "loss_targets": arm.loss_targets},
            "data": data,
        }

    # ---- shared inputs ------------------------------------------------------------------------------------
    @property
    def corpus(self) -> Corpus:
        if self._corpus is None:
            s = self.spec
            self._corpus = load_corpus(s.corpus, seed=s.seed)
            self.log(self._corpus.report.summary())
        return self._corpus

    def spm_model(self) -> bytes:
        """The comparison's one SentencePiece model (proxy_spm, bpe and the statistics share it), trained once
        on the train split with the data module's recipe and kept in `out`."""
        path = self.out / SPM_FILE
        if not path.is_file():
            self.log(f"training the SentencePiece model ({self.spec.spm_vocab_size} pieces)")
            s = self.spec
            model = train_spm([d.data for d in self.corpus.train], s.spm_vocab_size, s.spm_train_bytes, s.seed)
            self.out.mkdir(parents=True, exist_ok=True)
            write_atomic(path, model)
        return path.read_bytes()

    def perturbed(self, documents: Sequence[bytes]) -> list[bytes]:
        return [delete_characters(d, self.spec.perturb_rate, self.spec.seed + k) for k, d in enumerate(documents)]

    def compressor_stats(self) -> dict[str, dict[str, float]]:
        s = self.spec
        views = ViewConfig(STATS_VIEWS, s.spm_vocab_size).build(self.spm_model())
        val = [d.data for d in self.corpus.val]
        drawn = sample_documents(val, None, s.seed)
        stability = [d for d in drawn if len(d) <= s.stats_max_doc_bytes][: s.stats_documents] or [min(val, key=len)]
        return compressor_stats(views, self.eval_documents(val), stability, s.perturb_rate, s.seed)

    def eval_documents(self, val: Sequence[bytes]) -> list[bytes]:
        """The held-out documents of the final scores: `eval_max_bytes` of them drawn with the spec's seed, the same
        for every arm and training seed."""
        return sample_documents(val, self.spec.eval_max_bytes, self.spec.seed)
