"""The comparison's report: a markdown table of every figure, and val bpb against training compute."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from proxycomp.compare.arms import ARMS, RAW_SUBSET_SOURCE

# (label, arm a, arm b, what a negative a - b means)
CONTRASTS = (
    ("proxy_spm - byte (main claim)", "proxy_spm", "byte", "the proxy beats bytes"),
    ("raw_subset - proxy_spm (transfer gain)", "raw_subset", RAW_SUBSET_SOURCE, "no transfer"),
    ("proxy_zstd - byte", "proxy_zstd", "byte", "zstd transfers"),
    ("proxy_brotli - byte", "proxy_brotli", "byte", "brotli transfers"),
    ("bpe - byte", "bpe", "byte", "tokens beat bytes"),
    ("proxy_spm - bpe", "proxy_spm", "bpe", "the proxy beats tokens"),
)


def contrasts(arms: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Differences of final val bpb between arm pairs that both finished."""
    done = {name: a["val_bpb"] for name, a in arms.items() if a.get("status") == "done"}
    return {label: done[a] - done[b] for label, a, b, _ in CONTRASTS if a in done and b in done}


def markdown(results: dict[str, Any], title: str) -> str:
    spec, arms = results["spec"], results["arms"]
    corpus = spec["corpus"]
    lines = [
        f"# {title}",
        "",
        f"Budget {spec['budget']:.3g} {spec['budget_unit']} per arm; model `{spec['model_size']}`, context "
        f"{spec['seq_len']}, batch {spec['batch_size']}, corpus `{corpus['source']}`"
        f"{' ' + corpus['path'] if corpus['path'] else ''} (max_documents {corpus['max_documents']}), seed {spec['seed']}. "
        "Val bpb: bits per raw byte on held-out packages; the `bpe` arm is scored in its own tokens "
        "(every predicted symbol incl. the close/eos over the document's bytes). "
        f"Perturbed: the same documents with {spec['perturb_rate']:.0%} of characters deleted.",
        "",
        "| arm | trains on | status | vocab | matmul params | FLOPs/symbol | steps | symbols | FLOPs | "
        "share of budget | val bpb | perturbed bpb | wall s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ARMS:
        if name not in arms:
            continue
        a = arms[name]
        p = a.get("plan", {})
        lines.append(
            f"| {name} | {'+'.join(ARMS[name].views)} ({ARMS[name].schedule}) | {a['status']} | {p.get('vocab_size', '')} | "
            f"{_num(p.get('matmul_params'), ',')} | {_num(p.get('flops_per_symbol'), '.3g')} | {a.get('steps', '')} | "
            f"{_num(a.get('symbols'), ',')} | {_num(a.get('flops'), '.3g')} | {_num(a.get('budget_share'), '.3f')} | {_num(a.get('val_bpb'), '.4f')} | "
            f"{_num(a.get('val_bpb_perturbed'), '.4f')} | {_num(a.get('wall_s'), '.0f')} |"
        )
    diffs = contrasts(arms)
    if diffs:
        lines += ["", "| contrast (val bpb) | value | a negative value means |", "|---|---:|---|"]
        meaning = {label: text for label, _, _, text in CONTRASTS}
        lines += [f"| {label} | {value:+.4f} | {meaning[label]} |" for label, value in diffs.items()]
    comp = results.get("compressors")
    if comp:
        lines += [
            "",
            f"Compressors on the held-out split: raw bytes per symbol, and normalized edit distance of the view when "
            f"{spec['perturb_rate']:.0%} of characters are deleted (mean over {next(iter(comp.values()))['documents']} documents).",
            "",
            "| view | bytes/symbol | edit distance |",
            "|---|---:|---:|",
        ]
        lines += [f"| {v} | {s['bytes_per_symbol']:.3f} | {s['edit_distance']:.3f} |" for v, s in comp.items()]
    lines += [
        "",
        "`raw_subset` trains once over the raw views `proxy_spm` saw, so it spends only their share of the budget. "
        f"The plot's curve points score the first {spec['curve_max_bytes']:,} held-out bytes; the table scores "
        f"{'all' if spec['eval_max_bytes'] is None else 'the first ' + format(spec['eval_max_bytes'], ',')} of them.",
        "",
    ]
    return "\n".join(lines)


def _num(value: Any, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def plot(results: dict[str, Any], path: Path) -> None:
    """Val bpb against cumulative training FLOPs, one line per arm (log x), the budget as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, arm in results["arms"].items():
        plan = arm.get("plan")
        points = [p for p in arm.get("curve", []) if p["step"] > 0]
        if not plan or not points:
            continue
        per_step = plan["symbols_per_step"] * plan["flops_per_symbol"]
        ax.plot([p["step"] * per_step for p in points], [p["val_bpb"] for p in points], marker="o", ms=3, label=name)
    spec = results["spec"]
    if spec["budget_unit"] == "flops":
        ax.axvline(spec["budget"], color="grey", ls="--", lw=1, label="budget")
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("val bits per raw byte")
    ax.set_title(f"{spec['model_size']} model, budget {spec['budget']:.2g} {spec['budget_unit']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
