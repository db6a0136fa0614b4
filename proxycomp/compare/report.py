"""The comparison's report: a markdown table of every figure (means and spreads over training seeds), and val bpb
against training compute."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from proxycomp.compare.arms import ARMS, RAW_SUBSET_SOURCE, SIZE_LR

# (label, arm a, arm b, what a negative a - b means)
CONTRASTS = (
    ("proxy_spm - byte (main claim)", "proxy_spm", "byte", "the proxy beats bytes"),
    ("proxy_spm_masked - proxy_spm (transfer: same batches)", "proxy_spm_masked", "proxy_spm", "no transfer"),
    ("raw_subset - proxy_spm (transfer: its raw views only)", "raw_subset", RAW_SUBSET_SOURCE, "no transfer"),
    ("proxy_zstd - byte", "proxy_zstd", "byte", "zstd transfers"),
    ("proxy_brotli - byte", "proxy_brotli", "byte", "brotli transfers"),
    ("proxy_zstd - proxy_spm", "proxy_zstd", "proxy_spm", "zstd beats spm"),
    ("bpe - byte", "bpe", "byte", "tokens beat bytes"),
    ("proxy_spm - bpe", "proxy_spm", "bpe", "the proxy beats tokens"),
)
SCORES = ("val_bpb", "val_bpb_raw_ids", "val_bpb_perturbed")


def summary(runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Over an arm's finished seeds: how many, and per score its mean and, over two seeds or more, its spread
    (max - min); None if none finished."""
    done = [run for run in runs.values() if run.get("status") == "done"]
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


def contrasts(arms: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Differences of mean final val bpb (full softmax, and over raw ids where both have it) between arm pairs that
    both finished, with the larger seed spread of the two as the noise to read them against (None: one seed each)."""
    done = {name: s for name, runs in arms.items() if (s := summary(runs))}
    out = {}
    for label, a, b, _ in CONTRASTS:
        if a in done and b in done:
            x, y = done[a], done[b]
            spreads = [s["val_bpb_spread"] for s in (x, y) if "val_bpb_spread" in s]
            out[label] = {"val_bpb": x["val_bpb"] - y["val_bpb"], "noise": max(spreads) if spreads else None}
            if "val_bpb_raw_ids" in x and "val_bpb_raw_ids" in y:
                out[label]["val_bpb_raw_ids"] = x["val_bpb_raw_ids"] - y["val_bpb_raw_ids"]
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
        "share of budget | val bpb | spread | val bpb (raw ids) | perturbed bpb | wall s |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, arm in ARMS.items():
        if name not in arms:
            continue
        runs = arms[name]
        first = next(iter(runs.values()))
        p, s = first.get("plan", {}), summary(runs) or {}
        n_done = s.get("seeds", 0)
        status = "done" if n_done == len(runs) else f"{n_done}/{len(runs)} done"
        trains_on = f"{'+'.join(arm.views)} ({arm.schedule}{', loss on raw only' if arm.loss_targets == 'raw' else ''})"
        walls = [run["wall_s"] for run in runs.values() if "wall_s" in run]
        lines.append(
            f"| {name} | {trains_on} | {status} | {','.join(runs)} | {p.get('vocab_size', '')} | "
            f"{_num(p.get('matmul_params'), ',')} | {_num(p.get('flops_per_symbol'), '.3g')} | "
            f"{p.get('max_steps', '')} | {_num(p.get('symbols'), ',')} | {_num(p.get('flops'), '.3g')} | "
            f"{_num(first.get('budget_share'), '.3f')} | {_num(s.get('val_bpb'), '.4f')} | "
            f"{_num(s.get('val_bpb_spread'), '.4f')} | {_num(s.get('val_bpb_raw_ids'), '.4f')} | "
            f"{_num(s.get('val_bpb_perturbed'), '.4f')} | {_num(sum(walls) / len(walls) if walls else None, '.0f')} |"
        )
    diffs = contrasts(arms)
    if diffs:
        lines += ["",
                  "| contrast (mean val bpb) | value | raw ids | noise (larger seed spread) | a negative value means |",
                  "|---|---:|---:|---:|---|"]
        meaning = {label: text for label, _, _, text in CONTRASTS}
        lines += [f"| {label} | {d['val_bpb']:+.4f} | {_num(d.get('val_bpb_raw_ids'), '+.4f')} | "
                  f"{_num(d['noise'], '.4f')} | {meaning[label]} |" for label, d in diffs.items()]
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
        "`proxy_spm_masked` trains on `proxy_spm`'s batches for its steps on its schedule, with the spm targets left "
        "out of the loss: what the proxy arm gains over it is what learning to predict the compressed view gave raw "
        "bytes. `raw_subset` trains once over the raw views `proxy_spm` saw, so it spends only their share of the "
        f"budget. The plot's curve points score the first {spec['curve_max_bytes']:,} held-out bytes; the table scores "
        f"{'all' if spec['eval_max_bytes'] is None else 'the first ' + format(spec['eval_max_bytes'], ',')} of them.",
        "",
    ]
    return "\n".join(lines)


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
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
