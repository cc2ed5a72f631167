"""Slowdown of the engine and of transformers under one competing CPU-bound process, per thread setting.

    python bench/e2e/bench_contention.py --model DIR [--configs default,passive,threads1] [--repeats 2]

Every configuration is a fresh child process (OpenMP reads OMP_WAIT_POLICY / GOMP_SPINCOUNT when
torch loads, so they cannot change inside one process) that loads the checkpoint once, warms up,
then times the same greedy workload (``--prompts`` random prompts of ``--prompt-len`` tokens,
``--new-tokens`` each; the engine serves them together, transformers one at a time as its users do)
alternately without and with a competitor (a Python busy loop, one process, started and stopped by
the child): quiet, busy, quiet, busy, ... ``--repeats`` pairs. Printed per configuration: the
median quiet and busy wall times and their ratio (the slowdown); engine and transformers
configurations alternate too. Configurations (``NAME`` = engine, ``hf-NAME`` = transformers):

  libgomp    QWEN_OPS_OMP_WAIT_POLICY=default: libgomp's own spin-then-sleep at a barrier (what both
             engines ran with before ``import qwen_ops`` set a policy; transformers' users get it)
  passive    OMP_WAIT_POLICY=PASSIVE: a waiting thread sleeps at once (what ``import qwen_ops`` sets
             now when the user set no policy: qwen_ops/openmp_policy.py)
  spin0      GOMP_SPINCOUNT=0 (libgomp's spin count alone, policy unset)
  threads1   torch.set_num_threads(1), policy as libgomp's default

Nothing is asserted; the machine's load average is printed with every line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ENV = {"libgomp": {"QWEN_OPS_OMP_WAIT_POLICY": "default"}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
       "spin0": {"GOMP_SPINCOUNT": "0", "QWEN_OPS_OMP_WAIT_POLICY": "default"},
       "threads1": {"QWEN_OPS_OMP_WAIT_POLICY": "default"}}
# One CPU-bound process; it stops by itself if the child that started it dies (its parent changes).
BUSY_LOOP = ("import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
             "    for _ in range(1000000):\n        pass\n")


def _load():
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def child(args) -> None:
    import qwen_ops  # first, as a user of the engine would: it sets the OpenMP policy before torch loads
    import torch

    config = args.child
    name = config.removeprefix("hf-")
    if name == "threads1":
        torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 100000, (args.prompt_len,), generator=gen).tolist() for _ in range(args.prompts)]
    if config.startswith("hf-"):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()

        def run():
            with torch.no_grad():
                for p in prompts:
                    ids = torch.tensor([p])
                    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                                   min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
    else:
        from qwen_ops import LLM, SamplingParams

        llm = LLM(args.model, dtype="float32", max_num_seqs=max(args.prompts, 1), max_model_len=2048)
        params = SamplingParams(max_tokens=args.new_tokens, temperature=0, ignore_eos=True, detokenize=False)

        def run():
            llm.generate(prompts, params)
    run()  # warm-up
    quiet, busy = [], []
    for _ in range(args.repeats):
        for times, competitor in ((quiet, False), (busy, True)):
            proc = subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) if competitor else None
            try:
                time.sleep(0.5 if competitor else 0.0)
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
            finally:
                if proc is not None:
                    proc.kill()
                    proc.wait()
    print(json.dumps(dict(config=config, threads=torch.get_num_threads(), quiet=quiet, busy=busy, load=_load(),
                          policy=qwen_ops.wait_policy())))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--configs", default="libgomp,passive,threads1",
                   help="comma separated; each runs for the engine and, as hf-NAME, for transformers")
    p.add_argument("--engines", default="qwen_ops,hf", help="qwen_ops, hf or both")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2, help="quiet/busy pairs per configuration")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return
    configs = []
    for name in args.configs.split(","):
        for engine in args.engines.split(","):
            configs.append(name if engine == "qwen_ops" else f"hf-{name}")
    print(f"model={args.model} prompts={args.prompts}x{args.prompt_len} tokens, {args.new_tokens} new each; "
          f"{args.repeats} quiet/busy pairs per configuration; cpus={os.cpu_count()}; load average {_load()}")
    print("| configuration | OpenMP wait policy | torch threads | quiet s (median) | with a competitor s (median) | "
          "slowdown | load average after |")
    print("|---|---|---|---|---|---|---|")
    for config in configs:
        env = {**os.environ, **ENV.get(config.removeprefix("hf-"), {})}
        cmd = [sys.executable, __file__, "--model", args.model, "--child", config, "--prompts", str(args.prompts),
               "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens),
               "--repeats", str(args.repeats)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"| {config} | failed: {done.stderr.strip().splitlines()[-1:]} ||||||")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        q, b = statistics.median(r["quiet"]), statistics.median(r["busy"])
        print(f"| {config} | {r['policy']} | {r['threads']} | {q:.2f} ({', '.join(f'{t:.2f}' for t in r['quiet'])}) | "
              f"{b:.2f} ({', '.join(f'{t:.2f}' for t in r['busy'])}) | {b / q:.2f}x | {r['load']} |", flush=True)


if __name__ == "__main__":
    main()
