"""The equal-compute comparison: budget accounting, token scoring, stability, the twins' streams, statistics, and a CPU
smoke of all arms."""
from __future__ import annotations

import json
import math
import shutil
import sysconfig
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonargparse import ArgumentError

from proxycomp.cli import main as proxycomp
from proxycomp.compare import ARMS, Budget, CompareError, CompareSpec, Comparison, parse_arms, plan_arm
from proxycomp.compare.arms import SIZE_LR
from proxycomp.compare.cli import parse_seeds, parse_spec
from proxycomp.compare.curve import sample_documents
from proxycomp.compare.stats import paired_interval, t_quantile, verdict, welch_interval
from proxycomp.compare.spec import PRESETS
from proxycomp.compare.stability import compressor_stats, delete_characters, levenshtein
from proxycomp.data import (
    CURSOR_KEY, CorpusConfig, CorpusError, DataConfig, MixingSchedule, ProxyDataModule, ReplayStream, ScheduleError,
    StreamCursor,
)
from proxycomp.data.datamodule import DataStateError
from proxycomp.data.packing import documents_per_epoch, epochs_passed
from proxycomp.lit import ProxyLM
from proxycomp.model import ModelConfig, Transformer
from proxycomp.scoring import score_documents
from proxycomp.views import ViewConfig, serialize_views, train_spm
from proxycomp.vocab import BOS, EOS, PAD, RAW_OFFSET, RAW_SIZE, SENTINELS

STDLIB_PACKAGES = ("json", "email", "http", "urllib", "logging", "concurrent", "importlib", "xml", "wsgiref", "html")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    """About 60 real stdlib modules of 0.2-12 KB, one folder per package."""
    stdlib, root = Path(sysconfig.get_paths()["stdlib"]), tmp_path_factory.mktemp("corpus")
    for package in STDLIB_PACKAGES:
        for f in sorted((stdlib / package).rglob("*.py")):
            if 200 <= f.stat().st_size <= 12_000:
                target = root / f.relative_to(stdlib)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, target)
    return root


def _documents(corpus_dir: Path, n: int) -> list[bytes]:
    return [p.read_bytes() for p in sorted(corpus_dir.rglob("*.py"))[:n]]


# ---- stability ----------------------------------------------------------------------------------------------
def _edit_distance_table(a, b) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=70), st.lists(st.integers(0, 3), max_size=70))
def test_levenshtein_matches_the_dynamic_programming_table(a, b):
    assert levenshtein(a, b) == _edit_distance_table(a, b) == levenshtein(b, a)


def test_delete_characters_drops_the_rate_of_whole_characters():
    text = "é→ab\u2581c" * 50
    out = delete_characters(text.encode(), 0.1, seed=3)
    kept = out.decode("utf-8")  # whole characters go, so the rest stays valid UTF-8
    assert len(kept) == len(text) - round(0.1 * len(text))
    assert out == delete_characters(text.encode(), 0.1, seed=3) != delete_characters(text.encode(), 0.1, seed=4)
    assert levenshtein(list(text), list(kept)) == len(text) - len(kept)
    with pytest.raises(ValueError, match="rate"):
        delete_characters(b"abc", 1.0, 0)


def test_general_compressors_are_rewritten_by_small_edits_and_the_tokenizer_is_not(corpus_dir):
    docs = _documents(corpus_dir, 40)
    views = ViewConfig(("raw", "spm", "zstd"), 400).build(train_spm(docs[8:], 400, seed=0))
    stats = compressor_stats(views, docs[:8], docs[:4], rate=0.1, seed=0)
    assert stats["raw"]["bytes_per_symbol"] == 1.0 and stats["spm"]["bytes_per_symbol"] > 1.2
    assert abs(stats["raw"]["edit_distance"] - 0.1) < 0.02  # deletions are the whole raw edit
    assert stats["spm"]["edit_distance"] < 0.4 < 0.8 < stats["zstd"]["edit_distance"]


# ---- budget -------------------------------------------------------------------------------------------------
MODEL = {"d_model": 32, "n_layers": 1, "n_heads": 2}


