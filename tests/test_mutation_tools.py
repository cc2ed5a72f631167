"""The mutation-testing tools of bench/mutation/: the C++ mutator, the target table, and one Python run.

The mutation score itself is a benchmark (bench/RESULTS.md, "Mutation testing"): it takes an hour.
Here: that the C++ mutator plants only real code mutations and restores exactly, that the table
names files that exist, and that a cosmic-ray run on a toy module reports killed and surviving
mutants as they are.
"""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench" / "mutation"))

import cpp_mutator  # noqa: E402
import targets  # noqa: E402

CPP = textwrap.dedent("""\
    #include <vector>  // a < b in a comment
    #define LIMIT (a < b)
    /* a block comment: x + y
       still the comment: x * y */
    int f(int a, int b) {
      const char* s = "a < b";  // string and comment: never mutated
      if (a < b && b != 0) return a + 1;
      std::vector<float> v;
      return std::max(a, b) * 2;
    }
""")


def test_cpp_sites_are_code_only():
    found = cpp_mutator.sites(CPP)
    assert {s.line for s in found} == {7, 9}
    assert {(s.line, s.original) for s in found} == {
        (7, " < "), (7, " && "), (7, " != "), (7, " + "), (7, " + 1"), (9, "std::max("), (9, " * ")}


def test_cpp_apply_plants_one_mutation_and_checks_the_text():
    site = next(s for s in cpp_mutator.sites(CPP) if s.original == " < " and s.replacement == " <= ")
    mutated = cpp_mutator.apply(CPP, site)
    assert mutated.splitlines()[6] == "  if (a <= b && b != 0) return a + 1;"
    assert [a for a, b in zip(CPP.splitlines(), mutated.splitlines()) if a != b] == [CPP.splitlines()[6]]
    with pytest.raises(ValueError, match="changed"):
        cpp_mutator.apply(CPP.replace("a < b &&", "a > b &&"), site)


def test_cpp_sample_is_reproducible_and_at_distinct_places():
    text = "\n".join(f"x{i} = a{i} + b{i} - c{i};" for i in range(40))
    all_sites = cpp_mutator.sites(text)
    first = cpp_mutator.sample(all_sites, 10, seed=3)
    assert first == cpp_mutator.sample(all_sites, 10, seed=3)
    assert first != cpp_mutator.sample(all_sites, 10, seed=4)
    assert len({(s.line, s.column) for s in first}) == 10


def test_every_target_names_files_that_exist():
    for target in targets.TARGETS:
        assert (REPO / target.source).is_file(), target
        for test in target.tests:
            assert (REPO / test).is_file(), (target.name, test)
    with pytest.raises(ValueError, match="unknown target"):
        targets.by_name(["no such target"])


@pytest.mark.timeout(300)
def test_a_python_run_reports_killed_and_surviving_mutants(tmp_path):
    pytest.importorskip("cosmic_ray", reason="cosmic-ray (the `test` extra) is not installed")
    import run_mutants

    (tmp_path / "toy.py").write_text("def checked(x):\n    return x + 1\n\n\ndef untested(x):\n    return x * 3\n")
    (tmp_path / "test_toy.py").write_text("from toy import checked\n\n\ndef test_checked():\n"
                                          "    assert checked(2) == 3\n")
    target = targets.Target("toy", "toy.py", ("test_toy.py",))
    outcomes = run_mutants.python_mutants(target, tmp_path, per_target=10, seed=0, test_timeout=60, wall=120)
    by_line = {}
    for outcome in outcomes:
        by_line.setdefault(int(outcome.description.split()[1].rstrip(":")), set()).add(outcome.status)
    # Line 2 is tested: every mutant there is killed; line 6 is not: every mutant there survives.
    assert by_line.get(2) == {"killed"} and by_line.get(6) == {"survived"}, outcomes
    assert (tmp_path / "toy.py").read_text().startswith("def checked(x):\n    return x + 1\n")


def test_every_listed_equivalent_mutant_is_still_in_its_source():
    """A listed equivalent names a line that exists (a stale entry would hide nothing and mislead)."""
    import run_mutants

    for (source, text, operator), reason in targets.EQUIVALENT.items():
        lines = [line.strip() for line in (REPO / source).read_text().splitlines()]
        assert text in lines, (source, text)
        target = next(t for t in targets.TARGETS if t.source == source)
        assert run_mutants.equivalent_reason(target, "    " + text, operator + "X") == reason
        assert reason and run_mutants.equivalent_reason(target, text + " ", "Other") == ""


def test_a_target_of_an_instruction_set_this_cpu_lacks_is_reported_not_run(monkeypatch, tmp_path):
    """The AVX-512 kernels on a CPU without AVX-512: not run, with the reason, and not counted as survivors."""
    import run_mutants

    target = targets.Target("wide", "bindings/cpu/int8_quantize_avx512.cpp", ("tests/ops/test_kv_kernel_isas.py",),
                            isa="avx512")
    monkeypatch.setattr(run_mutants, "by_name", lambda names: [target])
    monkeypatch.setattr(run_mutants, "prepare_workdir", lambda workdir: None)
    monkeypatch.setattr(run_mutants, "check_scratch_imports", lambda workdir: None)
    monkeypatch.setattr(run_mutants, "build_extension", lambda workdir: (True, ""))
    monkeypatch.setattr(run_mutants, "cpu_isas", lambda workdir: ["portable", "avx2"])
    ran = []
    monkeypatch.setattr(run_mutants, "run_tests", lambda *a, **k: ran.append(a) or (True, ""))
    report = tmp_path / "report.md"
    assert run_mutants.main(["--targets", "wide", "--workdir", str(tmp_path), "--markdown", str(report)]) == 0
    assert not ran
    text = report.read_text()
    assert "not run: this CPU lacks avx512 (it runs ['portable', 'avx2'])" in text
    assert "mutation score: 0/0 killed" in text
