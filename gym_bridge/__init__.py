"""Embedded KernelGYM and kernel RL (imported as proxycomp.gym_bridge)."""
