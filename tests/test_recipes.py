"""Every shipped recipe parses and instantiates through the real CLI, with the links applied."""
import sys
from importlib import resources
from pathlib import Path

import pytest

from proxycomp.lightning_cli import build_cli

RECIPES = sorted(Path(str(p)) for group in resources.files("proxycomp.recipes").iterdir() if group.is_dir()
                 for p in group.iterdir() if p.name.endswith(".yaml"))
TRAINING = [p for p in RECIPES if p.parent.name in ("pretrain", "smoke")]


def test_the_pretrain_and_smoke_recipes_are_all_there():
    names = {f"{p.parent.name}/{p.stem}" for p in TRAINING}
    for group in ("pretrain", "smoke"):
        for arm in ("byte", "proxy_spm", "proxy_zstd", "proxy_brotli"):
            assert f"{group}/{arm}" in names


@pytest.mark.parametrize("recipe", TRAINING, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_recipe_parses_and_links(recipe, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # loggers and checkpoints would land under ./runs
    monkeypatch.setattr(sys, "argv", ["proxycomp"])  # LightningCLI warns when pytest's own argv is there too
    cli = build_cli(["--config", str(recipe)], run=False)
    data, lm, trainer = cli.datamodule, cli.model, cli.trainer
    assert lm.config.vocab_size == data.vocab_size
    assert lm.vocabulary == data.vocabulary
    assert lm.config.max_seq_len == data.config.seq_len
    assert data.config.mixing.total_steps == trainer.max_steps > 0
    assert lm.optim.warmup_steps < trainer.max_steps
    expected_name = recipe.stem if recipe.parent.name == "pretrain" else f"smoke_{recipe.stem}"
    assert [logger.name for logger in trainer.loggers] == [expected_name, expected_name]
    if recipe.parent.name == "smoke":
        assert lm.config.d_model <= 128 and lm.config.n_layers == 2 and data.config.corpus.max_documents
    else:
        params = sum(p.numel() for p in lm.parameters())
        # the RL policy's recipe trains at the longer context its episodes need
        assert 25e6 <= params <= 85e6 and data.config.seq_len == (6144 if recipe.stem == "h200_policy" else 2048)
