"""KernelBench problems as they are: a folder of plain problem files (shapes as module constants, CPU tensors from
get_inputs), a folder of candidates named after them, fast_p, a results file that resumes, splits."""
import json

import pytest

from gym_paths import HERE
from proxycomp.cli import main as proxycomp
from proxycomp.gym_bridge.kernelbench import summary

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
        (["eval", "--task", str(PROBLEMS / "relu.py"), "--candidate", str(CANDIDATES / "relu.py"), "--size",
          "gpu_heldout"], "relu.py is a plain KernelBench file (no SIZES)"),
        (["eval", "--task", "relu", "--candidate", str(CANDIDATES / "relu.py"), "--trials", "0"],
         "correct_trials"),
    ]
    for argv, message in cases:
        rc, _, err = gym(argv, capsys)
        assert rc == 2 and message in err and "Traceback" not in err, (argv, err)
        assert err.strip().startswith(f"proxycomp gym {argv[0]}: error:")


TASK_TEXT = "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n" \
            "def get_init_inputs():\n    return []\n"


def _folder(root, stems):
    root.mkdir()
    for stem in stems:
        (root / f"{stem}.py").write_text(TASK_TEXT)
    return root


def test_a_candidate_names_the_longest_problem_stem(tmp_path):
    """KernelBench stems end in "_" (36_RMSNorm_) or hold "__" (50_conv_standard_2D__square_input__square_kernel,
    76_conv_standard_1D_dilated_strided__): a candidate is `<stem>.py` or `<stem>__<variant>.py` for the longest
    problem stem it fits."""
    from proxycomp.gym_bridge.kernelbench import pair_candidates, problem_of
    from proxycomp.gym_bridge.tasks import load_task_set

    conv, strided = "50_conv_standard_2D__square_input__square_kernel", "76_conv_standard_1D_dilated_strided__"
    problems = _folder(tmp_path / "level1", ["19_ReLU", "36_RMSNorm_", conv, strided])
    expected = {"19_ReLU": "19_ReLU", "19_ReLU__a__b": "19_ReLU", "36_RMSNorm_": "36_RMSNorm_",
                "36_RMSNorm___variant": "36_RMSNorm_", conv: conv, f"{conv}__v2": conv, strided: strided,
                f"{strided}__v2": strided}
    _folder(tmp_path / "cands", expected)
    task_set = load_task_set(problems)
    assert {e.id: e.task.name for e in pair_candidates(task_set, tmp_path / "cands")} == expected
    # one problem's stem starts another's: the longer wins, the shorter keeps its own variants
    names = {"1_A", "1_A__x", "36_RMSNorm", "36_RMSNorm_"}
    assert problem_of("1_A__x", names) == "1_A__x" and problem_of("1_A__x__v2", names) == "1_A__x"
    assert problem_of("1_A__y", names) == "1_A" and problem_of("1_A", names) == "1_A"
    assert problem_of("36_RMSNorm___variant", names) == "36_RMSNorm_"
    assert problem_of("36_RMSNorm__variant", names) == "36_RMSNorm"
    for stem in ("36_RMSNorm_x", "1_AB", "1_A_x", "2_A__x", "__1_A", "1_"):
        assert problem_of(stem, names) is None, stem


def test_a_candidate_that_fits_no_problem_stem_is_one_line(tmp_path, capsys):
    problems = _folder(tmp_path / "level1", ["36_RMSNorm_"])
    _folder(tmp_path / "cands", ["36_RMSNorm___variant", "36_RMSNorm_variant"])
    rc, _, err = gym(["bench", "--tasks", str(problems), "--candidates", str(tmp_path / "cands"), "--size", "cpu"],
                     capsys)
    assert rc == 2 and "candidate 36_RMSNorm_variant.py names no problem" in err and "Traceback" not in err


def _size_config(monkeypatch, argv, cuda: bool):
    """The EvalConfig `gym bench ARGV` would judge with, on a machine with or without CUDA."""
    import torch

    from proxycomp.gym_bridge import cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    args = cli._parser().parse_args(["bench", *argv])
    return cli._config(args["bench"], [e.task for e in cli._bench_entries(args["bench"])])