@pytest.mark.parametrize("match", ["flops", "symbols"])
def test_every_arm_spends_the_budget_to_within_one_step(match):
    budget = Budget(3e9 if match == "flops" else 4e5, match)
    for arm in ARMS.values():
        plan = plan_arm(arm, budget, MODEL, 64, 4, 500)
        spent = plan.flops if match == "flops" else plan.symbols
        step = plan.symbols_per_step * (plan.flops_per_symbol if match == "flops" else 1)
        assert spent <= budget.value < spent + step
    byte, bpe = (plan_arm(ARMS[n], budget, MODEL, 64, 4, 500) for n in ("byte", "bpe"))
    # A bigger head costs FLOPs: equal FLOPs means fewer steps for the token arm, equal symbols the same steps.
    assert (bpe.max_steps < byte.max_steps) == (match == "flops")
    assert (bpe.flops > byte.flops) == (match == "symbols")


def test_the_plan_counts_the_flops_proxylm_logs():
    plan = plan_arm(ARMS["proxy_zstd"], Budget(1e10), MODEL, 64, 4, 500)
    lm = ProxyLM(ModelConfig(vocab_size=plan.vocab_size, max_seq_len=64, **MODEL))
    assert lm.flops_per_symbol == plan.flops_per_symbol


def test_bad_budgets_and_arm_lists_are_refused():
    with pytest.raises(CompareError, match="buys no step"):
        plan_arm(ARMS["byte"], Budget(1e3), MODEL, 64, 4, 500)
    with pytest.raises(CompareError, match="--match must be one of flops, symbols"):
        Budget(1e9, "tokens")
    with pytest.raises(CompareError, match="positive"):
        Budget(0)
    with pytest.raises(CompareError, match="known"):
        parse_arms("byte,proxy_gzip")
    with pytest.raises(CompareError, match="twice"):
        parse_arms("byte,byte")
    assert [a.name for a in parse_arms("raw_subset,proxy_spm")] == ["proxy_spm", "raw_subset"]
    with pytest.raises(DataStateError, match="drop_views"):
        DataConfig(views=ViewConfig(("raw", "spm")), drop_views=("zstd",))
    with pytest.raises(DataStateError, match="drop_views"):
        DataConfig(views=ViewConfig(("raw", "spm")), drop_views=("raw",))


# ---- token scoring ------------------------------------------------------------------------------------------
def test_token_bpb_counts_every_target_after_the_prompt(corpus_dir):
    docs = _documents(corpus_dir, 30)
    view = ViewConfig(("raw", "spm"), 400).build(train_spm(docs, 400, seed=0))["spm"]
    model = Transformer(ModelConfig(vocab_size=320 + 400, d_model=32, n_layers=1, n_heads=2, max_seq_len=4096))
    doc = docs[0]
    ids = torch.tensor(view.serialize(doc))
    with torch.no_grad():
        logits = model(ids[None, :-1])[0]
    nats = torch.nn.functional.cross_entropy(logits[1:], ids[2:], reduction="sum")  # target 0 is the given <spm>
    result = score_documents(model, [doc], seq_len=4096, stride=4096, view=view)
    assert result.bytes == len(doc)
    assert result.bits_per_byte == pytest.approx(float(nats) / math.log(2) / len(doc), rel=1e-5)


# ---- data: tokens schedule, replay stream -------------------------------------------------------------------
def _dm(corpus_dir: Path, tmp_path: Path, views=("raw", "spm"), schedule="paper", spm_model_file=None,
        **overrides) -> ProxyDataModule:
    args = dict(seq_len=64, batch_size=2, num_workers=0, artifacts_dir=str(tmp_path / "art"))
    return ProxyDataModule(
        CorpusConfig("folder", str(corpus_dir), val_fraction=0.1),
        ViewConfig(tuple(views), spm_vocab_size=400, spm_model_file=spm_model_file),
        MixingSchedule(schedule, total_steps=20), **{**args, **overrides},
    )


def test_tokens_schedule_shows_only_the_compressed_view(corpus_dir, tmp_path):
    dm = _dm(corpus_dir, tmp_path, schedule="tokens")
    dm.setup("fit")
    batches = [b for _, b in zip(range(6), dm.train_dataloader())] + list(dm.val_dataloader())
    for batch in batches:
        ids = batch["input_ids"]
        assert not ((ids >= RAW_OFFSET) & (ids < RAW_OFFSET + RAW_SIZE)).any()
        assert (ids >= dm.vocabulary.offset("spm")).any()
    assert all(any((b["input_ids"] == SENTINELS["spm"][0]).any() for b in part) for part in (batches[:6], batches[6:]))
    with pytest.raises(ScheduleError, match="one compressed view"):
        _dm(corpus_dir, tmp_path, schedule="tokens", views=["raw", "spm", "zstd"])


