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
    ops."""

    def __init__(self) -> None:
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def call_targets(self) -> list[list[str]]:
        """Per captured graph, the functions and ops it calls, in order."""
        return [[str(node.target) for node in gm.graph.nodes if node.op == "call_function"] for gm in self.graphs]


@pytest.fixture
def graph_recorder():
    torch._dynamo.reset()  # graphs cached by earlier tests would not be captured again
    return GraphRecorder()
