"""MTP speculative decoding on the CPU: tokens per step and end-to-end speed with and without it (issue 12).

    python bench/e2e/bench_mtp.py [--num-prompts 4 --prompt-len 32 --max-tokens 32 --k 1 2 3 --repeats 3]

The model is the built-in tiny default model (random weights, the real 248320-token vocabulary) with a random
MTP head added (``mtp.*`` drawn as the default model's weights are; the checkpoint is written once under the
qwen_ops cache). Every engine decodes the same random token-id prompts greedily (float32, prefix caching off so
that repeats do not hit the cache), through ``LLM.generate``:

* ``plain``: no speculation;
* ``mtp k=K``: the random MTP head drafts K tokens a step. Random weights accept almost nothing, so this shows
  the cost of drafting and verifying, not the gain;
* ``replay k=K``: the MTP proposer replaced by one replaying the plain run's greedy answer, right by
  construction: every draft is accepted, the ceiling of K + 1 tokens per verify step.

For each engine: the generated tokens per engine step (all steps of the run, prefill steps included), the mean
acceptance length (tokens a verify step emits, from ``RequestOutput.metrics``), the acceptance rate, and the
output tokens per second of the whole ``generate`` call; medians over ``--repeats`` runs after one warm-up run.
The greedy tokens of every speculative engine are checked against the plain ones (printed). Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time

import torch

MTP_SEED = 20250102


def mtp_model_dir() -> str:
    """The default model plus one random MTP layer (``mtp_num_hidden_layers=1``), written once to the cache."""
    from safetensors.torch import load_file, save_file

    from qwen_ops.model.loading.config import Qwen35Config
    from qwen_ops.model.loading.default_model import VERSION, default_model_dir
    from qwen_ops.model.network.mtp import mtp_expected_shapes
    from qwen_ops.model.loading.tokenizer import cache_dir
    from qwen_ops.model.loading.weights import SINGLE_FILE

    target = os.path.join(cache_dir(), f"default_qwen3_5_tiny_mtp_v{VERSION}")
    if os.path.isfile(os.path.join(target, SINGLE_FILE)):
        return target
    source = default_model_dir()
    with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
        raw = json.load(f)
    raw["mtp_num_hidden_layers"] = 1
    config = Qwen35Config.from_dict(raw)
    weights = load_file(os.path.join(source, SINGLE_FILE))
    gen = torch.Generator().manual_seed(MTP_SEED)
    for name, shape in mtp_expected_shapes(config, 1).items():
        # The default model's rule: zero-centred norms around 0, matrices of std 0.02.
        scale = 0.1 if name.endswith("norm.weight") else 0.02
        weights[name] = (scale * torch.randn(shape, generator=gen)).to(torch.bfloat16)
    tmp = f"{target}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_file(weights, os.path.join(tmp, SINGLE_FILE), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(raw, f, indent=2)
    try:
        os.replace(tmp, target)
    except OSError:  # a concurrent run published it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def replay(llm, answers: dict[str, list[int]]) -> None:
    """Replace the engine's MTP proposer by one drafting ``answers[request_id]`` (prompt + greedy answer) onwards."""
    spec = llm.model_runner.spec
    requests = llm.llm_engine.scheduler.requests

    def propose(inputs, hidden, out, emitted, token_at, caches, step_inputs):
        drafts = {}
        for request_id, new in emitted.items():
            known = len(requests[request_id].all_token_ids) + len(new)
            drafts[request_id] = answers[request_id][known:known + spec.k]
        return drafts

    spec.propose = propose


def run_once(llm, prompts, params, tag: str, answers=None):
    """(wall s, token lists, engine steps, metrics) of one generate call with request ids ``tag-i``."""
    ids = [f"{tag}-{i}" for i in range(len(prompts))]
    if answers is not None:
        replay(llm, {r: p + a for r, p, a in zip(ids, prompts, answers)})
    steps_before = len(llm.step_stats)
    start = time.perf_counter()
    for r, p in zip(ids, prompts):
        llm.add_request(p, params, request_id=r)
    while llm.has_unfinished_requests():
        llm.step()
    wall = time.perf_counter() - start
    outputs = [llm.llm_engine._output(r, forget=True) for r in ids]
    return wall, [o.outputs[0].token_ids for o in outputs], len(llm.step_stats) - steps_before, \
        [o.metrics for o in outputs]


def measure(llm, prompts, params, repeats: int, answers=None) -> dict:
    rows = []
    for repeat in range(repeats + 1):  # the first run warms up and is not counted
        wall, tokens, steps, metrics = run_once(llm, prompts, params, f"run{repeat}", answers)
        if repeat:
            rows.append((wall, tokens, steps, metrics))
    generated = sum(len(t) for t in rows[0][1])
    result = {"tok_s": statistics.median(generated / r[0] for r in rows),
              "tokens_per_step": statistics.median(generated / r[2] for r in rows),
              "tokens": rows[0][1]}
    if "spec_num_drafts" in rows[0][3][0]:
        drafts = [sum(m["spec_num_drafts"] for m in r[3]) for r in rows]
        accepted = [sum(m["spec_num_accepted_tokens"] for m in r[3]) for r in rows]
        drafted = [sum(m["spec_num_draft_tokens"] for m in r[3]) for r in rows]
        result["acceptance_length"] = statistics.median(1 + a / d for a, d in zip(accepted, drafts))
        result["acceptance_rate"] = statistics.median(a / max(d, 1) for a, d in zip(accepted, drafted))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--k", type=int, nargs="+", default=[1, 2, 3], help="numbers of speculative tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from qwen_ops import LLM, SamplingParams

    model = mtp_model_dir()
    gen = torch.Generator().manual_seed(args.seed)
    prompts = [torch.randint(0, 248000, (args.prompt_len,), generator=gen).tolist() for _ in range(args.num_prompts)]
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0, ignore_eos=True, detokenize=False)
    common = dict(dtype="float32", enable_prefix_caching=False)
    print(f"model {model}: {args.num_prompts} prompts x {args.prompt_len} tokens, {args.max_tokens} new tokens, "
          f"greedy, median of {args.repeats} runs; torch threads {torch.get_num_threads()}; "
          f"load average {os.getloadavg()[0]:.2f}")
    plain = measure(LLM(model, **common), prompts, params, args.repeats)
    longest = max(args.k)
    longer = SamplingParams(max_tokens=args.max_tokens + longest, temperature=0, ignore_eos=True, detokenize=False)
    answers = run_once(LLM(model, **common), prompts, longer, "answer")[1]  # drafts up to k past the end
    print(f"{'engine':<12} {'tok/s':>8} {'tokens/step':>12} {'accept len':>11} {'accept rate':>12} same tokens")
    print(f"{'plain':<12} {plain['tok_s']:8.1f} {plain['tokens_per_step']:12.2f} {'-':>11} {'-':>12} -")
    for k in args.k:
        spec = dict(common, speculative_config={"method": "mtp", "num_speculative_tokens": k})
        for name, replayed in ((f"mtp k={k}", None), (f"replay k={k}", answers)):
            r = measure(LLM(model, **spec), prompts, params, args.repeats, replayed)
            print(f"{name:<12} {r['tok_s']:8.1f} {r['tokens_per_step']:12.2f} {r['acceptance_length']:11.2f} "
                  f"{r['acceptance_rate']:12.2f} {r['tokens'] == plain['tokens']}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
