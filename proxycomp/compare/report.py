"""The comparison's report: a markdown table of every figure (means and spreads over training seeds), and val bpb
against training compute."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from proxycomp.compare.arms import ARMS, SIZE_LR
from proxycomp.compare.stats import LEVEL, paired_interval, verdict, welch_interval

# (label, arm a, arm b, what a negative a - b means, what a positive one means). Transfer and the masked twins answer
# different questions: raw_subset - proxy_spm is what the spm segments (read and predicted) gave raw bytes at the same
# raw symbols, steps and schedule; a masked twin - its proxy arm is what predicting the view gave beyond reading it;
# raw_subset - the masked twin is what reading the segments gave, with neither predicting them.
CONTRASTS = (
    ("proxy_spm - byte (main claim)", "proxy_spm", "byte", "the proxy beats bytes", "bytes beat the proxy"),
    ("raw_subset - proxy_spm (transfer)", "raw_subset", "proxy_spm", "the spm segments cost raw bytes",
     "the spm segments help raw bytes"),
    ("proxy_spm_masked - proxy_spm (predicting spm)", "proxy_spm_masked", "proxy_spm", "predicting spm costs",
     "predicting spm helps"),
    ("raw_subset - proxy_spm_masked (reading spm)", "raw_subset", "proxy_spm_masked", "reading spm costs",
     "reading spm helps"),
    ("proxy_zstd_masked - proxy_zstd (predicting zstd)", "proxy_zstd_masked", "proxy_zstd", "predicting zstd costs",
     "predicting zstd helps"),
    ("proxy_zstd - byte", "proxy_zstd", "byte", "the zstd proxy beats bytes", "bytes beat the zstd proxy"),
    ("proxy_brotli - byte", "proxy_brotli", "byte", "the brotli proxy beats bytes", "bytes beat the brotli proxy"),
    ("proxy_zstd - proxy_spm", "proxy_zstd", "proxy_spm", "zstd beats spm", "spm beats zstd"),
    ("bpe - byte", "bpe", "byte", "tokens beat bytes", "bytes beat tokens"),
    ("proxy_spm - bpe", "proxy_spm", "bpe", "the proxy beats tokens", "tokens beat the proxy"),
)
SIGNS = {label: (negative, positive) for label, _, _, negative, positive in CONTRASTS}
SCORES = ("val_bpb", "val_bpb_raw_ids", "val_bpb_perturbed")


def _done(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {seed: run for seed, run in runs.items() if run.get("status") == "done"}


def summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Over an arm's finished seeds: how many, and per score its mean and, over two seeds or more, its spread
    (max - min); None if none finished."""
    done = list(_done(runs).values())
    if not done:
        return None
    out: dict[str, Any] = {"seeds": len(done)}
    for key in SCORES:
        values = [run[key] for run in done if run.get(key) is not None]
        if values:
            out[key] = sum(values) / len(values)
        if len(values) > 1:
            out[f"{key}_spread"] = max(values) - min(values)
    return out


def paired(a: str, b: str) -> bool:
    """Whether two arms share each training seed's initialization and stream (one is the other's twin, or both are
    twins of one arm)."""
    twin_a, twin_b = ARMS[a].twin_of, ARMS[b].twin_of
    return twin_a == b or twin_b == a or (twin_a is not None and twin_a == twin_b)


