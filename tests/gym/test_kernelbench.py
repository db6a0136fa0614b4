"""KernelBench problems as they are: a folder of plain problem files (shapes as module constants, CPU tensors from
get_inputs), a folder of candidates named after them, fast_p, a results file that resumes, splits."""
import json

import pytest

from gym_paths import HERE
from proxycomp.cli import main as proxycomp
from proxycomp.gym_bridge.benchmark import summary

PROBLEMS = HERE / "kernelbench" / "problems"
CANDIDATES = HERE / "kernelbench" / "candidates"


def gym(argv, capsys) -> tuple[int, str, str]:
    rc = proxycomp(["gym", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """The whole folder once, through the CLI, into a results file."""
    results = tmp_path_factory.mktemp("kb") / "results.jsonl"
    rc = proxycomp(["gym", "bench", "--tasks", str(PROBLEMS), "--candidates", str(CANDIDATES), "--workers", "2",
                    "--results", str(results)])
    return rc, results


@pytest.mark.slow
def test_every_candidate_is_judged_against_its_problem(bench):
    rc, results = bench
    rows = {json.loads(line)["candidate"]: json.loads(line) for line in results.read_text().splitlines()}
    assert set(rows) == {"relu", "relu__identity", "softmax", "gemm_bias_relu", "gemm_bias_relu__epilogue"}
    assert rc == 1  # one candidate is wrong
    assert rows["relu__identity"]["status"] == "incorrect" and rows["relu"]["status"] == "ok"
    # torch's GEMM beside a Triton epilogue is legal, as in KernelBench and KernelGYM
    assert rows["gemm_bias_relu__epilogue"]["status"] == "ok" and rows["gemm_bias_relu"]["status"] == "ok"
    stats = summary(rows.values())
    assert stats["fast_0"] == pytest.approx(4 / 5) and stats["fast_1"] == 0.0  # no timing on a CPU
    assert stats["problems"] == 3 and stats["geomean_speedup"] is None


@pytest.mark.slow
def test_a_finished_bench_resumes_without_judging_again_and_prints_rows(bench, capsys):
    _, results = bench
    rc, out, err = gym(["bench", "--tasks", str(PROBLEMS), "--candidates", str(CANDIDATES), "--results",
                        str(results), "--json"], capsys)
    rows = json.loads(out)
    assert rc == 1 and len(rows) == 5 and "resuming: 5 of 5" in err
    assert {"task", "candidate", "status", "reward", "speedup", "coverage"} <= set(rows[0])


@pytest.mark.slow
def test_a_split_and_the_kernelbench_tolerance(tmp_path, capsys):
    rc, out, _ = gym(["bench", "--tasks", str(PROBLEMS), "--candidates", str(CANDIDATES), "--split", "heldout",
                      "--kernelbench_tolerance", "--json"], capsys)
    rows = json.loads(out)
    assert rc == 0 and {r["task"] for r in rows} == {"gemm_bias_relu"}
    rc, out, _ = gym(["eval", "--task", str(PROBLEMS / "relu.py"), "--candidate", str(CANDIDATES / "relu__identity.py"),
                      "--kernelbench_tolerance", "--seed", "3", "--trials", "2", "--json"], capsys)
    result = json.loads(out)
    assert rc == 1 and "atol 0.01, rtol 0.01" in result["error"]


def test_bad_bench_input_is_one_line(tmp_path, capsys):
    (tmp_path / "nonsense__x.py").write_text("class ModelNew: pass\n")
    cases = [
        (["bench", "--candidates", str(CANDIDATES)], "--candidates needs --tasks FOLDER"),
        (["bench", "--tasks", str(PROBLEMS)], "--tasks FOLDER needs --candidates FOLDER"),
        (["bench", "--tasks", str(PROBLEMS), "--candidates", str(tmp_path)], "nonsense__x.py names no problem"),
        (["bench", "--tasks", str(PROBLEMS), "--candidates", str(CANDIDATES), "--split", "test"], "no split 'test'"),
        (["eval", "--task", str(PROBLEMS / "relu.py"), "--candidate", str(CANDIDATES / "relu.py"), "--size", "cpu"],
         "has no SIZES"),
        (["eval", "--task", "relu", "--candidate", str(CANDIDATES / "relu.py"), "--trials", "0"],
         "correct_trials"),
    ]
    for argv, message in cases:
        rc, _, err = gym(argv, capsys)
        assert rc == 2 and message in err and "Traceback" not in err, (argv, err)
        assert err.strip().startswith("proxycomp gym: error:")
