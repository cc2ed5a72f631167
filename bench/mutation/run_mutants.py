"""Mutation testing: plant bugs in the targets of ``targets.py`` and report which the tests catch.

    python bench/mutation/run_mutants.py [--per-target N] [--seed S] [--targets "A,B"] [--markdown FILE]

Everything runs in a scratch copy of the working tree (``--workdir``, default
``/tmp/qwen_ops_mutation``; kept between runs so the C++ build is incremental), never in the
checkout itself: a mutant is written into a file, the target's tests run, the file is restored.

- Python targets: cosmic-ray (from the package index) finds the mutation sites and applies them;
  ``N`` sites per target are drawn with ``--seed`` (one operator per site), the rest skipped.
- C++ targets: ``cpp_mutator`` (ours) plants the mutant, ``setup.py build_ext --inplace`` rebuilds
  ``qwen_ops._C`` incrementally (one translation unit and the link), then the tests run. A mutant
  that does not compile is "incompetent" and not counted.

Each test has a time limit (pytest-timeout, ``--test-timeout``) and each run of a target's tests
a wall limit: a mutant that hangs counts as caught (the suite noticed), never as a stuck run.
Survivors are printed with their diff; those listed in ``targets.EQUIVALENT`` are counted apart,
with the reason. The score is killed / (mutants run - incompetent - equivalent).
"""
from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import cpp_mutator  # noqa: E402
from targets import EQUIVALENT, TARGETS, Target, by_name  # noqa: E402

# The installed layout (setup.py's PACKAGE_FOLDERS): these folders are qwen_ops.<name>. In the
# scratch copy they are linked into qwen_ops/ so that `import qwen_ops.model` finds the copy.
PACKAGE_LINKS = ("ops", "scheduling", "model")


@dataclass
class Outcome:
    description: str
    status: str  # killed | survived | incompetent | equivalent
    diff: str = ""
    reason: str = ""


@dataclass
class TargetResult:
    target: Target
    outcomes: list[Outcome] = field(default_factory=list)
    baseline_s: float = 0.0
    error: str = ""
    not_run: str = ""  # why the target cannot run on this machine (a CPU without its instruction set)

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


