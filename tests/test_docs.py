"""What the README and docs tell a newcomer to run: commands that exist, examples that do not step on each other or
litter the checkout, and tables that match the command printed beside them."""
import re
from pathlib import Path

from proxycomp.compare.arms import ARMS

ROOT = Path(__file__).resolve().parents[1]


def section(path: str, heading: str) -> str:
    text = (ROOT / path).read_text()
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_the_own_data_examples_have_their_own_runs_and_keep_their_data_under_runs():
    """They shared the recipe's run name, so the README's next `--ckpt_path last` resumed one of them, and they wrote
    code.jsonl, code.parquet and code_ds/ into the checkout."""
    block = section("README.md", "## Your own data").split("```bash", 1)[1].split("```", 1)[0]
    commands = block.replace("\\\n", " ")
    fits = [line for line in commands.splitlines() if line.startswith("proxycomp fit")]
    names = [re.search(r"--run_name (\S+)", fit).group(1) for fit in fits]
    assert len(fits) == 4 and len(set(names)) == 4, fits
    recipe_names = set(re.findall(r"name: (\w+)", (ROOT / "recipes/smoke/proxy_spm.yaml").read_text()))
    assert not recipe_names & set(names)
    written = [path for path in re.findall(r"--data\.corpus\.path (\S+)", commands) if path != "."]
    assert len(written) == 3 and all(path.startswith("runs/") and f"'{path}'" in block for path in written)
    assert "runs/" in (ROOT / ".gitignore").read_text().split()


def test_the_cpu_comparison_table_is_the_printed_command_s():
    """docs/results.md's CPU table came from a tool and an arm list that had changed since."""
    cpu = section("docs/results.md", "## CPU smoke")
    assert "\n    proxycomp compare --preset cpu_smoke --out runs/compare_smoke" in cpu
    table = cpu.split("| arm |", 1)[1].split("\n\n", 1)[0]
    assert [row.split("|")[1].strip() for row in table.splitlines()[2:]] == list(ARMS)


def test_the_docs_give_the_proxycomp_verbs():
    """`python -m proxycomp.gym_bridge.rl.cli` was the docs' command; it is the same command as `proxycomp rl`, which
    the docs give."""
    for path in ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]:
        commands = [line for line in (ROOT / path).read_text().splitlines() if line.startswith("python -m proxycomp")]
        assert not commands, (path, commands)