def test_data_module_refuses_missing_or_foreign_files(corpus_dir, tmp_path):
    with pytest.raises(CorpusError, match="spm_model_file"):
        _dm(corpus_dir, tmp_path, spm_model_file=str(tmp_path / "none.model")).spm_model
    np.save(tmp_path / "foreign.npy", np.array([BOS, 5000, 2], dtype=np.int32))
    for name in ("none.npy", "foreign.npy"):
        dm = _dm(corpus_dir, tmp_path, views=["raw"], schedule="byte", replay_file=str(tmp_path / name))
        dm.setup("fit")
        with pytest.raises(CorpusError, match="replay_file"):
            dm.train_dataloader()


def _serialized(lengths: list[int], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([serialize_views([("raw", rng.integers(RAW_OFFSET, RAW_OFFSET + 256, n).astype(np.int32))])
                           for n in lengths])


def test_replay_stream_packs_the_stream_once_in_order_and_resumes():
    symbols = _serialized([30, 5, 90, 12, 40])
    stream = ReplayStream(symbols, seq_len=16, batch_size=3)
    batches = list(stream)
    assert len(batches) == stream.num_batches == math.ceil(math.ceil((len(symbols) - 1) / 16) / 3)
    inputs = torch.cat([b["input_ids"].reshape(-1) for b in batches]).numpy()
    assert (inputs[: len(symbols)] == symbols).all() and (inputs[len(symbols):] == 0).all()
    positions = torch.cat([b["positions"].reshape(-1) for b in batches]).numpy()[: len(symbols) - 1]
    assert (positions[symbols[:-1] == BOS] == 0).all()
    resumed = list(ReplayStream(symbols, 16, 3, batches_consumed=2, cursors={0: StreamCursor(2)}))
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(resumed, batches[2:]))
    assert len(resumed) == len(batches) - 2


def _is_raw(ids) -> np.ndarray:
    ids = np.asarray(ids)
    return (ids >= RAW_OFFSET) & (ids < RAW_OFFSET + RAW_SIZE)


@pytest.mark.parametrize("workers", [0, 2])
def test_raw_subset_step_k_holds_the_raw_symbols_of_proxy_spm_step_k(corpus_dir, tmp_path, workers):
    proxy = _dm(corpus_dir, tmp_path / "p", num_workers=workers)
    subset = _dm(corpus_dir, tmp_path / "s", num_workers=workers, drop_views=("spm",))
    for dm in (proxy, subset):
        dm.setup("fit")
    dropped = {*SENTINELS["spm"], *proxy.vocabulary.range("spm")}
    raw_targets = spm_inputs = 0
    for _, (p, s) in zip(range(12), zip(proxy.train_dataloader(), subset.train_dataloader())):
        assert torch.equal(p[CURSOR_KEY], s[CURSOR_KEY])  # the same place in the same stream
        for row in range(p["input_ids"].shape[0]):
            kept = [x for x in p["input_ids"][row].tolist() if x not in dropped]
            spm_inputs += p["input_ids"].shape[1] - len(kept)
            ids = s["input_ids"][row].tolist()
            # the partner's inputs without spm, then at most the window's last symbol, then padding
            assert ids[:len(kept)] == kept and all(x == PAD for x in ids[len(kept) + 1:])
            # every raw byte the partner predicted is predicted here, from the same raw symbol before it
            assert _is_raw(p["targets"][row]).sum() == _is_raw(s["targets"][row]).sum()
            raw_targets += int(_is_raw(p["targets"][row]).sum())
            # what is left of a paired context is the raw-only context of its text: </raw> then <eos>
            closes = [i for i, x in enumerate(ids[:-1]) if x == SENTINELS["raw"][1] and ids[i + 1] != PAD]
            assert all(ids[i + 1] == EOS for i in closes)
    assert raw_targets > 0 and spm_inputs > 0


