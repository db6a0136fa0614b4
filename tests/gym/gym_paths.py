"""Paths of the gym test fixtures (fixture tasks, honest candidates, planted hacks)."""
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
HACKS = HERE / "hacks"
RELU_TASK = str(FIXTURES / "relu.py")
MATMUL_TASK = str(FIXTURES / "matmul.py")
HONEST_RELU = (FIXTURES / "relu_triton.py").read_text()
HONEST_MATMUL = (FIXTURES / "matmul_triton.py").read_text()
