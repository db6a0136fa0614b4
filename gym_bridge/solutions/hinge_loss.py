"""Mean hinge loss in two deterministic stages: per-block partial sums of max(0, 1 - p*t), then one program
that adds the partials in order and divides by the element count."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096
SUM_BLOCK = 1024


@triton.jit
def hinge_partial_kernel(pred_ptr, target_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(pred_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    t = tl.load(target_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    loss = tl.where(mask, tl.maximum(1.0 - p * t, 0.0), 0.0)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(loss, axis=0))


@triton.jit
def scaled_sum_kernel(partial_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), tl.float32)
    for i0 in range(0, n, BLOCK):
        offs = i0 + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, (tl.sum(acc, axis=0) * scale).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        predictions, targets = torch.broadcast_tensors(predictions, targets)
        predictions, targets = predictions.contiguous(), targets.contiguous()
        n = predictions.numel()
        n_blocks = triton.cdiv(n, BLOCK)
        partials = torch.empty(n_blocks, dtype=torch.float32, device=predictions.device)
        out = torch.empty((), dtype=predictions.dtype, device=predictions.device)
        hinge_partial_kernel[(n_blocks,)](predictions, targets, partials, n, BLOCK=BLOCK, num_warps=8)
        scaled_sum_kernel[(1,)](partials, out, n_blocks, 1.0 / n, BLOCK=SUM_BLOCK, num_warps=4)
        return out
