"""Fused Triton kernels (imported as proxycomp.kernels)."""
