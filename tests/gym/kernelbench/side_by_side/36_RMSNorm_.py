"""KernelBench level 1, 36_RMSNorm_: x / sqrt(mean(x**2 over dim 1) + eps) for x of shape (batch, features, *).
Each program holds a (features x BLOCK_S) tile of one batch entry in registers: the features of BLOCK_S consecutive
positions, each feature's positions contiguous in memory. It reads the tile once, reduces over the features and
writes the tile once. Feature counts above MAX_FEATURES take the tile in slices, reading it twice."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FEATURES = 256  # the most features one tile holds
TILE = 8192  # values per tile: BLOCK_F * BLOCK_S


@triton.jit
def rmsnorm_kernel(x_ptr, y_ptr, n_feat, n_pos, eps, BLOCK_F: tl.constexpr, BLOCK_S: tl.constexpr,
                   ONE_TILE: tl.constexpr):
    pos = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    base = tl.program_id(1).to(tl.int64) * n_feat * n_pos
    feats = tl.arange(0, BLOCK_F)
    pos_ok = pos[None, :] < n_pos
    if ONE_TILE:
        offs = base + feats[:, None].to(tl.int64) * n_pos + pos[None, :]
        mask = (feats[:, None] < n_feat) & pos_ok
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rms = tl.sqrt(tl.sum(x * x, axis=0) / n_feat + eps)
        tl.store(y_ptr + offs, x / rms[None, :], mask=mask)
    else:
        sum_sq = tl.zeros((BLOCK_S,), tl.float32)
        for f0 in range(0, n_feat, BLOCK_F):
            offs = base + (f0 + feats[:, None]).to(tl.int64) * n_pos + pos[None, :]
            mask = (f0 + feats[:, None] < n_feat) & pos_ok
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            sum_sq += tl.sum(x * x, axis=0)
        rms = tl.sqrt(sum_sq / n_feat + eps)
        for f0 in range(0, n_feat, BLOCK_F):
            offs = base + (f0 + feats[:, None]).to(tl.int64) * n_pos + pos[None, :]
            mask = (f0 + feats[:, None] < n_feat) & pos_ok
            x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_ptr + offs, x / rms[None, :], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        batch, n_feat = x.shape[0], x.shape[1]
        n_pos = math.prod(x.shape[2:])
        y = torch.empty_like(x)
        one_tile = n_feat <= MAX_FEATURES
        block_f = triton.next_power_of_2(n_feat) if one_tile else 32
        block_s = max(32, min(TILE // block_f, triton.next_power_of_2(n_pos)))
        grid = (triton.cdiv(n_pos, block_s), batch)
        rmsnorm_kernel[grid](x, y, n_feat, n_pos, self.eps, BLOCK_F=block_f, BLOCK_S=block_s, ONE_TILE=one_tile,
                             num_warps=8)
        return y