# ---- specs and the tool -------------------------------------------------------------------------------------
def test_presets_parse_and_bad_fields_are_named(tmp_path):
    presets = sorted(p.name.removesuffix(".yaml") for p in PRESETS.iterdir() if p.name.endswith(".yaml"))
    assert set(presets) >= {"cpu_smoke", "h200_small", "h200_base"}
    for preset in presets:
        assert isinstance(parse_spec(["--preset", preset, "--out", "o"])[0].corpus, CorpusConfig)
    bad = tmp_path / "bad.yaml"
    bad.write_text("budget: 1e9\nlayers: 3\n")
    with pytest.raises(ArgumentError, match="layers"):
        parse_spec(["--preset", str(bad), "--out", "o"])
    with pytest.raises(CompareError, match="no file"):
        parse_spec(["--preset", "h100_huge", "--out", "o"])
    assert parse_spec(["--corpus.max_documents", "null", "--out", "o"])[0].corpus.max_documents is None
    assert parse_spec(["--budget", "3", "--out", "o"])[0].budget == 3.0
    assert parse_spec(["--budget", "5e15", "--out", "o"])[0].budget == 5e15
    for flag, value in (("--lr", "fast"), ("--seq_len", "long")):
        with pytest.raises(ArgumentError, match=flag.lstrip("-")):
            parse_spec([flag, value, "--out", "o"])
    with pytest.raises(CompareError, match="model_size"):
        CompareSpec(model_size="huge")


