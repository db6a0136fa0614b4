"""Test-wide set-up: CPU runs use Triton's interpreter; `gpu` tests run only where CUDA exists."""
import os

import pytest

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - torch is a hard requirement
    HAS_CUDA = False

if not HAS_CUDA:
    # Must be set before the first `import triton` anywhere in the session.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _interpreter_takes_loaded_loop_bounds() -> bool:
    """Whether Triton's interpreter runs a loop whose bound is a loaded scalar, as the attention kernels' document
    loops are. Triton 3.6's cannot under numpy >= 2.4 (its `tensor.__index__` calls `int()` on a one-element array,
    which numpy 2.4 refuses), and every attention test would fail with a bare TypeError."""
    import triton
    import triton.language as tl
    from triton.runtime.errors import InterpreterError

    @triton.jit
    def count(bound_ptr, out_ptr):
        n = 0
        for _ in range(0, tl.load(bound_ptr)):
            n += 1
        tl.store(out_ptr, n)

    out = torch.zeros(1, dtype=torch.int32)
    try:
        count[(1,)](torch.tensor([3], dtype=torch.int32), out)
    except InterpreterError:
        return False
    return int(out) == 3


def pytest_configure(config):
    if os.environ.get("TRITON_INTERPRET") == "1" and not _interpreter_takes_loaded_loop_bounds():
        import numpy
        import triton

        pytest.exit(
            f"Triton {triton.__version__}'s interpreter cannot run loops bounded by a loaded value with numpy "
            f"{numpy.__version__}, so the kernel tests cannot run on the CPU here: install numpy<2.4 or a Triton whose "
            "interpreter does (3.9 does; `make test` installs it)",
            returncode=4,
        )


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


class GraphRecorder:
    """A torch.compile backend that runs each graph Dynamo captures as it is and keeps it, so a test can read its
    ops. With `aot`, it keeps the forward and backward graphs AOTAutograd makes of it instead (what Inductor would
    compile, and what calls the ops at run time; the backward one once a backward has run)."""

    def __init__(self, aot: bool = False) -> None:
        self.aot = aot
        self.graphs = []

    def _keep(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def _keep_boxed(self, gm, example_inputs):  # AOTAutograd calls its graphs with one list of arguments
        from torch._functorch.aot_autograd import make_boxed_func

        return make_boxed_func(self._keep(gm, example_inputs))

    def __call__(self, gm, example_inputs):
        if self.aot:
            from torch._dynamo.backends.common import aot_autograd

            return aot_autograd(fw_compiler=self._keep_boxed, bw_compiler=self._keep_boxed)(gm, example_inputs)
        return self._keep(gm, example_inputs)

    def call_targets(self) -> list[list[str]]:
        """Per captured graph, the functions and ops it calls, in order."""
        return [[str(node.target) for node in gm.graph.nodes if node.op == "call_function"] for gm in self.graphs]


@pytest.fixture
def graph_recorder():
    torch._dynamo.reset()  # graphs cached by earlier tests would not be captured again
    return GraphRecorder()


@pytest.fixture
def aot_graph_recorder():
    torch._dynamo.reset()
    return GraphRecorder(aot=True)
