"""The `proxycomp` command: one dispatcher for every verb.

    proxycomp fit|validate --config recipes/smoke/proxy_spm.yaml [--trainer.max_steps 100 ...]
    proxycomp generate --ckpt RUN/checkpoints/last.ckpt --prompt "def fib("
    proxycomp eval-bpb --ckpt RUN/checkpoints/last.ckpt --data path/to/sources
    proxycomp gym tasks|eval|bench ...
    proxycomp rl --config recipes/rl/trloo_kernel.yaml --ckpt RUN/checkpoints/last.ckpt
    proxycomp compare --preset cpu_smoke --out runs/compare
    proxycomp shards split --ckpt RUN/checkpoints/last.ckpt --out DIR   # files of <= 15 MiB: bf16 weights + state
    proxycomp shards join --shards DIR --out resume.ckpt                 # for fit --ckpt_path and rl --ckpt

Every verb parses dotted snake_case flags (no abbreviations) and raises `UserError` on bad input, which ends here
as one line on stderr and exit status 2, never a traceback. `proxycomp VERB --help` describes every option.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence

from proxycomp.command import command_parser, run_command
from proxycomp.defaults import default_device, default_stride
from proxycomp.errors import UserError


# ---- fit / validate --------------------------------------------------------------------------------------------
def _lightning(verb: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        from proxycomp.lightning_cli import build_cli
        from proxycomp.stopping import output_may_close

        with output_may_close():  # `fit | tee log` and Ctrl-C: tee is gone, the stop must still checkpoint
            cli = build_cli([verb, *argv])
            if verb == "fit" and cli.interrupted:
                print(f"stopped by Ctrl-C at step {cli.trainer.global_step}; go on with --ckpt_path last",
                      file=sys.stderr)
                return 130
        return 0

    return run


# ---- generate / eval-bpb -----------------------------------------------------------------------------------------
def _usable_device(name: str) -> str:
    """--device, refused in one line when this machine has no such device (loading would blame the checkpoint)."""
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"--device {name!r} is not a device; use cpu or cuda") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use "
                        "--device cpu")
    return name


def generate_main(argv: list[str]) -> int:
    p = command_parser("proxycomp generate", "Continue a raw-byte prompt with a trained model.")
    p.add_argument("--ckpt", required=True, help="a .ckpt written by proxycomp (fit, rl)")
    p.add_argument("--prompt", required=True, help="text after <bos><raw>: its bytes as given (UTF-8 or not)")
    p.add_argument("--max_bytes", type=int, default=256, help="most new bytes")
    p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy")
    p.add_argument("--top_k", type=int | None, default=None, help="sample among the k likeliest bytes; null: all")
    p.add_argument("--top_p", type=float, default=0.95, help="nucleus sampling mass, in (0, 1]")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--device", default=default_device(), help="cpu or cuda")
    args = p.parse_args(argv)
    if args.max_bytes < 0 or args.temperature < 0:
        raise UserError("--max_bytes and --temperature must be >= 0")
    if not 0 < args.top_p <= 1:
        raise UserError("--top_p must lie in (0, 1]")
    if args.top_k is not None and args.top_k < 1:
        raise UserError("--top_k must be >= 1")

    from proxycomp.checkpoint import load_lm
    from proxycomp.generate import generate, raw_bytes
    from proxycomp.vocab import raw_prompt, raw_reply_ids

    model = load_lm(args.ckpt, map_location=_usable_device(args.device)).model
    prompt = os.fsencode(args.prompt)  # the command line's own bytes: a byte-level model reads any
    out = generate(model, [raw_prompt(prompt)], args.max_bytes, args.temperature, args.top_k, args.top_p,
                   seed=args.seed, allowed_ids=raw_reply_ids(model.config.vocab_size))
    sys.stdout.write((prompt + raw_bytes(out.ids[0])).decode("utf-8", errors="replace") + "\n")
    return 0


def eval_bpb_main(argv: list[str]) -> int:
    p = command_parser("proxycomp eval-bpb", "Bits per raw byte of a checkpoint on files (sliding windows).")
    p.add_argument("--ckpt", required=True, help="a .ckpt written by proxycomp (fit, rl)")
    p.add_argument("--data", required=True, help="a file, a folder (see --glob) or a quoted glob")
    p.add_argument("--glob", default="**/*.py", help="files to read under a folder")
    p.add_argument("--seq_len", type=int | None, default=None, help="window length; null: the model's max_seq_len")
    p.add_argument("--stride", type=int | None, default=None, help="window step; null: half the window")
    p.add_argument("--batch_size", type=int, default=8, help="rows per forward")
    p.add_argument("--device", default=default_device(), help="cpu or cuda")
    args = p.parse_args(argv)

    from proxycomp.checkpoint import load_lm
    from proxycomp.scoring import read_documents, score_documents

    documents = read_documents(args.data, args.glob)
    model = load_lm(args.ckpt, map_location=_usable_device(args.device)).model
    seq_len = args.seq_len or model.config.max_seq_len
    stride = args.stride or default_stride(seq_len)
    if seq_len < 2 or not 1 <= stride <= seq_len:
        raise UserError(f"need --seq_len >= 2 and 1 <= --stride <= --seq_len, got {seq_len} and {stride}")
    if seq_len > model.config.max_seq_len:
        print(f"proxycomp eval-bpb: warning: --seq_len {seq_len} is longer than the {model.config.max_seq_len} symbols "
              "the model was trained on; it never saw the positions beyond", file=sys.stderr)
    result = score_documents(model, documents, seq_len, stride, batch_size=args.batch_size,
                             progress=_progress_line(sum(map(len, documents))))
    print(f"bits per byte: {result.bits_per_byte:.4f} over {result.bytes} bytes in {result.documents} documents "
          f"(seq_len {seq_len}, stride {stride})")
    return 0


def _progress_line(total_bytes: int, every_s: float = 5.0) -> Callable[[int], None]:
    """A progress callback printing "scored X of Y MB" on stderr at most every `every_s` seconds."""
    import time

    started = last = time.monotonic()

    def show(done: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            print(f"eval-bpb: {done / 1e6:.2f} of {total_bytes / 1e6:.2f} MB scored ({done / max(total_bytes, 1):.0%}, "
                  f"{now - started:.0f} s)", file=sys.stderr, flush=True)

    return show


# ---- shards ------------------------------------------------------------------------------------------------------
def shards_main(argv: list[str]) -> int:
    p = command_parser("proxycomp shards", "A fit checkpoint as files small enough to carry between device calls "
                       "(bf16 weights, no Adam moments), and back.")
    sub = p.add_subcommands(dest="command")
    split = command_parser("proxycomp shards split",
                           "Write CKPT's weights (bf16) and state as files of at most MAX MiB.")
    split.add_argument("--ckpt", required=True, help="a .ckpt written by `proxycomp fit` or `proxycomp rl`")
    split.add_argument("--out", required=True, help="folder for weights.NN.pt and state.pt")
    split.add_argument("--max_mib", type=float, default=15.0, help="most MiB per file")
    split.add_argument("--exact", action="store_true",
                       help="keep every dtype and Adam's moments, for a bit-exact resume (~6x the bytes)")
    sub.add_subcommand("split", split, help="split a checkpoint")
    join = command_parser("proxycomp shards join", "Rebuild a checkpoint that `fit --ckpt_path` and `rl --ckpt` read.")
    join.add_argument("--shards", required=True, help="the folder `proxycomp shards split` wrote")
    join.add_argument("--out", required=True, help="the .ckpt to write")
    sub.add_subcommand("join", join, help="join shards into a checkpoint")
    args = p.parse_args(argv)
    options = args[args.command]

    from proxycomp.checkpoint import join_checkpoint, split_checkpoint

    if args.command == "split":
        files = split_checkpoint(options.ckpt, options.out, int(options.max_mib * 2**20), exact=options.exact)
        print(f"{len(files)} files in {options.out}: {', '.join(f.name for f in files)}")
    else:
        print(f"wrote {join_checkpoint(options.shards, options.out)}")
    return 0


# ---- the dispatcher ----------------------------------------------------------------------------------------------
def _delegate(module: str) -> Callable[[list[str]], int]:
    """A verb whose parser lives in `module` (imported only when the verb runs: torch and Lightning are slow)."""
    return lambda argv: importlib.import_module(module).main(argv)


VERBS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "fit": (_lightning("fit"), "train a model from a recipe (LightningCLI; --print_config shows every option)"),
    "validate": (_lightning("validate"), "bits per raw byte of a checkpoint on the recipe's held-out split"),
    "generate": (generate_main, "continue a raw-byte prompt"),
    "eval-bpb": (eval_bpb_main, "bits per raw byte of a checkpoint on your own files"),
    "gym": (_delegate("proxycomp.gym_bridge.cli"), "the embedded KernelGYM: list tasks, judge a kernel, benchmark"),
    "rl": (_delegate("proxycomp.gym_bridge.rl.cli"), "multi-turn kernel RL (TRLOO) in the gym"),
    "rl-compare": (_delegate("proxycomp.gym_bridge.rl.compare"), "advantage estimators (TRLOO, GRPO) at equal budget"),
    "compare": (_delegate("proxycomp.compare.cli"), "byte vs proxy vs tokenizer arms at equal compute"),
    "shards": (shards_main, "a fit checkpoint as files small enough to carry between device calls, and back"),
}
# Verbs whose first word is a command of its own, which an error names: `proxycomp gym eval: error: ...`.
SUBCOMMANDS = {"gym": ("tasks", "eval", "bench", "generate"), "shards": ("split", "join")}


def usage() -> str:
    verbs = "\n".join(f"  {verb:<10} {description}" for verb, (_, description) in VERBS.items())
    return f"usage: proxycomp VERB [options]   (proxycomp VERB --help)\n\n{verbs}\n\n{__doc__.split(chr(10) * 2)[1]}"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"proxycomp: error: unknown command {verb!r}; use one of {', '.join(VERBS)}", file=sys.stderr)
        return 2
    return run_command(verb, VERBS[verb][0], rest, SUBCOMMANDS.get(verb, ()))


if __name__ == "__main__":
    sys.exit(main())
