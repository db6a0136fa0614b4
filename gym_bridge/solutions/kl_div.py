"""KL(targets || predictions) with batch-mean reduction. The log of the predictions is fused into the
partial-sum kernel (no log tensor is materialized); zero targets contribute 0, as torch's xlogy does."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096
SUM_BLOCK = 1024


@triton.jit
def kl_partial_kernel(pred_ptr, target_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(pred_ptr + offs, mask=mask, other=1.0).to(tl.float32)
    t = tl.load(target_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    term = tl.where(t > 0, t * (tl.log(tl.where(t > 0, t, 1.0)) - tl.log(p)), 0.0)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(term, axis=0))


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
        kl_partial_kernel[(n_blocks,)](predictions, targets, partials, n, BLOCK=BLOCK, num_warps=8)
        scaled_sum_kernel[(1,)](partials, out, n_blocks, 1.0 / predictions.shape[0], BLOCK=SUM_BLOCK, num_warps=4)
        return out
