"""Time the sampler's decode loops (`proxycomp.generate`, decode=...) on one model in one run.

    python tools/bench_decode.py --ckpt RUN/checkpoints/last.ckpt [--batch 8] [--prompt 1024] [--new 2048]
    python tools/bench_decode.py --d_model 512 --layers 8      # a randomly initialised model of that size

Every mode decodes the same prompts for the full `--new` symbols (no stop symbol), greedy, after one warm-up
call; the table gives milliseconds per decoded symbol (the whole batch advancing by one) and the ratio to the
"dynamic" loop, and checks that every mode drew the same symbols as "dynamic".
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from proxycomp.defaults import default_device
from proxycomp.generate import DECODE_MODES, generate
from proxycomp.model import ModelConfig, Transformer
from proxycomp.vocab import RAW_PROMPT_OPENING, raw_prompt


def build_model(args: argparse.Namespace, device: torch.device) -> Transformer:
    if args.ckpt:
        from proxycomp.checkpoint import load_lm

        return load_lm(args.ckpt, attn_backend="sdpa", embed_backend="torch").model.to(device)
    config = ModelConfig(d_model=args.d_model, n_layers=args.layers, n_heads=args.d_model // 64,
                         n_kv_heads=args.d_model // 64, max_seq_len=args.prompt + args.new)
    return Transformer(config).to(device).eval()


def time_mode(model: Transformer, prompts: list[list[int]], new: int, mode: str, autocast: bool) -> tuple[float, list]:
    def once():
        with torch.autocast(model.embed.weight.device.type, dtype=torch.bfloat16, enabled=autocast):
            return generate(model, prompts, new, temperature=0, stop_ids=(), decode=mode)

    once()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = once()
    return (time.perf_counter() - start) * 1e3 / new, out.ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--ckpt", type=Path, help="a checkpoint to decode with; default: a random model of --d_model")
    parser.add_argument("--d_model", type=int, default=512, help="width of the random model")
    parser.add_argument("--layers", type=int, default=8, help="layers of the random model")
    parser.add_argument("--batch", type=int, default=8, help="prompts decoded together")
    parser.add_argument("--prompt", type=int, default=1024, help="symbols per prompt (rows differ by up to 10%%)")
    parser.add_argument("--new", type=int, default=2048, help="symbols decoded per prompt")
    parser.add_argument("--modes", default="dynamic,static,graph",
                        help="comma-separated decode loops to time, dynamic first (the reference)")
    parser.add_argument("--bf16", action="store_true", help="decode under bf16 autocast")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in DECODE_MODES or m == "auto" for m in modes) or modes[0] != "dynamic":
        parser.error(f"--modes: start with dynamic, then any of {', '.join(DECODE_MODES[2:])}")
    device = torch.device(default_device())
    torch.manual_seed(0)
    model = build_model(args, device)
    text = Path(torch.__file__).read_bytes()  # real code bytes as prompts
    lengths = [args.prompt - RAW_PROMPT_OPENING - (i * args.prompt) // (10 * args.batch) for i in range(args.batch)]
    prompts = [raw_prompt(text[i * 997:i * 997 + n]) for i, n in enumerate(lengths)]
    rows, reference = [], None
    for mode in modes:
        ms, ids = time_mode(model, prompts, args.new, mode, args.bf16)
        reference = reference or ids
        rows.append({"mode": mode, "ms_per_symbol": ms, "same_as_dynamic": ids == reference})
    base = rows[0]["ms_per_symbol"]
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"{name}, torch {torch.__version__}, batch {args.batch}, prompt ~{args.prompt}, {args.new} new symbols, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {'bf16' if args.bf16 else 'fp32'}")
    print("| mode | ms per symbol | vs dynamic | same symbols |\n|---|---|---|---|")
    for row in rows:
        row["speedup"] = base / row["ms_per_symbol"]
        print(f"| {row['mode']} | {row['ms_per_symbol']:.3f} | {row['speedup']:.2f}x | {row['same_as_dynamic']} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0