def prepare_workdir(workdir: Path, with_extension: bool = True) -> None:
    """Copy the working tree's tracked files (mtimes kept: unchanged C++ is not rebuilt) and link the packages.
    ``with_extension=False``: no ``qwen_ops._C`` (the vLLM environment's torch is not the one it was built for;
    the plug-in runs without it, as .ci/vllm_tests installs it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "--null", "-cf", "-", "-T", "-"], cwd=REPO, input=files, check=True,
                   stdout=open(workdir / ".tree.tar", "wb"))
    subprocess.run(["tar", "-xf", ".tree.tar", "--keep-newer-files"], cwd=workdir, check=True,
                   capture_output=True)
    (workdir / ".tree.tar").unlink()
    for name in PACKAGE_LINKS:
        link = workdir / "qwen_ops" / name
        if not link.is_symlink():
            link.symlink_to(Path("..") / name)
    built = sorted((REPO / "qwen_ops").glob("_C*.so"))
    if with_extension and built and not any((workdir / "qwen_ops").glob("_C*.so")):
        shutil.copy2(built[0], workdir / "qwen_ops" / built[0].name)


def scratch_env(workdir: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(workdir))
    env.pop("TRITON_INTERPRET", None)  # the tests' conftest sets it
    return env


# The interpreter of each target environment (Target.env); "vllm" is set from --vllm-python.
INTERPRETERS = {"": sys.executable}


def default_vllm_python() -> str:
    """The newest vLLM environment .ci/vllm_tests built (its cache folder), or ''."""
    root = Path(os.environ.get("QWEN_OPS_CI_CACHE", "/root/.cache/qwen_ops_ci"))
    found = sorted(root.glob("vllm-0.33.0-*/bin/python"), key=lambda p: p.stat().st_mtime)
    return str(found[-1]) if found and (found[-1].parents[1] / ".complete").exists() else ""


def test_command(target: Target, test_timeout: int) -> list[str]:
    return [INTERPRETERS[target.env], "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o",
            f"timeout={test_timeout}", *target.tests]


def run_tests(target: Target, workdir: Path, test_timeout: int, wall: float) -> tuple[bool, str]:
    """(passed, the output's tail); over ``wall`` seconds counts as failed (caught)."""
    try:
        proc = subprocess.run(test_command(target, test_timeout), cwd=workdir, env=scratch_env(workdir),
                              capture_output=True, text=True, timeout=wall)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {wall:.0f} s"
    return proc.returncode == 0, (proc.stdout + proc.stderr)[-1500:]


def check_scratch_imports(workdir: Path) -> None:
    probe = ("import qwen_ops.model, qwen_ops.ops, pathlib, sys; "
             "sys.exit(0 if pathlib.Path(qwen_ops.model.__file__).resolve().is_relative_to(sys.argv[1]) else 3)")
    proc = subprocess.run([sys.executable, "-c", probe, str(workdir.resolve())], cwd=workdir,
                          env=scratch_env(workdir), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the scratch copy's qwen_ops is not the one imported there: {proc.stderr[-500:]}")


def cpu_isas(workdir: Path) -> list[str]:
    """The instruction-set variants of the C++ kernels this CPU runs (``_C.cpu_isas()`` of the scratch build)."""
    proc = subprocess.run([sys.executable, "-c", "from qwen_ops import _C; print(','.join(_C.cpu_isas()))"],
                          cwd=workdir, env=scratch_env(workdir), capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"qwen_ops._C does not import in {workdir}: {proc.stderr.strip()}")
    return proc.stdout.strip().split(",")


def equivalent_reason(target: Target, line_text: str, operator: str) -> str:
    """The reason listed in ``targets.EQUIVALENT`` for this mutation (its operator, or a prefix of it), or ''."""
    for (source, text, prefix), reason in EQUIVALENT.items():
        if source == target.source and text == line_text.strip() and operator.startswith(prefix):
            return reason
    return ""


# ----------------------------------------------------------------------------------------- Python
def python_mutants(target: Target, workdir: Path, per_target: int, seed: int, test_timeout: int,
                   wall: float) -> list[Outcome]:
    import random

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    session = workdir / f".mutation-{target.source.replace('/', '_')}.sqlite"
    config = workdir / ".mutation-cosmic-ray.toml"
    session.unlink(missing_ok=True)
    command = " ".join(test_command(target, test_timeout))
    config.write_text(
        "[cosmic-ray]\n"
        f'module-path = "{target.source}"\n'
        f"timeout = {wall}\n"
        "excluded-modules = []\n"
        f"test-command = '{command}'\n"
        "[cosmic-ray.distributor]\n"
        'name = "local"\n')
    cosmic_ray = [sys.executable, "-m", "cosmic_ray.cli"]
    env = scratch_env(workdir)
    subprocess.run([*cosmic_ray, "init", str(config), str(session)], cwd=workdir, env=env, check=True,
                   capture_output=True)
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = list(db.work_items)
        places: dict[tuple, list] = {}
        for item in items:
            mutation = item.mutations[0]
            places.setdefault((mutation.start_pos, mutation.end_pos), []).append(item)
        rng = random.Random(seed)
        chosen_places = rng.sample(sorted(places), min(per_target, len(places)))
        keep = {rng.choice(places[place]).job_id for place in chosen_places}
        skip = [item.job_id for item in items if item.job_id not in keep]
        db.set_multiple_results(skip, WorkResult(worker_outcome=WorkerOutcome.SKIPPED))
    subprocess.run([*cosmic_ray, "exec", str(config), str(session)], cwd=workdir, env=env, check=True,
                   capture_output=True)
    source_lines = (workdir / target.source).read_text().splitlines()
    outcomes = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if item.job_id not in keep:
                continue
            mutation = item.mutations[0]
            line = mutation.start_pos[0]
            description = f"line {line}: {mutation.operator_name.split('/')[-1]} #{mutation.occurrence}"
            if result.worker_outcome != WorkerOutcome.NORMAL or result.test_outcome is None:
                status = "incompetent"
            else:
                status = result.test_outcome.value
            operator = mutation.operator_name.split("/")[-1]
            reason = equivalent_reason(target, source_lines[line - 1], operator) if status == "survived" else ""
            outcomes.append(Outcome(description, "equivalent" if reason else status, result.diff or "", reason))
    session.unlink(missing_ok=True)
    return sorted(outcomes, key=lambda o: int(o.description.split()[1].rstrip(":")))


# -------------------------------------------------------------------------------------------- C++
def build_extension(workdir: Path) -> tuple[bool, str]:
    env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "1"))
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--build-temp",
                           str(workdir / ".build")], cwd=workdir, env=env, capture_output=True, text=True)
    return proc.returncode == 0, (proc.stdout + proc.stderr)[-1500:]


def cpp_mutants(target: Target, workdir: Path, per_target: int, seed: int, test_timeout: int,
                wall: float) -> list[Outcome]:
    path = workdir / target.source
    original = path.read_text()
    outcomes = []
    try:
        for site in cpp_mutator.sample(cpp_mutator.sites(original), per_target, seed):
            mutated = cpp_mutator.apply(original, site)
            path.write_text(mutated)
            diff = "".join(difflib.unified_diff(original.splitlines(True), mutated.splitlines(True),
                                                target.source, target.source, n=0))
            built, _ = build_extension(workdir)
            if not built:
                outcomes.append(Outcome(site.describe(), "incompetent", diff))
                continue
            passed, _ = run_tests(target, workdir, test_timeout, wall)
            status = "survived" if passed else "killed"
            line_text = original.splitlines()[site.line - 1]
            reason = equivalent_reason(target, line_text, site.describe().split(": ", 1)[1]) if passed else ""
            outcomes.append(Outcome(site.describe(), "equivalent" if reason else status, diff, reason))
    finally:
        path.write_text(original)
        built, log = build_extension(workdir)  # leave the scratch build the unmutated one
        if not built:
            raise RuntimeError(f"the unmutated extension no longer builds in {workdir}: {log}")
    return outcomes


