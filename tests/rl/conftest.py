"""Fixtures for the RL loop tests: a tiny byte-level policy, its checkpoint, and one shared CPU gym."""
import lightning
import pytest
import torch

from proxycomp.gym_bridge import EvalConfig, Evaluator, LocalPool
from proxycomp.gym_bridge.policy import ByteLMPolicy
from proxycomp.lit import ProxyLM
from proxycomp.model import ModelConfig, Transformer

TINY = dict(d_model=32, n_layers=2, n_heads=2, max_seq_len=4096)


def _tiny_transformer(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(ModelConfig(**TINY))


@pytest.fixture
def make_tiny_transformer():
    """A factory, for tests that need several identically (or differently) seeded models."""
    return _tiny_transformer


@pytest.fixture
def tiny_policy() -> ByteLMPolicy:
    return ByteLMPolicy(_tiny_transformer())


@pytest.fixture(scope="session")
def tiny_hparams() -> dict:
    """The tiny model's hyper-parameters as a checkpoint holds them (RL checkpoints carry them too)."""
    return dict(ProxyLM(ModelConfig(**TINY)).hparams)


@pytest.fixture
def tiny_ckpt(tmp_path):
    """A checkpoint in the layout `proxycomp fit` writes (hyper-parameters + state dict), for the CLI."""
    torch.manual_seed(0)
    lm = ProxyLM(ModelConfig(**TINY))
    path = tmp_path / "tiny.ckpt"
    torch.save({"state_dict": lm.state_dict(), "hyper_parameters": dict(lm.hparams),
                "pytorch-lightning_version": lightning.__version__}, path)
    return path


@pytest.fixture(scope="session")
def cpu_gym():
    with Evaluator(pool=LocalPool(num_workers=2), config=EvalConfig(size="cpu", correct_trials=2)) as evaluator:
        yield evaluator
