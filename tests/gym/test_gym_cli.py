import json

import pytest

from gym_paths import FIXTURES, HACKS, RELU_TASK
from proxycomp.cli import main as proxycomp
from proxycomp.gym_bridge.cli import steady_rate


def main(argv: list[str]) -> int:
    """`proxycomp gym ARGV` through the one dispatcher (bad input: one line, exit status 2)."""
    return proxycomp(["gym", *argv])


@pytest.mark.slow
def test_gym_eval_text_and_json(capsys):
    candidate = str(FIXTURES / "relu_triton.py")
    assert main(["eval", "--task", RELU_TASK, "--candidate", candidate, "--size", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "relu [relu_triton.py]: ok  reward 1.000" in text and "3/3 trials passed" in text
    assert main(["eval", "--task", "relu", "--candidate", str(HACKS / "f_zero_inputs.py"), "--size", "cpu",
                 "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "flagged" and result["hacks"] == ["input_mutation"]


def test_gym_eval_bad_paths_are_one_line_errors(capsys):
    assert main(["eval", "--task", RELU_TASK, "--candidate", "/nonexistent.py", "--size", "cpu"]) == 2
    # The subcommand is named: `proxycomp gym:` left out which of the gym's commands refused.
    assert capsys.readouterr().err == "proxycomp gym eval: error: --candidate '/nonexistent.py' is not a file\n"
    assert main(["eval", "--task", "no_such_task", "--candidate", str(FIXTURES / "relu_triton.py"),
                 "--size", "cpu"]) == 2
    assert "unknown task 'no_such_task'" in capsys.readouterr().err


def test_gym_tasks_lists_shipped_tasks(capsys):
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["task", "category", "sizes", "solution"]
    relu = next(line.split() for line in lines if line.startswith("relu "))
    assert relu[1:] == ["elementwise", "cpu,gpu,gpu_heldout", "yes"]


def test_gym_bench_rejects_unknown_task(capsys):
    assert main(["bench", "--size", "cpu", "--tasks", "no_such_task"]) == 2
    assert "--tasks" in capsys.readouterr().err


@pytest.mark.slow
def test_gym_bench_prints_table_writes_results_and_records(tmp_path, monkeypatch, capsys):
    from proxycomp.gym_bridge import cli

    bench_md = tmp_path / "BENCHMARKS.md"
    bench_md.write_text("# Benchmarks\n")
    monkeypatch.setattr(cli, "BENCHMARKS_PATH", str(bench_md))
    argv = ["bench", "--size", "cpu", "--tasks", "relu", "--results", str(tmp_path / "b.jsonl"), "--record"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| relu | relu | ok | 1.000 | n/a | n/a |" in out and "candidates/min" in out and "fast_0 1.000" in out
    assert "judge seconds per candidate: spawn " in out
    assert json.loads((tmp_path / "b.jsonl").read_text())["correct"] is True
    recorded = bench_md.read_text()
    assert "## Gym\n" in recorded and "`proxycomp gym bench --size cpu --tasks relu" in recorded


def test_recorded_block_lands_at_the_end_of_the_gym_section():
    from proxycomp.bench.record import insert_in_section
    from proxycomp.gym_bridge.cli import BENCH_HEADING

    text = f"# B\n\n## Data\nx\n\n{BENCH_HEADING}\n\n### old\n\n## Kernels\ny\n"
    out = insert_in_section(text, BENCH_HEADING, "\n### new\n")
    assert out.index("### old") < out.index("### new") < out.index("## Kernels")
    assert insert_in_section("# B\n", BENCH_HEADING, "\n### new\n") == f"# B\n\n{BENCH_HEADING}\n\n### new\n"


def test_the_steady_rate_leaves_out_each_workers_first_candidate():
    finished = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]  # two workers: their first results pay for starting the judges
    assert steady_rate(2.5, finished, 2) == " (60.0/min after each worker's first, first result after 7.5 s)"
    assert steady_rate(2.5, finished[:4], 2) == ""  # too few after the first ones to say


@pytest.mark.slow
def test_a_file_of_code_without_model_new_is_named_so(tmp_path, capsys):
    """It was `no_code (no code block found in the reply)`, which a .py file of code does not explain."""
    candidate = tmp_path / "relu.py"
    candidate.write_text("import torch\n\n\ndef relu(x):\n    return torch.clamp(x, min=0)\n")
    assert main(["eval", "--task", "relu", "--candidate", str(candidate), "--size", "cpu"]) == 1
    assert "status: no_code (no ```python block and no class ModelNew in the reply" in capsys.readouterr().out


@pytest.mark.parametrize("command, statuses", [
    ("eval", "Exit status: 0 when the verdict is ok, 1 for any other verdict"),
    ("bench", "Exit status: 0 when every candidate is correct, 1 when any is not, 2 for bad input"),
])
def test_exit_statuses_are_documented(capsys, command, statuses):
    assert main([command, "--help"]) == 0
    assert statuses in " ".join(capsys.readouterr().out.split())


def test_the_dispatcher_knows_the_gym_commands():
    """`proxycomp gym <command>: error:` names the commands the gym's parser has, through the dispatcher or not."""
    from proxycomp.cli import SUBCOMMANDS
    from proxycomp.gym_bridge.cli import COMMANDS, _parser

    assert set(SUBCOMMANDS["gym"]) == set(COMMANDS) == set(_parser()._subcommands_action.choices)
