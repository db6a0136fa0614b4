"""tools/kernelbench_side_by_side.py on the CPU: the reduced-shape problem copies, the candidates it picks, and the
clear stop where the comparison needs a GPU. A fake checkout stands in for KernelBench (CI has none)."""
import importlib.util
import json

import pytest

from gym_paths import HERE

TOOL = HERE.parents[1] / "tools" / "kernelbench_side_by_side.py"
SIDE_BY_SIDE = HERE / "kernelbench" / "side_by_side"

PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale

batch_size = 4096
dim = 393216  # a comment stays, and so does "é"
scale = 2.5
shape = (batch_size, dim)
use_bias = True

def get_inputs():
    width = 7
    return [torch.rand(*shape)]

def get_init_inputs():
    return [scale]
'''


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("kernelbench_side_by_side", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_copy(text: str) -> dict:
    namespace: dict = {}
    exec(compile(text, "copy", "exec"), namespace)  # noqa: S102 - the tool's rewritten copy must still run
    return namespace


def test_rewriting_module_level_integer_constants(tool):
    text, changed = tool.rewrite_constants(PROBLEM.replace("batch_size = 4096", "é = 1; batch_size = 4096"),
                                           {"batch_size": 16, "dim": 4099})
    assert changed == {"batch_size": [4096, 16], "dim": [393216, 4099]} and "é = 1; batch_size = 16\n" in text
    assert 'dim = 4099  # a comment stays, and so does "é"' in text and "width = 7" in text
    module = _run_copy(text)
    assert module["get_inputs"]()[0].shape == (16, 4099)  # expressions built on the constants follow them
    assert tool.rewrite_constants(PROBLEM, {})[0] == PROBLEM
    for name in ("scale", "use_bias", "width", "shape", "nothing"):  # a float, a bool, a local, a tuple, absent
        with pytest.raises(KeyError):
            tool.rewrite_constants(PROBLEM, {name: 3})


def test_shape_items(tool):
    assert tool.parse_shapes(["batch_size=16,dim=4099", "19:dim=8, batch_size=3", "19_ReLU:batch_size=2"]) == {
        None: {"batch_size": 16, "dim": 4099}, "19": {"dim": 8, "batch_size": 3}, "19_ReLU": {"batch_size": 2}}
    for bad in ("batch_size", "dim=4.5", "=3", "1x=2", "19:", "19:dim=3,", "19:dim=3,20:dim=4"):
        with pytest.raises(tool.Refusal):
            tool.parse_shapes([bad])


def _checkout(root):
    level = root / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (root / "src" / "kernelbench").mkdir(parents=True)
    (root / "src" / "kernelbench" / "eval.py").write_text("raise ImportError('not to be imported on the CPU')\n")
    (level / "19_ReLU.py").write_text(PROBLEM)
    (level / "36_RMSNorm_.py").write_text(PROBLEM.replace("dim = 393216", "features = 64\ndim = 8"))
    (level / "2_Other.py").write_text(PROBLEM)
    return root


def _candidates(folder, names):
    folder.mkdir()
    for name in names:
        (folder / f"{name}.py").write_text("class ModelNew: pass\n")
    return folder


def test_without_a_gpu_it_writes_the_copies_and_stops_clearly(tool, tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    kb = _checkout(tmp_path / "kb")
    cands = _candidates(tmp_path / "cands", ["19_ReLU", "19_ReLU__v2", "36_RMSNorm___variant", "2_Other", "x"])
    work = tmp_path / "work"
    rc = tool.main(["--kernelbench", str(kb), "--level", "1", "--problems", "19,36_RMSNorm_", "--shape",
                    "batch_size=16", "--shape", "36:features=5,dim=3", "--candidates", str(cands), "--work",
                    str(work)])
    out, err = capsys.readouterr()
    assert rc == 2 and "needs a CUDA GPU" in err and "--cpu_check" in err and len(err.strip().splitlines()) == 1
    assert "skipped, naming other problems: 2_Other.py, x.py" in out
    assert sorted(p.name for p in (work / "candidates").iterdir()) == ["19_ReLU.py", "19_ReLU__v2.py",
                                                                      "36_RMSNorm___variant.py"]
    relu = _run_copy((work / "problems" / "19_ReLU.py").read_text())
    norm = _run_copy((work / "problems" / "36_RMSNorm_.py").read_text())
    assert (relu["batch_size"], relu["dim"]) == (16, 393216)
    assert (norm["batch_size"], norm["features"], norm["dim"]) == (16, 5, 3)
    assert (kb / "KernelBench" / "level1" / "19_ReLU.py").read_text() == PROBLEM  # the checkout is left alone


def test_bad_input_is_one_line(tool, tmp_path, capsys):
    kb = _checkout(tmp_path / "kb")
    cands = _candidates(tmp_path / "cands", ["19_ReLU"])
    base = ["--kernelbench", str(kb), "--candidates", str(cands), "--work", str(tmp_path / "w")]
    cases = [
        (["--problems", "7"], "--problems 7: no problem file"),
        (["--problems", "19", "--shape", "features=3"], "--shape features: no chosen problem has"),
        (["--problems", "19", "--shape", "2:dim=3"], "2 is not one of the chosen problems"),
        (["--problems", "19", "--shape", "19:features=3"], "19_ReLU.py has no module-level integer constant features"),
        (["--problems", "2", "--candidates", str(cands)], "holds no <stem>.py"),
        (["--problems", "19", "--level", "3"], "expected a KernelBench checkout"),
    ]
    for argv, message in cases:
        assert tool.main([*base, *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)


@pytest.mark.slow
def test_cpu_check_runs_a_side_by_side_candidate_under_the_interpreter(tool, tmp_path, capsys):
    kb = _checkout(tmp_path / "kb")
    (kb / "KernelBench" / "level1" / "19_ReLU.py").write_text(
        PROBLEM.replace("torch.relu(x) * self.scale", "torch.relu(x)").replace("return [scale]", "return []")
        .replace("__init__(self, scale)", "__init__(self)").replace("self.scale = scale\n", ""))
    cands = tmp_path / "cands"
    cands.mkdir()
    (cands / "19_ReLU.py").write_text((SIDE_BY_SIDE / "19_ReLU.py").read_text())
    (cands / "19_ReLU__wrong.py").write_text((SIDE_BY_SIDE / "19_ReLU.py").read_text().replace(
        "tl.where(x < 0, 0.0, x)", "tl.where(x < 0.5, 0.0, x)"))
    work = tmp_path / "work"
    rc = tool.main(["--kernelbench", str(kb), "--problems", "19", "--shape", "batch_size=3,dim=1000",
                    "--candidates", str(cands), "--work", str(work), "--cpu_check"])
    checks = json.loads((work / "cpu_check.json").read_text())["checks"]
    assert rc == 1 and checks["19_ReLU"]["status"] == "ok" and checks["19_ReLU__wrong"]["status"] == "incorrect"
    assert checks["19_ReLU"]["shape"] == [3, 1000]


def test_kernelbench_is_entered_without_its_init_and_its_llm_helpers(tool, tmp_path, monkeypatch):
    import sys

    package = tmp_path / "kb" / "src" / "kernelbench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('the package __init__ ran')\n")
    (package / "utils.py").write_text("import a_module_this_machine_lacks\n")
    (package / "eval.py").write_text("from . import timing\n\ndef vendor():\n    from .utils import get_gpu_vendor\n"
                                     "    return get_gpu_vendor()\n")
    (package / "timing.py").write_text("TRIALS = 100\n")
    for name in ("kernelbench", "kernelbench.utils", "kernelbench.eval", "kernelbench.timing"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    kb_eval, kb_timing, note = tool.import_kernelbench(tmp_path / "kb")
    assert kb_timing.TRIALS == 100 and "a_module_this_machine_lacks" in note
    assert kb_eval.vendor() in ("nvidia", "amd", "unknown")
    for name in ("kernelbench", "kernelbench.utils", "kernelbench.eval", "kernelbench.timing"):
        sys.modules.pop(name, None)


def test_the_table_lines_up_both_sides(tool):
    ours = {"rows": {"19_ReLU": {"status": "ok", "speedup": 1.5, "kernel_ms": 0.2, "ref_ms": 0.3},
                     "19_ReLU__v2": {"status": "incorrect", "speedup": None, "kernel_ms": None, "ref_ms": None}}}
    theirs = {"19_ReLU": {"status": "ok", "correctness": True, "runtime": 0.25, "speedup": 1.2,
                          "ref_eager_stats": {"mean": 0.3}},
              "19_ReLU__v2": {"status": "incorrect", "correctness": False, "runtime": -1.0}}
    rows = tool.compare({"19_ReLU": "19_ReLU", "19_ReLU__v2": "19_ReLU", "19_ReLU__v3": "19_ReLU"}, ours, theirs)
    assert rows[0]["ratio"] == pytest.approx(1.25) and rows[1]["their_kernel_ms"] is None
    assert rows[2]["our_status"] == "missing" and rows[2]["their_correctness"] is None
    text = tool.table(rows)
    assert "| 19_ReLU | ok | True | 1.500 | 1.200 | 1.250 | 0.2000 | 0.2500 | 0.3000 | 0.3000 |" in text
    assert "| 19_ReLU__v2 | incorrect | False | n/a | n/a | n/a |" in text
