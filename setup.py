"""proxycomp: proxy-compression pretraining, fused Triton kernels and an embedded KernelGYM.

`kernels/`, `gym_bridge/` and `recipes/` install as `proxycomp.kernels`, `proxycomp.gym_bridge` and
`proxycomp.recipes` through package_dir: a top-level `kernels` package would shadow the unrelated PyPI `kernels`
that transformers probes, and the recipes ship as package data.
"""
from setuptools import find_packages, setup

SUBTREES = {"proxycomp": "proxycomp", "proxycomp.kernels": "kernels", "proxycomp.gym_bridge": "gym_bridge",
            "proxycomp.recipes": "recipes"}


def _packages():
    found, dirs = [], {}
    for name, path in SUBTREES.items():
        found.append(name)
        dirs[name] = path
        for sub in find_packages(path, exclude=["tests", "tests.*"]):
            found.append(f"{name}.{sub}")
            dirs[f"{name}.{sub}"] = f"{path}/{sub.replace('.', '/')}"
    return found, dirs


packages, package_dir = _packages()

setup(
    name="proxycomp",
    version="0.1.0",
    description="Byte-level code LMs trained with proxy compression, Triton kernels and an embedded KernelGYM",
    python_requires=">=3.10",
    packages=packages,
    package_dir=package_dir,
    package_data={"proxycomp.gym_bridge": ["tasks/*.py", "solutions/*.py"], "proxycomp.recipes": ["*/*.yaml"]},
    install_requires=[
        "torch>=2.4",
        "lightning>=2.3",
        "jsonargparse[signatures]>=4.27",
        "sentencepiece>=0.2",
        "zstandard>=0.22",
        "brotli>=1.1",
        "numpy",
        "pyyaml",
        "rich",
        "tensorboard",
        "matplotlib",
        "datasets>=2.18",
        "pyarrow",
    ],
    extras_require={
        "dev": ["pytest>=7", "pytest-timeout", "hypothesis>=6", "triton>=3.0", "ruff==0.17.6"],
        "ray": ["ray[default]>=2.9"],
        "flash": ["flash-attn"],
    },
    entry_points={"console_scripts": ["proxycomp=proxycomp.cli:main"]},
)