def contrasts(arms: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Differences of final val bpb between arm pairs that both finished: the difference of means, the raw-ids one
    where both have it, and a t interval over training seeds (paired seed by seed for twins, with the per-seed
    differences; Welch's otherwise) with its verdict. A paired contrast is taken over the seeds both arms finished,
    so while one twin lags, its value is the mean of the per-seed differences, not a difference of means over
    different seeds."""
    out = {}
    for label, a, b, _, _ in CONTRASTS:
        x, y = _done(arms.get(a, {})), _done(arms.get(b, {}))
        pair = paired(a, b)
        if pair:
            x, y = {s: r for s, r in x.items() if s in y}, {s: r for s, r in y.items() if s in x}
        if not x or not y:
            continue
        sx, sy = summary(x), summary(y)
        values = ({s: r["val_bpb"] for s, r in x.items()}, {s: r["val_bpb"] for s, r in y.items()})
        interval = paired_interval(*values) if pair else welch_interval(*(list(v.values()) for v in values))
        out[label] = {"val_bpb": sx["val_bpb"] - sy["val_bpb"], "paired": pair, "interval": interval,
                      "verdict": verdict(interval)}
        if pair:
            out[label]["per_seed"] = {s: values[0][s] - values[1][s] for s in values[0]}
        if "val_bpb_raw_ids" in sx and "val_bpb_raw_ids" in sy:
            out[label]["val_bpb_raw_ids"] = sx["val_bpb_raw_ids"] - sy["val_bpb_raw_ids"]
    return out


def markdown(results: dict[str, Any], title: str) -> str:
    spec, arms = results["spec"], results["arms"]
    corpus = spec["corpus"]
    lines = [
        f"# {title}",
        "",
        f"Matched on {spec['match']}: {spec['budget']:.3g} {spec['match']} per arm (the table gives both symbols and "
        f"FLOPs). Model `{spec['model_size']}`, peak lr {spec['lr'] or SIZE_LR[spec['model_size']]:g}, context "
        f"{spec['seq_len']}, batch {spec['batch_size']}, corpus `{corpus['source']}`"
        f"{' ' + corpus['path'] if corpus['path'] else ''} (max_documents {corpus['max_documents']}); corpus split and "
        f"tokenizer from seed {spec['seed']}, every arm run at the training seeds it lists. "
        "Val bpb: bits per raw byte on held-out packages, the mean over seeds; spread: its max - min over them; raw "
        "ids: the softmax renormalized over raw bytes and the raw stops (what raw-byte inference samples). The `bpe` "
        "arm is scored in its own tokens (every predicted symbol incl. the close/eos over the document's bytes). "
        f"Perturbed: the same documents with {spec['perturb_rate']:.0%} of characters deleted.",
        "",
        "| arm | trains on | status | seeds | vocab | matmul params | FLOPs/symbol | steps | symbols | FLOPs | "
        "share of budget | raw bytes seen | epochs | val bpb | spread | val bpb (raw ids) | perturbed bpb | wall s |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, arm in ARMS.items():
        if name not in arms:
            continue
        runs = arms[name]
        first = next(iter(runs.values()))
        p, s = first.get("plan", {}), summary(runs) or {}
        n_done = s.get("seeds", 0)
        status = "done" if n_done == len(runs) else f"{n_done}/{len(runs)} done"
        notes = [arm.schedule, *(["loss on raw only"] if arm.loss_targets == "raw" else []),
                 *(f"{view} removed" for view in arm.drop_views)]
        trains_on = f"{'+'.join(arm.views)} ({', '.join(notes)})"
        # A resumed run's wall_s counts only its last part (the cut part's time died with its process).
        walls = [run["wall_s"] for run in runs.values() if "wall_s" in run and not run.get("resumed")]
        raw_seen = _mean(run.get("raw_bytes_seen") for run in runs.values())
        epochs = _mean(run.get("epochs") for run in runs.values())
        lines.append(
            f"| {name} | {trains_on} | {status} | {','.join(runs)} | {p.get('vocab_size', '')} | "
            f"{_num(p.get('matmul_params'), ',')} | {_num(p.get('flops_per_symbol'), '.3g')} | "
            f"{p.get('max_steps', '')} | {_num(p.get('symbols'), ',')} | {_num(p.get('flops'), '.3g')} | "
            f"{_num(first.get('budget_share'), '.3f')} | {_num(raw_seen, '.3g')} | {_num(epochs, '.2f')} | "
            f"{_num(s.get('val_bpb'), '.4f')} | "
            f"{_num(s.get('val_bpb_spread'), '.4f')} | {_num(s.get('val_bpb_raw_ids'), '.4f')} | "
            f"{_num(s.get('val_bpb_perturbed'), '.4f')} | {_num(sum(walls) / len(walls) if walls else None, '.0f')} |"
        )
    diffs = results["contrasts"]  # set by Comparison.save just before
    if diffs:
        lines += ["",
                  f"| contrast (mean val bpb) | value | raw ids | {LEVEL:.0%} interval over seeds | seeds | "
                  "per seed (paired) | reads as | a negative value means |",
                  "|---|---:|---:|---|---:|---|---|---|"]
        for label, d in diffs.items():
            ci = d["interval"]
            lines.append(f"| {label} | {d['val_bpb']:+.4f} | {_num(d.get('val_bpb_raw_ids'), '+.4f')} | "
                         f"{_span(d)} | {ci['seeds'] if ci else ''} | {_per_seed(d)} | {_reading(label, d)} | "
                         f"{SIGNS[label][0]} |")
    comp = results.get("compressors")
    if comp:
        lines += [
            "",
            f"Compressors on the held-out split: raw bytes per symbol, and normalized edit distance of the view when "
            f"{spec['perturb_rate']:.0%} of characters are deleted (mean over "
            f"{next(iter(comp.values()))['documents']} documents).",
            "",
            "| view | bytes/symbol | edit distance |",
            "|---|---:|---:|",
        ]
        lines += [f"| {v} | {s['bytes_per_symbol']:.3f} | {s['edit_distance']:.3f} |" for v, s in comp.items()]
    lines += [
        "",
        "Twins: `proxy_spm_masked` and `raw_subset` train on `proxy_spm`'s windows with its steps, schedule, "
        "initialization and order at each seed (so their contrasts with it are paired seed by seed); the masked twin "
        "leaves the spm targets out of the loss, raw_subset removes the spm segments from the windows (it sees the "
        "raw symbols of each of proxy_spm's steps and nothing else). `proxy_zstd_masked` is proxy_zstd's masked twin. "
        "Raw bytes seen: raw-byte targets in the batches trained on (repeats included"
        f"{_train_split(arms)}); epochs: passes over the train documents, in whatever view. Scores: "
        f"{_eval_slice(spec['eval_max_bytes'])} held-out bytes drawn at random (seed {spec['seed']}), the same "
        f"documents for every run; the plot's points score {spec['curve_max_bytes']:,} of them.{_resumed(arms)}",
        "",
    ]
    return "\n".join(lines)


def _resumed(arms: dict[str, dict]) -> str:
    runs = [f"{name} seed {seed}" for name, seeds in arms.items() for seed, run in seeds.items() if run.get("resumed")]
    if not runs:
        return ""
    return (f" Wall s: the mean over runs made in one call; left out, as resumed from a checkpoint (their time counts "
            f"only the last part): {', '.join(runs)}.")


def point_label(results: dict[str, Any]) -> str:
    """A comparison as one point of a series: model size, budget, and symbols per matmul parameter of its byte arm."""
    spec = results["spec"]
    label = f"{spec['model_size']}, {spec['budget']:.2g} {spec['match']}"
    byte = _byte_plan(results)
    if byte and spec["match"] == "symbols":
        label += f" ({spec['budget'] / byte['matmul_params']:.1f} per parameter)"
    return label


def across_markdown(points: list[dict[str, Any]]) -> str:
    """Each contrast at each point (the results of several comparisons, e.g. two model sizes at one ratio): the
    difference of mean val bpb, its interval over seeds and its reading, a column per point."""
    found = [contrasts(results["arms"]) for results in points]
    labels = [label for label, *_ in CONTRASTS if any(label in f for f in found)]
    lines = ["| contrast (mean val bpb) | " + " | ".join(point_label(r) for r in points) + " |",
             "|---|" + "---|" * len(points)]
    for label in labels:
        cells = [", ".join(filter(None, (f"{f[label]['val_bpb']:+.4f} {_span(f[label])}".strip(),
                                         _reading(label, f[label])))) if label in f else "" for f in found]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_across(points: list[dict[str, Any]], path: Path) -> None:
    """The main claim's and transfer's differences (with their intervals) against the byte arm's matmul parameters,
    one line per contrast through the points that have it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = [(contrasts(results["arms"]), _byte_plan(results)) for results in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    for label in (CONTRASTS[0][0], CONTRASTS[1][0]):
        xs, ys, errs = [], [], [[], []]
        for diffs, byte in found:
            d = diffs.get(label)
            if d is None or byte is None:
                continue
            ci = d["interval"] or {"low": d["val_bpb"], "high": d["val_bpb"]}
            xs.append(byte["matmul_params"])
            ys.append(d["val_bpb"])
            errs[0].append(d["val_bpb"] - ci["low"])
            errs[1].append(ci["high"] - d["val_bpb"])
        if xs:
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=label)
    ax.axhline(0, color="grey", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("matmul parameters (byte arm)")
    ax.set_ylabel("difference of val bpb (95% interval)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, path)


def _byte_plan(results: dict[str, Any]) -> dict[str, Any] | None:
    """The plan of the byte arm (its first run's), whose matmul parameters name a comparison's model size."""
    return next(iter(results["arms"].get("byte", {}).values()), {}).get("plan")


def _save(fig, path: Path) -> None:
    """Write a figure atomically (a reader never sees half a PNG) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def _span(d: dict[str, Any]) -> str:
    ci = d["interval"]
    return f"[{ci['low']:+.4f}, {ci['high']:+.4f}] {'paired' if d['paired'] else 'Welch'}" if ci else ""


def _reading(label: str, d: dict[str, Any]) -> str:
    """The verdict, and outside the noise which way the difference goes."""
    if d["verdict"] != "outside the noise":
        return d["verdict"]
    negative, positive = SIGNS[label]
    return f"{d['verdict']}: {negative if d['val_bpb'] < 0 else positive}"


def _per_seed(d: dict[str, Any]) -> str:
    return ", ".join(f"{seed}: {diff:+.3f}" for seed, diff in d.get("per_seed", {}).items())


def _train_split(arms: dict[str, dict[str, dict[str, Any]]]) -> str:
    sizes = {run["train_bytes"] for runs in arms.values() for run in runs.values() if run.get("train_bytes")}
    return f"; the train split holds {sizes.pop():,} bytes" if len(sizes) == 1 else ""


def _eval_slice(max_bytes: int | None) -> str:
    return "all" if max_bytes is None else f"{max_bytes:,}"


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _num(value: Any, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def plot(results: dict[str, Any], path: Path) -> None:
    """Val bpb against cumulative training compute in the matched unit, a line per run (log x; an arm's seeds share a
    colour), the budget as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = results["spec"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, runs in results["arms"].items():
        color = None
        for run in runs.values():
            plan = run.get("plan")
            points = [p for p in run.get("curve", []) if p["step"] > 0]
            if not plan or not points:
                continue
            per_step = plan["symbols_per_step"] * (plan["flops_per_symbol"] if spec["match"] == "flops" else 1)
            (line,) = ax.plot([p["step"] * per_step for p in points], [p["val_bpb"] for p in points], marker="o", ms=3,
                              color=color, label=name if color is None else None)
            color = line.get_color()
    ax.axvline(spec["budget"], color="grey", ls="--", lw=1, label="budget")
    ax.set_xscale("log")
    ax.set_xlabel(f"training {'FLOPs' if spec['match'] == 'flops' else 'symbols'}")
    ax.set_ylabel("val bits per raw byte")
    ax.set_title(f"{spec['model_size']} model, budget {spec['budget']:.2g} {spec['match']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
