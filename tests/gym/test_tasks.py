"""The shipped gym tasks load and run, and each shipped Triton solution matches its task's reference.

Solutions run in-process under the Triton interpreter at the "cpu" size (on the GPU where CUDA exists); the
sandboxed evaluator is tested elsewhere. GPU sizes are checked for shape and byte size on the meta device,
without allocating, and every launched kernel is compiled ahead of time for sm_90 in a child process.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import triton
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from proxycomp.gym_bridge.tasks import (
    CATEGORIES,
    SIZES,
    TASKS_DIR,
    TaskError,
    list_tasks,
    load_task,
    load_task_set,
)

TASKS = list_tasks()
TASK_IDS = [task.name for task in TASKS]
# Relative and absolute tolerance per output dtype (KernelBench uses 1e-4 for fp32, 1e-2 for half types).
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-2}
# Module constants that cap a solution's block size; shrinking them forces the multi-block loops that the
# GPU sizes take but the tiny cpu sizes would not reach. 16 is the smallest tile tl.dot accepts.
BLOCK_CAPS = {"MAX_BLOCK": 16, "TILE": 64}
# CPU CI runs the solutions through the interpreter; where CUDA exists (conftest then leaves the interpreter
# off) they run compiled on the GPU at the same tiny sizes.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _import(path: Path, prefix: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{prefix}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tensors(values) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


@pytest.fixture
def count_launches(monkeypatch):
    """Patches the launch path of Triton kernels (interpreted on CPU, JIT-compiled on CUDA) and returns the
    list of launched kernels. On CUDA it also turns TF32 off so the fp32 references are exact fp32."""
    kernel_class = InterpretedFunction if os.environ.get("TRITON_INTERPRET") == "1" else JITFunction
    launched: list[object] = []
    original_run = kernel_class.run

    def run(self, *args, **kwargs):
        launched.append(self)
        return original_run(self, *args, **kwargs)

    monkeypatch.setattr(kernel_class, "run", run)
    if DEVICE == "cpu":
        yield launched
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield launched
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


# --- tasks -------------------------------------------------------------------------------------------------


def test_task_set_covers_every_category():
    assert len(TASKS) >= 24
    assert {task.category for task in TASKS} == set(CATEGORIES)
    low_precision = [t.name for t in TASKS if "bfloat16" in t.source or "float16" in t.source]
    assert len(low_precision) >= 3, low_precision


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_task_runs_at_cpu_size(task):
    loaded = load_task(task.name)
    assert loaded == task and set(loaded.sizes) == set(SIZES)
    module = _import(task.path, "task")
    assert module.CATEGORY == task.category and tuple(module.SIZES) == task.sizes
    model = module.Model(*module.get_init_inputs("cpu"))
    inputs = module.get_inputs("cpu")
    for tensor in _tensors(inputs):
        assert tensor.device.type == "cpu" and tensor.numel() <= 20_000
        assert tensor.count_nonzero() > 0
    with torch.no_grad():
        out = model(*inputs)
    assert out.numel() > 0 and out.device.type == "cpu"
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_task_gpu_sizes_are_distinct_and_moderate(task):
    module = _import(task.path, "task")
    shapes = {}
    for size in ("gpu", "gpu_heldout"):
        with torch.device("meta"):
            inputs = module.get_inputs(size)
            out = module.Model(*module.get_init_inputs(size))(*inputs)
        # drawn on the device the gym runs them on (timing.draw_inputs), not on the host and copied
        assert out.device.type == "meta" and all(t.device.type == "meta" for t in _tensors(inputs))
        total = sum(t.numel() * t.element_size() for t in _tensors(inputs))
        assert 4 * 2**20 <= total <= 2**30, f"{task.name}/{size}: {total / 2**20:.0f} MiB of inputs"
        shapes[size] = [tuple(t.shape) for t in _tensors(inputs)]
    assert shapes["gpu"] != shapes["gpu_heldout"]
    assert module.get_inputs.__defaults__ == ("gpu",)


def test_the_gym_makes_inputs_on_its_device_and_moves_those_made_elsewhere():
    from proxycomp.gym_bridge.timing import draw_inputs

    task = ModuleType("host_task")
    task.SIZES = {"gpu": {}}
    task.get_inputs = lambda size: [torch.randn(3, 5).half(), torch.arange(4, device="cpu"), [torch.ones(2)], 7]
    drawn, host, nested, number = draw_inputs(task, "gpu", 0, "meta")
    assert drawn.device.type == host.device.type == nested[0].device.type == "meta" and number == 7
    assert drawn.dtype == torch.float16 and host.dtype == torch.int64


# --- solutions ---------------------------------------------------------------------------------------------


def _check_solution(task, seed: int, perturb_parameters: bool, launches: list, block_caps: dict | None = None) -> None:
    reference = _import(task.path, "task")
    solution = _import(task.solution_path, "solution")
    for cap, value in (block_caps or {}).items():
        if hasattr(solution, cap):
            setattr(solution, cap, value)
    init = reference.get_init_inputs("cpu")
    torch.manual_seed(seed)
    model = reference.Model(*init).to(DEVICE)
    torch.manual_seed(seed)
    candidate = solution.ModelNew(*init).to(DEVICE)
    if perturb_parameters and list(model.parameters()):
        # Non-default parameters prove the kernels read them rather than assuming the initial values.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        candidate.load_state_dict(model.state_dict())
    torch.manual_seed(1000 + seed)
    inputs = [v.to(DEVICE) if isinstance(v, torch.Tensor) else v for v in reference.get_inputs("cpu")]
    originals = [t.clone() for t in _tensors(inputs)]
    with torch.no_grad():
        expected = model(*inputs)
        launches.clear()
        got = candidate(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
    assert launches, f"{task.name}: ModelNew launched no Triton kernel"
    assert all(torch.equal(a, b) for a, b in zip(originals, _tensors(inputs)))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    tol = TOLERANCE.get(expected.dtype, 0.0)
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, msg=lambda m: f"{task.name} seed {seed}: {m}")


def test_every_task_has_a_solution():
    assert [t.name for t in TASKS if t.solution_path is None] == []


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_solution_matches_reference(task, count_launches):
    _check_solution(task, seed=0, perturb_parameters=False, launches=count_launches)
    _check_solution(task, seed=1, perturb_parameters=True, launches=count_launches)


@pytest.mark.parametrize(
    "task",
    [t for t in TASKS if t.solution_path and any(f"\n{cap} = " in t.solution_path.read_text() for cap in BLOCK_CAPS)],
    ids=lambda t: t.name,
)
def test_solution_multi_block_path(task, count_launches):
    _check_solution(task, seed=2, perturb_parameters=True, launches=count_launches, block_caps=BLOCK_CAPS)


def _has_nvidia_backend() -> bool:
    try:
        import triton.backends.nvidia.compiler  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not _has_nvidia_backend(), reason="Triton's NVIDIA backend is not installed")
def test_solution_kernels_compile_for_hopper():
    """The interpreter runs kernels as numpy and misses GPU-only compile errors (non-constexpr globals, type
    clashes in loop-carried values, bad layouts). A child without TRITON_INTERPRET replaces every launch with
    an ahead-of-time compile for sm_90 at the launch's real signature; no GPU or driver is needed."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    result = subprocess.run(
        [sys.executable, __file__, *TASK_IDS],
        env=env, capture_output=True, text=True, timeout=540,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert f"compiled {len(TASKS)} solutions" in result.stdout


