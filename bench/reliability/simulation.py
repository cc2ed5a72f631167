"""A seeded simulation of the engine under load and faults (TigerBeetle's VOPR and FoundationDB's simulation
testing, at this engine's scale): one seed fixes every arrival, abort and fault, so a failure replays exactly.

Each step, drawn from the seed: requests arrive (prompts that share prefixes, so the prefix cache hits), a
running or waiting request may be aborted, and a fault may be armed at a random stage of the step on a
random request (``fault_injection.py``: scheduling, the forward with its pages overwritten, sampling,
drafting, update, output). The page pool is small, so requests are preempted. Then the checks:

* every request that finishes normally ("stop", "length") gives exactly the tokens of the same request served
  alone on a reference engine: greedy tokens are batch-, chunking-, preemption- and retry-invariant in
  float32 here, and the float32 configs (prefix caching off or on, MTP or not) all give the target's greedy
  tokens, so one float32 reference serves them. An INT8-KV config is compared with a reference engine of
  the same config with the same restarts: a request rolled back or preempted re-prefills its prompt and the
  tokens it had, so those positions' K/V are quantised from prefill-computed values rather than the decode's,
  which may differ by one INT8 step (a rounding edge), enough to flip a near tie later (seen: one token in
  one of these runs). So its tokens from each restart point on must equal the reference serving the prompt
  plus the tokens it had there as one prompt (exactly what the engine does after a restart);
* an aborted or errored request's tokens are a prefix of its solo tokens;
* a request ends with "error" only if failed steps touched it at least ``max_consecutive_step_failures`` times;
* every failed step raised ``StepFailedError`` once (one per injected fault that fired, no other);
* at the end no page, state row, batch row or sampling state is left: the free-block count is the whole pool.

``bench/reliability/simulate.py`` runs many seeds; ``tests/model/test_simulation.py`` a fixed few in CI.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from fault_injection import STAGES, FaultInjector, InjectedFault

from qwen_ops import SamplingParams
from qwen_ops.model.engine.step_failure import StepFailedError

MTP = {"method": "mtp", "num_speculative_tokens": 2}
# The engine's prefix-caching modes (off: GDN "none" mode; on: "align" mode, with MTP its EAGLE block drop, and
# "chunk" mode, the default, with its GDN checkpoint pool), with and without MTP, and an INT8 KV cache; every one
# on a small pool so that requests get preempted.
POOL = dict(num_blocks=24, block_size=16, max_num_seqs=4, max_num_batched_tokens=32)
CONFIGS = {
    "none": dict(enable_prefix_caching=False),
    "align": dict(enable_prefix_caching=True, mamba_cache_mode="align"),
    "chunk": dict(enable_prefix_caching=True, mamba_cache_mode="chunk"),
    "none-mtp": dict(enable_prefix_caching=False, speculative_config=MTP),
    "align-mtp": dict(enable_prefix_caching=True, mamba_cache_mode="align", speculative_config=MTP),
    "chunk-mtp": dict(enable_prefix_caching=True, mamba_cache_mode="chunk", speculative_config=MTP),
    "int8-align": dict(kv_cache_dtype="int8", enable_prefix_caching=True, mamba_cache_mode="align"),
    "int8-chunk": dict(kv_cache_dtype="int8", enable_prefix_caching=True, mamba_cache_mode="chunk"),
}
# The reference a config is checked against: float32 ones against the plain float32 engine, INT8 ones their own
# config (served alone, with the same restarts).
REFERENCE = {name: (name if name.startswith("int8") else "none") for name in CONFIGS}


@dataclass
class Report:
    """What one seeded run did and found."""

    config: str
    seed: int
    steps: int = 0
    requests: int = 0
    finished: int = 0
    aborted: int = 0
    errored: int = 0
    preemptions: int = 0
    faults: int = 0
    failed_steps: int = 0
    cache_hit_tokens: int = 0
    mismatches: list[str] = field(default_factory=list)
    leaked_pages: int = 0
    problems: list[str] = field(default_factory=list)  # broken invariants other than token mismatches

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.leaked_pages and not self.problems


class Reference:
    """Solo tokens of a request on a reference engine, memoised by (prompt, max_tokens)."""

    def __init__(self, llm):
        self.llm = llm
        self.tokens: dict[tuple, list[int]] = {}

    def continued(self, prompt: list[int], got: list[int], max_tokens: int, restarts: list[int]) -> list[int]:
        """What the reference gives with the engine's restarts: from each restart point p on, the prompt plus
        the first p tokens served as one prompt (the tokens before p as ``got`` has them)."""
        expected = []
        points = sorted({0, *(p for p in restarts if p < len(got))})
        for i, point in enumerate(points):
            end = points[i + 1] if i + 1 < len(points) else max_tokens
            expected[point:] = self(prompt + got[:point], max_tokens - point)[:end - point]
        return expected

    def __call__(self, prompt: list[int], max_tokens: int) -> list[int]:
        key = (tuple(prompt), max_tokens)
        if key not in self.tokens:
            params = SamplingParams(max_tokens=max_tokens, temperature=0, detokenize=False)
            self.tokens[key] = self.llm.generate([prompt], params)[0].outputs[0].token_ids
        return self.tokens[key]


def _prompt(rng: random.Random, prefixes: list[list[int]], vocab: int) -> list[int]:
    prefix = rng.choice(prefixes) if rng.random() < 0.8 else []
    return prefix + [rng.randrange(1, vocab) for _ in range(rng.randint(1, 24))]


def simulate(llm, reference: Reference, config: str, seed: int, steps: int, *, arrival_rate: float = 0.35,
             abort_rate: float = 0.03, fault_rate: float = 0.12) -> Report:
    """Drive ``llm`` (an empty ``LLM`` of ``config``) for ``steps`` steps of seeded traffic and faults, then
    until every request ended; check everything listed in the module docstring. The engine is left empty."""
    rng = random.Random(seed)
    engine = llm.llm_engine
    scheduler = engine.scheduler
    vocab = engine.config.vocab_size
    report = Report(config, seed)
    # Shared prefixes long enough to be hit: past the hit granularity (a block; in "chunk" mode a GDN
    # checkpoint, 64 tokens; an align block raised past 16) by at least 4 tokens. Always a choice from three
    # lengths, so the seed's draws stay the same.
    config = scheduler.config
    granularity = config.checkpoint_granularity if config.gdn_cache_mode == "chunk" else config.block_size
    lengths = [n + max(granularity + 4 - 20, 0) for n in (20, 33, 40)]
    prefixes = [[rng.randrange(1, vocab) for _ in range(rng.choice(lengths))] for _ in range(2)]
    stages = [s for s in STAGES if s != "drafting" or engine.model_runner.spec is not None]
    injector = FaultInjector(engine)
    live: dict[str, tuple[list[int], int]] = {}  # request id -> (prompt, max_tokens)
    touched: dict[str, int] = {}  # request id -> failed steps that touched it
    # INT8: request id -> its output counts at each restart (rollback or preemption), and its preemptions.
    restarts: dict[str, list[int]] | None = {} if engine.kv_cache_dtype == torch.int8 else None
    preemptions: dict[str, int] = {}
    first_step = len(engine.step_stats)
    counter = 0
    try:
        for step in range(steps * 10):
            if step >= steps and not engine.has_unfinished_requests():
                break
            if step < steps:
                while rng.random() < arrival_rate and len(live) < 8:
                    request_id = f"s{seed}-{counter}"
                    counter += 1
                    prompt, max_tokens = _prompt(rng, prefixes, vocab), rng.randint(1, 12)
                    engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0,
                                                              detokenize=False), request_id)
                    live[request_id] = (prompt, max_tokens)
                    report.requests += 1
                if live and rng.random() < abort_rate:
                    victim = rng.choice(sorted(live))
                    if engine.abort_request(victim):
                        _check_ended(engine._output(victim, forget=True), live.pop(victim), reference, touched,
                                     engine.max_consecutive_step_failures, report, restarts)
                if injector.armed is not None and injector.armed[1] is not None and injector.armed[1] not in live:
                    injector.armed = None  # its target ended before the fault fired
                if injector.armed is None and live and rng.random() < fault_rate:
                    target = rng.choice(sorted(live)) if rng.random() < 0.7 else None
                    injector.arm(rng.choice(stages), target)
            fired_before = len(injector.fired)
            report.steps += 1
            try:
                outputs = engine.step()
            except StepFailedError as failure:
                report.failed_steps += 1
                if not isinstance(failure.__cause__, InjectedFault):
                    report.problems.append(f"step {step}: a failure not injected: {failure}")
                if len(injector.fired) != fired_before + 1:
                    report.problems.append(f"step {step}: StepFailedError without one injected fault")
                for request_id in failure.request_ids:
                    touched[request_id] = touched.get(request_id, 0) + 1
                    if restarts is not None:
                        restarts.setdefault(request_id, []).append(len(engine._tracked[request_id].token_ids))
                continue
            if restarts is not None:
                for request_id, request in scheduler.requests.items():
                    if request.num_preemptions != preemptions.get(request_id, 0):
                        preemptions[request_id] = request.num_preemptions
                        restarts.setdefault(request_id, []).append(len(engine._tracked[request_id].token_ids))
            if len(injector.fired) != fired_before:
                report.problems.append(f"step {step}: an injected fault fired but the step did not fail")
            for output in outputs:
                if output.finished:
                    _check_ended(engine._output(output.request_id, forget=True), live.pop(output.request_id),
                                 reference, touched, engine.max_consecutive_step_failures, report, restarts)
        else:
            report.problems.append("the engine did not finish its requests")
    finally:
        injector.close()
    report.faults = len(injector.fired)
    report.preemptions = sum(s.num_preempted for s in engine.step_stats[first_step:])
    if live:
        report.problems.append(f"requests never ended: {sorted(live)}")
    report.leaked_pages = _leaks(engine, report)
    return report


def _check_ended(output, request, reference: Reference, touched: dict, limit: int, report: Report,
                 restarts: dict | None) -> None:
    prompt, max_tokens = request
    got, reason = output.outputs[0].token_ids, output.outputs[0].finish_reason
    if restarts is None:
        solo = reference(prompt, max_tokens)
    else:  # INT8: with the same restarts (see the module docstring)
        solo = reference.continued(prompt, got, max_tokens, restarts.get(output.request_id, []))
    report.cache_hit_tokens += output.num_cached_tokens
    if reason in ("stop", "length"):
        report.finished += 1
        if got != solo:
            report.mismatches.append(f"{output.request_id}: {got} != solo {solo}")
        return
    if reason == "abort":
        report.aborted += 1
    elif reason == "error":
        report.errored += 1
        if touched.get(output.request_id, 0) < limit:
            report.problems.append(f"{output.request_id} ended with 'error' after "
                                   f"{touched.get(output.request_id, 0)} failed step(s)")
    else:
        report.problems.append(f"{output.request_id}: unexpected finish_reason {reason!r}")
    if got != solo[:len(got)]:
        report.mismatches.append(f"{output.request_id} ({reason}): {got} is not a prefix of solo {solo}")


def _leaks(engine, report: Report) -> int:
    """Pages still taken once every request ended (after one empty step hands the last ends to the runner)."""
    if engine.step() != []:
        report.problems.append("an empty engine's step returned outputs")
    scheduler = engine.scheduler
    pool = scheduler.kv_cache.pool
    if scheduler.requests or scheduler.step_failures or engine.has_unfinished_requests():
        report.problems.append("the scheduler still holds requests")
    if scheduler.state_rows.num_free_slots != scheduler.config.max_num_seqs:
        report.problems.append("GDN state rows leaked")
    if len(engine.input_batch) or engine.model_runner.sampling:
        report.problems.append("the model runner still holds requests")
    return (scheduler.config.num_blocks - 1 - scheduler.num_free_blocks) + sum(1 for c in pool.ref_cnt if c)
