"""The arms of the comparison (what each one trains on) and the model sizes they share."""
from __future__ import annotations

from dataclasses import dataclass

from proxycomp.errors import UserError


class CompareError(UserError):
    """Bad comparison input (arm names, budget, spec fields, a results folder from other settings)."""


@dataclass(frozen=True)
class Arm:
    name: str
    views: tuple[str, ...]  # data.views.names
    schedule: str  # data.mixing.kind (proxycomp.data.mixing)
    role: str  # one line for the report
    loss_targets: str = "all"  # model.loss_targets (proxycomp.lit)
    twin_of: str | None = None  # an arm whose data, steps, schedule and initialization this one shares
    drop_views: tuple[str, ...] = ()  # data.drop_views: views removed from its windows after the draw


# Report order. A twin shares its partner's views (so its vocabulary and initialization) and stream, and differs in
# one thing: the loss mask (the masked twins) or the compressed segments removed from every window (raw_subset).
ARMS: dict[str, Arm] = {arm.name: arm for arm in (
    Arm("byte", ("raw",), "byte", "byte-only baseline"),
    Arm("proxy_spm", ("raw", "spm"), "paper", "proxy: SentencePiece BPE view (the paper's main claim)"),
    Arm("proxy_spm_masked", ("raw", "spm"), "paper", "proxy_spm's windows with the spm targets out of the loss "
        "(does predicting the view help beyond reading it)", loss_targets="raw", twin_of="proxy_spm"),
    Arm("raw_subset", ("raw", "spm"), "paper", "proxy_spm's windows with the spm segments removed: its raw symbols "
        "step by step (transfer control)", twin_of="proxy_spm", drop_views=("spm",)),
    Arm("proxy_zstd", ("raw", "zstd"), "paper", "proxy: zstd view (stability control)"),
    Arm("proxy_zstd_masked", ("raw", "zstd"), "paper", "proxy_zstd's windows with the zstd targets out of the loss",
        loss_targets="raw", twin_of="proxy_zstd"),
    Arm("proxy_brotli", ("raw", "brotli"), "paper", "proxy: brotli view (stability control)"),
    Arm("bpe", ("raw", "spm"), "tokens", "tokenizer baseline: BPE tokens only"),
)}

MODEL_SIZES: dict[str, dict[str, int]] = {
    "tiny": {"d_model": 64, "n_layers": 2, "n_heads": 2},  # CPU smoke
    "small": {"d_model": 256, "n_layers": 6, "n_heads": 4},
    "base": {"d_model": 512, "n_layers": 8, "n_heads": 8},  # the plan's ~25M non-embedding parameters
}
# Peak learning rate per size, not swept here. The paper's EvaByte configs use 1.2e-3 at d 1024, 9e-4 at d 2048 and
# 7e-4 at d 3072, close to lr = 1.2e-3 * sqrt(1024 / d); extrapolated, that gives 1.7e-3 at d 512 and 2.4e-3 at d 256.
# DeepSeek LLM's compute-optimal fit (lr = 0.3118 * C^-0.125) lands in the same band for 600M symbols: 2.6e-3 (small,
# C ~ 4e16 FLOPs) and 2.2e-3 (base, ~1.5e17). tiny keeps the CPU smoke's 3e-3.
SIZE_LR: dict[str, float] = {"tiny": 3e-3, "small": 2.4e-3, "base": 1.7e-3}


def parse_arms(text: str) -> list[Arm]:
    """Arms named in a comma-separated list, in report order."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ARMS]
    if unknown or not names:
        raise CompareError(f"--arms: unknown or empty {unknown or text!r}; known: {','.join(ARMS)}")
    if len(set(names)) != len(names):
        raise CompareError(f"--arms lists an arm twice: {text!r}")
    return [arm for name, arm in ARMS.items() if name in names]