# --- load_task errors --------------------------------------------------------------------------------------


def test_unknown_task_name_lists_close_matches():
    with pytest.raises(TaskError, match=r"unknown task 'rellu'; close matches: relu"):
        load_task("rellu")


def test_unknown_task_name_without_close_match_lists_shipped_tasks():
    with pytest.raises(TaskError, match=r"shipped tasks: .*softmax"):
        load_task("zzzzzz")


def test_missing_task_file(tmp_path):
    with pytest.raises(TaskError, match=r"does not exist"):
        load_task(tmp_path / "nope.py")


def test_task_file_missing_definitions(tmp_path):
    path = tmp_path / "half.py"
    path.write_text("import torch.nn as nn\n\nclass Model(nn.Module):\n    pass\n")
    with pytest.raises(TaskError, match=r"half.py lacks get_inputs, get_init_inputs"):
        load_task(path)


def test_task_file_syntax_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def get_inputs(:\n")
    with pytest.raises(TaskError, match=r"broken.py: syntax error at line 1"):
        load_task(str(path))


@pytest.mark.parametrize(
    "line, field",
    [("CATEGORY = 3", "CATEGORY must be a string literal"), ("SIZES = make_sizes()", "SIZES must be a dict literal")],
)
def test_task_file_bad_constants(tmp_path, line, field):
    path = tmp_path / "odd.py"
    path.write_text(f"{line}\nclass Model: ...\ndef get_inputs(): ...\ndef get_init_inputs(): ...\n")
    with pytest.raises(TaskError, match=field):
        load_task(path)


def test_plain_kernelbench_file_loads_as_custom(tmp_path):
    path = tmp_path / "my_op.py"
    path.write_text("class Model: ...\ndef get_inputs(): ...\ndef get_init_inputs(): ...\n")
    task = load_task(path)
    assert (task.name, task.category, task.sizes, task.solution_path) == ("my_op", "custom", (), None)
    assert "get_inputs" in task.source


def test_user_copy_of_shipped_task_has_no_shipped_solution(tmp_path):
    copy = tmp_path / "relu.py"
    copy.write_text((TASKS_DIR / "relu.py").read_text())
    assert load_task(copy).solution_path is None
    assert load_task("relu").solution_path is not None


@pytest.mark.parametrize(
    "name, init, inputs, message",
    [
        ("swiglu", [], [torch.randn(2, 5)], "even last dimension"),
        ("log_softmax", [], [torch.randn(2, 3, 4)], "expects a 2-D input"),
        ("linear_softmax", [4, 3], [torch.randn(2, 2, 4)], "expects a 2-D input"),
        ("cross_entropy", [], [torch.randn(4, 3), torch.zeros(5, dtype=torch.long)], r"logits \(N, C\)"),
        ("max_pool1d", [3, 2, 2], [], "padding 2 must be at most"),
    ],
)
def test_solution_rejects_unsupported_input(name, init, inputs, message):
    solution = _import(load_task(name).solution_path, "solution")
    with pytest.raises(ValueError, match=message):
        solution.ModelNew(*init)(*inputs)


def _compile_solutions_for_hopper(task_names: list[str]) -> None:
    """Child of test_solution_kernels_compile_for_hopper: runs each solution with JITFunction.run swapped for an
    sm_90 compile of the launch's signature, so nothing executes: at cpu size with normal and small blocks, and
    at both GPU sizes on the meta device (the block sizes, warps and grids the H200 runs, with no allocation)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    backend = triton.compiler.make_backend(target)
    pointer_types = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int64: "*i64"}

    def scalar_type(value) -> str:
        if isinstance(value, bool):
            return "i1"
        if isinstance(value, int):
            return "i32" if -(2**31) <= value < 2**31 else "i64"
        if isinstance(value, float):
            return "fp32"
        raise TypeError(f"unexpected kernel argument {value!r}")

    def compile_instead_of_launch(self, *args, grid, warmup, **kwargs):
        options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
        values = dict(zip(self.arg_names, args)) | kwargs
        signature, constexprs = {}, {}
        for param in self.params:
            value = values[param.name]
            if param.is_constexpr:
                signature[param.name], constexprs[param.name] = "constexpr", value
            elif isinstance(value, torch.Tensor):
                signature[param.name] = pointer_types[value.dtype]
            else:
                signature[param.name] = scalar_type(value)
        source = ASTSource(self, signature, constexprs)
        triton.compile(source, target=target, options=backend.parse_options(options).__dict__)

    JITFunction.run = compile_instead_of_launch  # this child process never launches a kernel
    for task in map(load_task, task_names):
        reference = _import(task.path, "task")
        for size, device, caps in [("cpu", "cpu", {}), ("cpu", "cpu", BLOCK_CAPS), ("gpu", "meta", {}),
                                   ("gpu_heldout", "meta", {})]:
            solution = _import(task.solution_path, "solution")
            for cap, value in caps.items():
                if hasattr(solution, cap):
                    setattr(solution, cap, value)
            with torch.no_grad(), torch.device(device):
                solution.ModelNew(*reference.get_init_inputs(size))(*reference.get_inputs(size))
    print(f"compiled {len(task_names)} solutions")


if __name__ == "__main__":
    _compile_solutions_for_hopper(sys.argv[1:])


def test_task_set_splits_are_checked(tmp_path):
    for stem in ("a", "b", "c"):
        (tmp_path / f"{stem}.py").write_text((TASKS_DIR / "relu.py").read_text())
    assert [t.name for t in load_task_set(tmp_path).split("all")] == ["a", "b", "c"]
    (tmp_path / "splits.json").write_text('{"train": ["a", "b"], "heldout": ["c"]}')
    task_set = load_task_set(tmp_path)
    assert [t.name for t in task_set.split("train")] == ["a", "b"] and task_set.split("heldout")[0].name == "c"
    with pytest.raises(TaskError, match="no split 'test'"):
        task_set.split("test")
    for bad, message in (('{"train": ["a", "zz"]}', "not in the folder: zz"), ('{"x": ["a"], "y": ["a"]}', "in both"),
                         ("[1]", "expected"), ("{", "not valid JSON")):
        (tmp_path / "splits.json").write_text(bad)
        with pytest.raises(TaskError, match=message):
            load_task_set(tmp_path)
    with pytest.raises(TaskError, match="not a folder"):
        load_task_set(tmp_path / "missing")
