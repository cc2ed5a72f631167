"""The package's import graph, read from the source with ``ast``: no circle, no crowded folder, one layer order.

Every ``import`` and ``from ... import`` of every module of the installed package counts, those inside
functions too (a lazy import is still a dependency); relative imports are resolved. ``from pkg import name``
is an arrow to ``pkg.name`` where that is a module, else to ``pkg`` (its ``__init__``). The implicit import
of a parent package when a submodule loads is not an arrow (every module would then import its package).
"""
from __future__ import annotations

import ast
import os
from collections import defaultdict

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Compiled modules of the package (no source to read): imports of them lead nowhere inside the package.
EXTENSIONS = {"qwen_ops._C"}

MAX_MODULES_PER_FOLDER = 15

# The layers, from the top down. A module may import its own part and the parts of the layers below it;
# the parts of one layer do not import each other. The engine drives the worker, the worker drives the
# drafter (as vLLM's model runner does), both run the network, which takes the sampler's greedy argmax and
# loads through ``loading``. ``scheduling`` sits below the network in imports only because the step layout
# the layers read (``StepMetadata``) is the scheduler's; the scheduling package imports nothing of the model.
LAYERS = [
    ("qwen_ops.model.engine",),
    ("qwen_ops.model.worker",),
    ("qwen_ops.model.spec_decode",),
    ("qwen_ops.model.network",),
    ("qwen_ops.model.sample", "qwen_ops.model.loading"),
    ("qwen_ops.scheduling",),
    ("qwen_ops.ops",),
]

# One request from ``LLM.generate`` to a sampled token: each module calls the next one down.
REQUEST_WALK = [
    ("qwen_ops.model.engine.llm", "qwen_ops.model.engine.llm_engine"),  # LLM.generate -> LLMEngine.step
    ("qwen_ops.model.engine.llm_engine", "qwen_ops.scheduling"),  # Scheduler.schedule -> SchedulerOutput
    ("qwen_ops.model.engine.llm_engine", "qwen_ops.model.worker.model_runner"),  # ModelRunner.execute
    ("qwen_ops.model.worker.model_runner", "qwen_ops.model.network.qwen3_5"),  # Qwen35ForCausalLM.forward
    ("qwen_ops.model.worker.model_runner", "qwen_ops.model.sample.sampling"),  # sample -> the token
]


def _package_folders() -> dict[str, str]:
    """setup.py's PACKAGE_FOLDERS (installed package -> repository folder), read without running setup.py."""
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PACKAGE_FOLDERS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no PACKAGE_FOLDERS")


def _modules() -> dict[str, tuple[str, bool]]:
    """module name -> (source path, is a package's __init__) of every module of the installed package."""
    folders = _package_folders()
    # A folder installed as a package of its own (ops/ as qwen_ops.ops) is not also a subfolder of another.
    owned = {os.path.normpath(os.path.join(REPO, folder)) for folder in folders.values()}
    modules = {}
    for package, folder in folders.items():
        root = os.path.join(REPO, folder)
        for directory, subdirs, files in os.walk(root):
            subdirs[:] = [d for d in subdirs if os.path.isfile(os.path.join(directory, d, "__init__.py"))
                          and os.path.normpath(os.path.join(directory, d)) not in owned]
            rel = os.path.relpath(directory, root)
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for name in files:
                if name.endswith(".py"):
                    is_init = name == "__init__.py"
                    modules[prefix if is_init else f"{prefix}.{name[:-3]}"] = (os.path.join(directory, name), is_init)
    return modules


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module that importing ``name`` runs last: ``name`` itself, else its longest known prefix."""
    while name:
        if name in MODULES:
            return name
        if name in EXTENSIONS:
            return None
        name = name.rpartition(".")[0]
    return None


def _imports(module: str) -> dict[str, int]:
    """module -> {imported module of the package: line of the first such import}."""
    path, is_init = MODULES[module]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if is_init else module.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is not None and target != module:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "qwen_ops":
                    add(_resolve(alias.name), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
                if source.split(".")[0] != "qwen_ops":
                    continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in EXTENSIONS:
                    continue
                add(sub if sub in MODULES else _resolve(source), node.lineno)
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def _cycle() -> list[str] | None:
    """One import circle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH[module]):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def _part(module: str) -> tuple[int, str] | None:
    """(layer index, part) of a module of a layered part, or None (the package's faces, plug-in, testing)."""
    for index, parts in enumerate(LAYERS):
        for part in parts:
            if module == part or module.startswith(part + "."):
                return index, part
    return None


def _reaches(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in GRAPH[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_graph_reads_every_layer():
    # The walk over the source found the parts it checks (a renamed folder would make the checks vacuous).
    for parts in LAYERS:
        for part in parts:
            assert part in MODULES and any(m.startswith(part + ".") for m in MODULES), part
    assert GRAPH["qwen_ops.model.worker.model_runner"], "the model runner's imports were not read"


def test_no_import_circle():
    cycle = _cycle()
    if cycle:
        hops = [f"{a} -> {b} (line {GRAPH[a][b]} of {os.path.relpath(MODULES[a][0], REPO)})"
                for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import circle: " + " -> ".join(cycle) + "\n  " + "\n  ".join(hops))


def test_no_folder_holds_more_than_15_modules():
    per_folder = defaultdict(list)
    for path, _ in MODULES.values():
        per_folder[os.path.relpath(os.path.dirname(path), REPO)].append(os.path.basename(path))
    crowded = {folder: len(names) for folder, names in per_folder.items() if len(names) > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"folders with more than {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def test_imports_go_down_the_layers():
    wrong = []
    for module, targets in GRAPH.items():
        here = _part(module)
        if here is None:
            continue
        for target, line in targets.items():
            there = _part(target)
            if there is None:
                wrong.append(f"{module} (line {line}) imports {target}, which is outside the layers")
            elif there[1] != here[1] and there[0] <= here[0]:
                wrong.append(f"{module} (line {line}) imports {target}: {there[1]} is not below {here[1]}")
    assert not wrong, "imports against the layer order:\n  " + "\n  ".join(wrong)


def test_a_request_walks_down_from_llm_generate_to_a_sampled_token():
    for caller, callee in REQUEST_WALK:
        assert callee in GRAPH[caller], f"{caller} does not import {callee}"
    # Without returning: no module the request passes reaches back to one it came from.
    walk = [REQUEST_WALK[0][0]] + [callee for _, callee in REQUEST_WALK]
    for later_index, later in enumerate(walk):
        back = _reaches(later) & {m for m in walk[:later_index] if m != "qwen_ops.scheduling"}
        if later != "qwen_ops.scheduling":
            assert not back, f"{later} reaches back to {sorted(back)}"
    assert not {m for m in _reaches("qwen_ops.scheduling") if m.startswith("qwen_ops.model")}, \
        "the scheduler reaches into the model"


def test_old_module_paths_import_the_new_modules():
    import importlib

    import qwen_ops
    from qwen_ops import model

    for old, new in model.OLD_PATHS.items():
        module = importlib.import_module(f"qwen_ops.model.{old}")
        assert module is importlib.import_module(f"qwen_ops.model.{new}"), old
        assert module.__spec__.name == f"qwen_ops.model.{new}", old  # its own spec, not the alias's
    from qwen_ops.model.engine import LLM, LLMEngine  # the engine package stands where engine.py stood
    from qwen_ops.model.engine.llm_engine import LLMEngine as engine_class

    assert LLM is qwen_ops.LLM and LLMEngine is engine_class


def test_old_generate_path_runs_as_a_script():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "qwen_ops.model.generate", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: qwen-generate"), done.stdout + done.stderr