# ---------------------------------------------------------------------------------------- report
def score(results: list[TargetResult]) -> tuple[int, int]:
    killed = sum(r.count("killed") for r in results)
    counted = killed + sum(r.count("survived") for r in results)
    return killed, counted


def table(results: list[TargetResult]) -> list[str]:
    lines = ["| target | source | mutants | killed | survived | equivalent | incompetent | tests' time unmutated |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.error or r.not_run:
            lines.append(f"| {r.target.name} | `{r.target.source}` | — | — | — | — | — | {r.error or r.not_run} |")
            continue
        lines.append(f"| {r.target.name} | `{r.target.source}` | {len(r.outcomes)} | {r.count('killed')} | "
                     f"{r.count('survived')} | {r.count('equivalent')} | {r.count('incompetent')} | "
                     f"{r.baseline_s:.0f} s |")
    killed, counted = score(results)
    lines.append(f"\nmutation score: {killed}/{counted} killed"
                 + (f" ({100.0 * killed / counted:.1f} %)" if counted else ""))
    return lines


def survivors(results: list[TargetResult]) -> list[str]:
    lines = []
    for r in results:
        for o in r.outcomes:
            if o.status in ("survived", "equivalent"):
                head = f"- {r.target.source} {o.description}: " + (
                    f"equivalent: {o.reason}" if o.status == "equivalent" else "SURVIVED")
                lines.append(head)
                lines.extend("      " + d for d in o.diff.splitlines() if d.startswith(("+", "-"))
                             and not d.startswith(("+++", "---")))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-target", type=int, default=12, help="mutants drawn per target (default 12)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    parser.add_argument("--workdir", default=os.environ.get("QWEN_OPS_MUTATION_DIR", "/tmp/qwen_ops_mutation"))
    parser.add_argument("--test-timeout", type=int, default=120, help="per-test limit in seconds")
    parser.add_argument("--markdown", default="", help="also write the table and survivors to this file")
    parser.add_argument("--vllm-python", default="",
                        help="the vLLM environment's python for the plug-in targets (default: the newest one "
                             ".ci/vllm_tests built)")
    args = parser.parse_args(argv)
    targets = by_name([n.strip() for n in args.targets.split(",") if n.strip()]) if args.targets else list(TARGETS)
    workdir = Path(args.workdir)
    prepare_workdir(workdir)
    check_scratch_imports(workdir)
    # The plug-in's targets: their own scratch copy, without the extension built for the .venv's torch.
    workdirs = {"": workdir, "vllm": Path(f"{workdir}-vllm")}
    if any(t.env == "vllm" for t in targets):
        INTERPRETERS["vllm"] = args.vllm_python or default_vllm_python()
        if not INTERPRETERS["vllm"]:
            print("no vLLM environment: run .ci/vllm_tests once, or pass --vllm-python")
            return 2
        prepare_workdir(workdirs["vllm"], with_extension=False)
    if any(t.kind == "cpp" for t in targets):
        built, log = build_extension(workdir)
        if not built:
            print(f"the extension does not build in {workdir}: {log}")
            return 2
    start = time.time()
    results = []
    isas = cpu_isas(workdir) if any(t.isa for t in targets) else []
    for target in targets:
        result = TargetResult(target)
        if target.isa and target.isa not in isas:
            result.not_run = f"not run: this CPU lacks {target.isa} (it runs {isas})"
            results.append(result)
            print(f"{target.name}: {result.not_run}", flush=True)
            continue
        t0 = time.time()
        target_dir = workdirs[target.env]
        passed, log = run_tests(target, target_dir, args.test_timeout, wall=3600)
        result.baseline_s = time.time() - t0
        if not passed:
            result.error = f"tests fail unmutated: {log.splitlines()[-1] if log else ''}"
        else:
            wall = 3 * result.baseline_s + 60  # a mutant slower than this hangs: caught
            mutate = python_mutants if target.kind == "python" else cpp_mutants
            result.outcomes = mutate(target, target_dir, args.per_target, args.seed, args.test_timeout, wall)
        results.append(result)
        done = result.error or f"{result.count('killed')}/{len(result.outcomes)} killed"
        print(f"{target.name}: {done}  ({time.time() - t0:.0f} s)", flush=True)
    report = table(results) + ["", "survivors:"] + (survivors(results) or ["(none)"])
    report.append(f"\n({time.time() - start:.0f} s, seed {args.seed}, {args.per_target} per target, "
                  f"load average {os.getloadavg()[0]:.1f} at the end)")
    print("\n".join(report))
    if args.markdown:
        Path(args.markdown).write_text("\n".join(report) + "\n")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
