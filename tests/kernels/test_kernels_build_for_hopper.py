"""Every kernel builds for sm_90 with the launchers' configs, checked on the CPU (no GPU needed).

The interpreter used by the other CPU tests skips the compiler, so this is what catches build errors
(loop-carried types, layouts, shared memory) before a GPU run does.
"""
import os
import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_all_kernels_compile_for_hopper():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "proxycomp.kernels.compile_check"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # (a non-zero exit also names a forward build that re-reads q at every key block: compile_check.q_reloads)
    # attention at head sizes 64 and 128: three passes in one launch, and in two with short tiles, the forward with
    # TMA and through pointers, the forward without documents both ways, the single launches with grouped-query heads
    # (4) and at a length no multiple of 16 (3: no TMA there), and the dk/dv pass with its masked loops unpipelined
    # (22 each); embedding 5. Each with its registers and stack, as cuobjdump read them.
    built = [line for line in proc.stdout.splitlines() if line.startswith("built ")]
    assert len(built) == 49, proc.stdout
    assert sum("with grouped-query heads" in line for line in built) == 8, proc.stdout
    # The model's launches: its shape's ints specialized as Triton does (no grouped-query heads: GROUP=1, a constant)
    assert all("GROUP=1" in line for line in built if line.startswith("built attention") and "grouped" not in line)
    assert all(re.search(r"GROUP=4\b", line) for line in built if "grouped" in line), proc.stdout
    assert all(re.search(r": \d+ registers, \d+ B stack$", line) for line in built), proc.stdout
