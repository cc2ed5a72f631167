"""The seeded simulation (``bench/reliability/simulation.py``) on a fixed set of seeds, in every prefix-caching
mode, with and without MTP, and with an INT8 KV cache: random arrivals, aborts, preemption on a small pool and
faults at every stage; every finished request equals the same request served alone, errors only where
faults hit a request twice in a row, no page leaked. ``bench/reliability/simulate.py`` runs many more seeds."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "reliability"))

from simulation import CONFIGS, POOL, REFERENCE, Reference, simulate  # noqa: E402

from qwen_ops import LLM  # noqa: E402

# Seeds whose runs hit what a wrong rollback breaks (align seed 0 mismatches when a failed step's cache
# registrations are kept).
SEEDS = {"none": [1], "align": [0], "chunk": [0], "none-mtp": [3], "align-mtp": [4], "chunk-mtp": [0],
         "int8-align": [3], "int8-chunk": [3]}
STEPS = 40


@pytest.fixture(scope="module")
def references(text_mtp_checkpoint):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Reference(LLM(text_mtp_checkpoint, **POOL, **CONFIGS[name]))
        return cache[name]

    return get


@pytest.mark.parametrize("config", list(CONFIGS))
def test_seeded_simulation(text_mtp_checkpoint, references, config):
    llm = LLM(text_mtp_checkpoint, **POOL, **CONFIGS[config])
    for seed in SEEDS[config]:
        report = simulate(llm, references(REFERENCE[config]), config, seed, STEPS)
        assert report.ok, (report.mismatches, report.leaked_pages, report.problems)
        # The run exercised what it is for.
        assert report.requests >= 8 and report.finished >= 4 and report.faults >= 2
        assert report.failed_steps == report.faults
        if CONFIGS[config].get("enable_prefix_caching"):
            assert report.cache_hit_tokens > 0