KB_FOLDERS = ["--tasks", str(PROBLEMS), "--candidates", str(CANDIDATES)]


def test_a_plain_file_is_judged_at_its_own_shapes_under_cpu_and_gpu(monkeypatch):
    assert _size_config(monkeypatch, [*KB_FOLDERS, "--size", "cpu"], cuda=False).size == "cpu"
    assert _size_config(monkeypatch, [*KB_FOLDERS, "--size", "cpu"], cuda=True).size == "cpu"
    assert _size_config(monkeypatch, [*KB_FOLDERS, "--size", "gpu"], cuda=True).size == "gpu"
    assert _size_config(monkeypatch, KB_FOLDERS, cuda=True).size == "gpu"
    assert _size_config(monkeypatch, KB_FOLDERS, cuda=False).size == "cpu"
    # a Ray cluster's judges have GPUs this machine may lack
    assert _size_config(monkeypatch, [*KB_FOLDERS, "--size", "gpu", "--ray", "auto"], cuda=False).size == "gpu"


def test_sizes_a_task_cannot_give_are_one_line(monkeypatch):
    from proxycomp.errors import UserError

    cases = [
        ([*KB_FOLDERS, "--size", "gpu_heldout"], True, "relu.py is a plain KernelBench file (no SIZES)"),
        ([*KB_FOLDERS, "--size", "gpu"], False, "--size gpu is judged on a GPU and this machine has no CUDA"),
        (["--tasks", "relu", "--size", "gpu"], False, "--size gpu is judged on a GPU and this machine has no CUDA"),
        (["--tasks", "relu", "--size", "gpu_heldout"], False, "--size gpu_heldout is judged on a GPU"),
    ]
    for argv, cuda, message in cases:
        with pytest.raises(UserError) as err:
            _size_config(monkeypatch, argv, cuda)
        assert message in str(err.value) and "\n" not in str(err.value), (argv, str(err.value))
    assert _size_config(monkeypatch, ["--tasks", "relu", "--size", "gpu_heldout"], cuda=True).size == "gpu_heldout"


def test_a_task_whose_sizes_lack_the_size_is_one_line(tmp_path, monkeypatch):
    from proxycomp.errors import UserError

    problems = tmp_path / "tasks"
    problems.mkdir()
    (problems / "only_gpu.py").write_text(TASK_TEXT + "SIZES = {'gpu': dict(n=8)}\n")
    (tmp_path / "cands").mkdir()
    (tmp_path / "cands" / "only_gpu.py").write_text("class ModelNew: pass\n")
    folders = ["--tasks", str(problems), "--candidates", str(tmp_path / "cands")]
    with pytest.raises(UserError, match=r"only_gpu.py has SIZES gpu only; use one of those"):
        _size_config(monkeypatch, [*folders, "--size", "cpu"], cuda=True)
    assert _size_config(monkeypatch, [*folders, "--size", "gpu"], cuda=True).size == "gpu"


@pytest.mark.slow
def test_a_plain_file_is_judged_under_size_cpu(capsys):
    rc, out, _ = gym(["eval", "--task", str(PROBLEMS / "relu.py"), "--candidate", str(CANDIDATES / "relu.py"),
                      "--size", "cpu", "--trials", "2", "--json"], capsys)
    assert rc == 0 and json.loads(out)["status"] == "ok"


def test_size_gpu_without_cuda_is_one_line_through_the_cli(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for argv in (["bench", *KB_FOLDERS, "--size", "gpu"], ["eval", "--task", "relu", "--candidate",
                                                          str(CANDIDATES / "relu.py"), "--size", "gpu"]):
        rc, _, err = gym(argv, capsys)
        assert rc == 2 and "this machine has no CUDA" in err and "Traceback" not in err, err
        assert err.strip().startswith(f"proxycomp gym {argv[0]}: error:") and len(err.strip().splitlines()) == 1