def test_compare_reports_bad_input_in_one_line(tmp_path, capsys):
    cases = [
        (["--arms", "byte,gzip"], "unknown"),
        (["--budget", "0"], "positive"),
        (["--preset", "nope"], "known presets"),
        (["--seq_len", "x"], "seq_len"),
        (["--corpus.source", "folder", "--arms", "byte"], "needs data.corpus.path"),  # an error of the data layer
    ]
    for extra, message in cases:
        assert proxycomp(["compare", "--out", str(tmp_path / "o"), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()  # progress lines may come first
        assert message in err[-1] and err[-1].startswith("proxycomp compare: error:")
        assert not any("Traceback" in line for line in err)
    assert proxycomp(["compare", "--out", str(tmp_path / "o"), "--preset", "h200_base", "--dry_run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(ARMS) and all("steps" in line for line in lines)
    assert len({line.split("vocab")[1] for line in lines if "spm" in line.split(":")[0]}) == 1  # twins step alike
    # a flag overrides the preset
    assert proxycomp(["compare", "--out", str(tmp_path / "o"), "--preset", "h200_base", "--budget", "6e15",
                      "--match", "flops", "--arms", "byte", "--dry_run"]) == 0
    assert "357 steps" in capsys.readouterr().out  # 6e15 / (2.56e8 FLOPs x 65,536 symbols per step)
    assert proxycomp(["compare", "--out", str(tmp_path / "o"), "--resume_from", str(tmp_path / "none")]) == 2
    assert "no results.json" in capsys.readouterr().err


def test_results_from_other_settings_are_not_resumed(tmp_path):
    Comparison(CompareSpec(budget=1e9), tmp_path).save()
    Comparison(CompareSpec(budget=1e9, eval_batch_size=2), tmp_path)  # execution settings may change
    with pytest.raises(CompareError, match=r"other settings \(budget: 1000000000.0 -> 2000000000.0\)"):
        Comparison(CompareSpec(budget=2e9), tmp_path)


class OrderedComparison(Comparison):
    """Records the order of runs instead of training (the order is what is under test)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.order = []

    def run_arm(self, arm, seed):
        self.order.append((arm.name, seed))
        return {"status": "done", "plan": self.plan(arm).to_dict(), "val_bpb": 1.0}


def test_seeds_run_one_after_another_across_arms(tmp_path):
    """A call cut short leaves whole seeds of every arm: seed 0 of each arm before any arm's seed 1."""
    comparison = OrderedComparison(CompareSpec(budget=4e5, match="symbols"), tmp_path)
    comparison.results["compressors"] = {}  # measured already; no arm here needs the tokenizer
    done = {"status": "done", "plan": comparison.plan(ARMS["proxy_zstd"]).to_dict(), "val_bpb": 1.0}
    comparison.results["arms"] = {"proxy_zstd": {"0": done}}
    comparison.run([ARMS["byte"], ARMS["proxy_zstd"]], seeds=[0, 1, 2])
    assert comparison.order == [("byte", 0), ("byte", 1), ("proxy_zstd", 1), ("byte", 2), ("proxy_zstd", 2)]


@pytest.mark.parametrize("match", ["flops", "symbols"])
def test_twins_differ_from_their_partner_in_one_setting_only(tmp_path, match):
    """Same data settings (hence batches), steps, learning-rate schedule and initialization (the same views, so the
    same vocabulary, and seed) as the partner, at every seed; the one difference is the twin's."""
    spec = CompareSpec(budget=3e11 if match == "flops" else 4e5, match=match)
    comparison = Comparison(spec, tmp_path)

    def config(name: str, seed: int) -> dict:
        arm = ARMS[name]
        c = comparison.fit_config(arm, comparison.plan(arm), tmp_path / "runs" / str(seed), seed)
        del c["data"]["artifacts_dir"]
        return json.loads(json.dumps(c).replace(name, "ARM"))  # paths name the arm

    def difference(a: dict, b: dict) -> dict:
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]} if isinstance(a, dict) else {"": (a, b)}

    for twin, partner, differs in (("proxy_spm_masked", "proxy_spm", ("model", "loss_targets", "raw", "all")),
                                   ("raw_subset", "proxy_spm", ("data", "drop_views", ["spm"], [])),
                                   ("proxy_zstd_masked", "proxy_zstd", ("model", "loss_targets", "raw", "all"))):
        for seed in (0, 1):
            a, b = config(twin, seed), config(partner, seed)
            section, key, mine, theirs = differs
            assert difference(a, b) == {section: (a[section], b[section])}
            assert difference(a[section], b[section]) == {key: (mine, theirs)}
        assert comparison.plan(ARMS[twin]).max_steps == comparison.plan(ARMS[partner]).max_steps
    data0, data1 = config("proxy_spm", 0), config("proxy_spm", 1)
    # a training seed changes initialization, order and view draws, not the split or the tokenizer
    assert data1["seed_everything"] == data1["data"]["stream_seed"] == 1
    assert data1["data"]["seed"] == data0["data"]["seed"] == spec.seed
    assert data0["model"]["optim"]["lr"] == SIZE_LR["tiny"]


def test_t_intervals_match_the_tables_and_pair_only_twins():
    for df, quantile in ((1, 12.706), (2, 4.303), (4, 2.776), (30, 2.042)):
        assert t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-3)
    # paired: the per-seed differences 0.1, 0.2, 0.3 -> 0.2 +- 4.303 * 0.1 / sqrt(3)
    ci = paired_interval({"0": 1.1, "1": 1.2, "2": 1.3, "9": 5.0}, {"0": 1.0, "1": 1.0, "2": 1.0})
    assert ci == pytest.approx({"mean": 0.2, "low": 0.2 - 0.24842, "high": 0.2 + 0.24842, "seeds": 3}, abs=1e-4)
    assert verdict(ci) == "inside the noise" and verdict(None).startswith("no interval")
    # Welch with equal variances and sizes: df = 4, se = sqrt(2 * 0.01 / 3)
    ci = welch_interval([1.1, 1.2, 1.3], [2.1, 2.2, 2.3])
    assert ci["mean"] == pytest.approx(-1.0) and ci["high"] == pytest.approx(-1.0 + 2.7764 * 0.08165, abs=1e-3)
    assert verdict(ci) == "outside the noise"
    assert paired_interval({"0": 1.0}, {"0": 2.0}) is None and welch_interval([1.0], [1.0, 2.0]) is None


def test_seeds_are_reported_with_paired_and_welch_intervals(tmp_path):
    spec = CompareSpec(budget=4e5, match="symbols")
    comparison = Comparison(spec, tmp_path)

    def run(arm: str, bpb: float) -> dict:
        return {"status": "done", "plan": comparison.plan(ARMS[arm]).to_dict(), "budget_share": 1.0, "wall_s": 3,
                "val_bpb": bpb, "val_bpb_raw_ids": bpb - 0.1, "val_bpb_perturbed": bpb + 0.5,
                "raw_bytes_seen": 1000, "epochs": 0.5, "train_bytes": 2000}

    comparison.results["arms"] = {
        "proxy_spm": {"0": run("proxy_spm", 2.0), "1": run("proxy_spm", 2.2), "2": run("proxy_spm", 2.1)},
        "proxy_spm_masked": {"0": run("proxy_spm_masked", 2.36), "1": run("proxy_spm_masked", 2.54),
                             "2": run("proxy_spm_masked", 2.46)},
        "raw_subset": {"0": run("raw_subset", 2.01), "1": run("raw_subset", 2.19), "2": run("raw_subset", 2.12)},
        "byte": {"0": run("byte", 1.5), "1": {"status": "running"}},
    }
    comparison.results["arms"]["raw_subset"]["2"].update(resumed=True, wall_s=1)  # its first part's time is lost
    comparison.save()
    table = (tmp_path / "results.md").read_text()
    raw_subset = next(line for line in table.splitlines() if line.startswith("| raw_subset |"))
    assert raw_subset.endswith(" | 3 |")  # the mean of the two runs made in one call, not 2.33 with the resumed one
    assert "(their time counts only the last part): raw_subset seed 2." in table
    assert "Matched on symbols" in table
    assert "| proxy_spm | raw+spm (paper) | done | 0,1,2 |" in table
    assert "| 2.1000 | 0.2000 | 2.0000 | 2.6000 |" in table
    assert "| proxy_spm_masked | raw+spm (paper, loss on raw only) | done | 0,1,2 |" in table
    assert "| raw_subset | raw+spm (paper, spm removed) | done | 0,1,2 |" in table
    assert "| 1e+03 | 0.50 |" in table and "(repeats included; the train split holds 2,000 bytes)" in table
    assert "| byte | raw (byte) | 1/2 done | 0,1 |" in table
    assert "| 1.5000 |  | 1.4000 |" in table  # one seed: no spread
    found = json.loads((tmp_path / "results.json").read_text())["contrasts"]
    # byte has one finished seed: no interval
    assert found["proxy_spm - byte (main claim)"]["val_bpb"] == pytest.approx(0.6)
    assert found["proxy_spm - byte (main claim)"]["interval"] is None
    # the masked twin is 0.35 worse at every seed give or take: paired, outside the noise
    masked = found["proxy_spm_masked - proxy_spm (predicting spm)"]
    assert masked["paired"] and masked["verdict"] == "outside the noise" and masked["interval"]["seeds"] == 3
    assert masked["interval"]["low"] > 0.2
    # raw_subset moves with proxy_spm seed by seed: +0.01, -0.01, +0.02 is inside the noise
    transfer = found["raw_subset - proxy_spm (transfer)"]
    assert transfer["paired"] and transfer["verdict"] == "inside the noise"
    assert transfer["val_bpb"] == pytest.approx(0.02 / 3)
    assert transfer["per_seed"] == pytest.approx({"0": 0.01, "1": -0.01, "2": 0.02})
    assert "| raw_subset - proxy_spm (transfer) | +0.0067 | +0.0067 | [" in table
    assert "paired | 3 | 0: +0.010, 1: -0.010, 2: +0.020 | inside the noise" in table
    # both twins of proxy_spm share its seeds' streams, so they pair with each other too
    reading = found["raw_subset - proxy_spm_masked (reading spm)"]
    assert reading["paired"] and reading["per_seed"] == pytest.approx({"0": -0.35, "1": -0.35, "2": -0.34})
    assert reading["verdict"] == "outside the noise"
    assert "1: +0.340, 2: +0.360 | outside the noise: predicting spm helps | predicting spm costs |" in table
    assert "per_seed" not in found["proxy_spm - byte (main claim)"]  # Welch: different streams, nothing to pair
    # a twin that lags its partner is compared over the seeds both finished, not its seed against their mean
    comparison.results["arms"]["raw_subset"]["2"] = {"status": "running"}
    comparison.save()
    lagging = json.loads((tmp_path / "results.json").read_text())["contrasts"]["raw_subset - proxy_spm (transfer)"]
    assert lagging["val_bpb"] == pytest.approx(0.0) and lagging["per_seed"] == pytest.approx({"0": 0.01, "1": -0.01})
    assert lagging["interval"]["seeds"] == 2 and lagging["interval"]["mean"] == pytest.approx(lagging["val_bpb"])
    assert parse_seeds("0,1") == [0, 1]
    for bad in ("0,x", "1,1", ","):
        with pytest.raises(CompareError, match="--seeds"):
            parse_seeds(bad)


def test_contrasts_across_comparisons_side_by_side(tmp_path, capsys):
    """Two model sizes at one ratio: each contrast at each size, with its interval, in one table and a plot."""
    folders = []
    for size, budget, gap in (("tiny", 4e5, 0.5), ("small", 2e6, 0.2)):
        comparison = Comparison(CompareSpec(model_size=size, budget=budget, match="symbols"), tmp_path / size)

        def run(arm: str, bpb: float) -> dict:
            return {"status": "done", "plan": comparison.plan(ARMS[arm]).to_dict(), "val_bpb": bpb}

        comparison.results["arms"] = {
            "byte": {str(k): run("byte", 1.0 + 0.01 * k) for k in range(3)},
            "proxy_spm": {str(k): run("proxy_spm", 1.0 + gap + 0.02 * k) for k in range(3)},
            "raw_subset": {str(k): run("raw_subset", 1.0 + gap + 0.02 * k + 0.001 * (k - 1)) for k in range(3)},
        }
        comparison.save()
        folders.append(str(tmp_path / size))
    assert proxycomp(["compare", "--across", ",".join(folders), "--out", str(tmp_path / "sizes")]) == 0
    table = (tmp_path / "sizes" / "across.md").read_text()
    assert table == capsys.readouterr().out.strip() + "\n"
    header, _, main, transfer = table.splitlines()
    assert "| tiny, 4e+05 symbols (" in header and "| small, 2e+06 symbols (0.4 per parameter) |" in header
    assert main.startswith("| proxy_spm - byte (main claim) | +0.5100 [")
    assert "Welch, outside the noise: bytes beat the proxy | +0.2100" in main
    assert transfer.count("paired, inside the noise") == 2
    assert (tmp_path / "sizes" / "gap_vs_size.png").read_bytes()[:4] == b"\x89PNG"
    comparison.results["arms"]["raw_subset"] = {"0": comparison.results["arms"]["raw_subset"]["0"]}  # small
    comparison.save()
    assert proxycomp(["compare", "--across", ",".join(folders), "--out", str(tmp_path / "sizes")]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("| -0.0010, no interval (one seed) |")
    assert proxycomp(["compare", "--across", str(tmp_path / "none"), "--out", str(tmp_path / "x")]) == 2
    (tmp_path / "small" / "results.json").write_text('{"spec": ')
    assert proxycomp(["compare", "--across", ",".join(folders), "--out", str(tmp_path / "x")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_held_out_documents_are_drawn_at_random_and_alike_for_every_run():
    documents = [bytes([65 + i % 26]) * (100 + i) for i in range(200)]
    drawn = sample_documents(documents, 5_000, seed=3)
    assert drawn == sample_documents(documents, 5_000, seed=3) != sample_documents(documents, 5_000, seed=4)
    assert sum(map(len, drawn)) <= 5_000 and len(set(drawn)) == len(drawn)
    assert max(documents.index(d) for d in drawn) > 100  # not the leading documents in path order
    assert sorted(sample_documents(documents, None, 0)) == sorted(documents)
    assert sample_documents(documents, 10, 0) and len(sample_documents(documents, 10, 0)) == 1  # at least one


def test_epochs_count_each_rows_share_of_the_documents():
    n, workers, rows = 50, 2, 3
    shares = {(w, k): documents_per_epoch(n, workers, rows, w, k) for w in range(workers) for k in range(rows)}
    assert sum(shares.values()) == n
    whole = {w: StreamCursor(9, tuple((shares[w, k], 0) for k in range(rows))) for w in range(workers)}
    assert epochs_passed(n, workers, rows, whole) == pytest.approx(1.0)
    half = {0: StreamCursor(9, tuple((2 * shares[0, k], 0) for k in range(rows)))}  # worker 1 has not started
    assert epochs_passed(n, workers, rows, half) == pytest.approx(1.0)


# ---- the CPU smoke of the whole comparison ------------------------------------------------------------------
class StopAtStep(L.Callback):
    """Ends fit early, as an interrupted device call would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class InterruptedComparison(Comparison):
    def fit_config(self, arm, plan, arm_dir, seed):
        config = super().fit_config(arm, plan, arm_dir, seed)
        config["trainer"]["callbacks"].append({"class_path": f"{__name__}.StopAtStep", "init_args": {"step": 10}})
        return config


@pytest.mark.slow
def test_cpu_smoke_of_every_arm_at_equal_budget_with_resume(corpus_dir, tmp_path, capsys):
    torch_threads = torch.get_num_threads()
    spec, _ = parse_spec(["--preset", "cpu_smoke", "--out", "o", "--corpus.source", "folder",
                          "--corpus.path", str(corpus_dir), "--budget", "1.5e10", "--curve_points", "3",
                          "--curve_max_bytes", "6000", "--eval_max_bytes", "12000", "--stats_documents", "4",
                          "--stats_max_doc_bytes", "4000"])
    try:
        out = tmp_path / "full"
        results = Comparison(spec, out).run(list(ARMS.values()))
        arms = {name: runs["0"] for name, runs in results["arms"].items()}
        assert all(a["status"] == "done" for a in arms.values()) and set(arms) == set(ARMS)
        for name, a in arms.items():
            step = a["plan"]["symbols_per_step"] * a["plan"]["flops_per_symbol"]
            assert a["steps"] == a["plan"]["max_steps"] and len(a["curve"]) >= 3 and a["curve"][0]["step"] == 0
            assert math.isfinite(a["val_bpb"]) and math.isfinite(a["val_bpb_perturbed"])
            assert (a["val_bpb_raw_ids"] is None) == (name == "bpe")
            assert a["flops"] <= spec.budget < a["flops"] + step
            if a["val_bpb_raw_ids"] is not None:
                assert a["val_bpb_raw_ids"] <= a["val_bpb"]
            assert a["raw_bytes_seen"] == a["targets_seen"]["raw"] and a["epochs"] >= 0
        # the twins saw proxy_spm's raw bytes, step for step; raw_subset none of its spm
        spm_seen = arms["proxy_spm"]["targets_seen"]["spm"]
        for twin in ("proxy_spm_masked", "raw_subset"):
            assert arms[twin]["steps"] == arms["proxy_spm"]["steps"]
            assert arms[twin]["raw_bytes_seen"] == arms["proxy_spm"]["raw_bytes_seen"] > 0
            assert arms[twin]["epochs"] == arms["proxy_spm"]["epochs"]
            assert arms[twin]["val_bpb"] != arms["proxy_spm"]["val_bpb"]
        assert arms["raw_subset"]["targets_seen"]["spm"] == 0
        assert arms["proxy_spm_masked"]["targets_seen"]["spm"] == spm_seen > 0
        assert set(results["compressors"]) == {"raw", "spm", "zstd", "brotli"}
        table = (out / "results.md").read_text()
        assert all(f"| {name} |" in table for name in ARMS)
        assert (out / "bpb_vs_compute.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert json.loads((out / "results.json").read_text())["arms"] == results["arms"]

        # A second call skips every finished arm.
        capsys.readouterr()
        again = Comparison(spec, out).run(list(ARMS.values()))
        assert capsys.readouterr().err.count("done, skipped") == len(ARMS)
        assert again["arms"] == results["arms"]

        # An interrupted arm resumes from its last checkpoint and ends exactly where an uninterrupted one does.
        cut = tmp_path / "cut"
        with pytest.raises(CompareError, match="stopped at step 10"):
            InterruptedComparison(spec, cut).run([ARMS["byte"]])
        assert json.loads((cut / "results.json").read_text())["arms"]["byte"]["0"]["status"] == "running"
        resumed = Comparison(spec, cut).run([ARMS["byte"]])["arms"]["byte"]["0"]
        assert resumed["resumed"] and resumed["steps"] == arms["byte"]["steps"]
        seen = ("raw_bytes_seen", "epochs")
        assert [resumed[k] for k in seen] == [arms["byte"][k] for k in seen]
        assert resumed["val_bpb"] == pytest.approx(arms["byte"]["val_bpb"], abs=1e-5)
        steps, bpb = zip(*[(p["step"], p["val_bpb"]) for p in arms["byte"]["curve"]])
        assert [p["step"] for p in resumed["curve"]] == list(steps)
        assert [p["val_bpb"] for p in resumed["curve"]] == pytest.approx(bpb, abs=1e-5)
    finally:
        torch.set_num_threads(torch_threads)
