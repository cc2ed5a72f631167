"""The seeded simulation of ``simulation.py`` over many seeds: load, aborts, preemption, every prefix-caching
mode, MTP, INT8 KV and injected faults, every finished request checked against the same request served alone.

    python bench/reliability/simulate.py --seeds 20 --steps 200
    python bench/reliability/simulate.py --configs align-mtp --seeds 5 --first-seed 100

Prints one row per config and the totals; exits 1 if any run found a mismatch, a leak or a broken invariant
(and prints it). The model is the tests' tiny random Qwen3.5 with one MTP layer (``tests/model/checkpoints``).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "model"))

from simulation import CONFIGS, POOL, REFERENCE, Reference, Report, simulate  # noqa: E402

COLUMNS = ("seeds", "requests", "steps", "faults", "failed_steps", "finished", "aborted", "errored", "preemptions",
           "cache_hit_tokens", "mismatches", "leaked_pages")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds per config")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=150, help="steps with arrivals per seed (then it drains)")
    p.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    args = p.parse_args(argv)
    logging.getLogger("qwen_ops.engine").setLevel(logging.ERROR)  # each injected fault logs a warning

    from checkpoints import save_text_checkpoint_with_mtp

    from qwen_ops import LLM

    checkpoint = save_text_checkpoint_with_mtp(tempfile.mkdtemp(prefix="qwen_ops_sim_"), seed=3)
    references: dict[str, Reference] = {}
    rows, failures, start = [], [], time.perf_counter()
    for name in args.configs:
        ref_name = REFERENCE[name]
        if ref_name not in references:
            references[ref_name] = Reference(LLM(checkpoint, **POOL, **CONFIGS[ref_name]))
        llm = LLM(checkpoint, **POOL, **CONFIGS[name])
        totals = dict.fromkeys(COLUMNS, 0)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            report: Report = simulate(llm, references[ref_name], name, seed, args.steps)
            totals["seeds"] += 1
            for column in COLUMNS[1:]:
                value = getattr(report, column)
                totals[column] += len(value) if isinstance(value, list) else value
            if not report.ok:
                failures.append(report)
        rows.append((name, totals))
    header = f"{'config':<12}" + "".join(f"{c:>17}" for c in COLUMNS)
    print(header)
    for name, totals in rows:
        print(f"{name:<12}" + "".join(f"{totals[c]:>17}" for c in COLUMNS))
    all_totals = {c: sum(t[c] for _, t in rows) for c in COLUMNS}
    print(f"{'total':<12}" + "".join(f"{all_totals[c]:>17}" for c in COLUMNS))
    print(f"wall time {time.perf_counter() - start:.0f} s")
    for report in failures:
        print(f"FAILED {report.config} seed {report.seed}: mismatches {report.mismatches[:3]} leaked "
              f"{report.leaked_pages} problems {report.problems[:3]}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
