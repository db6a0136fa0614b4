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
