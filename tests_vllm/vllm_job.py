"""Run one vLLM job with the qwen_ops plug-in and print its result as JSON (the tests run this in a subprocess).

A fresh process per job: vLLM sets up a process-wide distributed state, spawns
workers for tensor parallelism, and wants the ``if __name__ == "__main__"``
guard. The job (argv[1], JSON): ``model``, ``llm`` (keyword arguments of
``vllm.LLM``), ``prompts`` (token-id lists), ``max_tokens``, ``logprobs``.
Output (last stdout line): ``{"outputs": [{"token_ids", "logprobs"}], "counters": {...}, "step_s": [...]}``.
"""
import json
import os
import sys
import time

# Stock vLLM's CUDA wheel on a CPU machine: select the CPU platform, keep the engine in this
# process (the plug-in's counters live where the model runs), no NUMA thread binding.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

# Settings vLLM needs on this CPU path: eager mode, vLLM's own custom ops off (the model's
# remaining layers run as torch), an explicit KV-cache size (vLLM would otherwise reserve most of RAM).
LLM_DEFAULTS = dict(enforce_eager=True, skip_tokenizer_init=True, compilation_config={"custom_ops": ["none"]},
                    kv_cache_memory_bytes=64 << 20, enable_prefix_caching=False)


def main() -> None:
    job = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams

    from qwen_ops.vllm_plugin import counters

    llm = LLM(job["model"], **{**LLM_DEFAULTS, **job.get("llm", {})})
    params = SamplingParams(max_tokens=job["max_tokens"], temperature=0, ignore_eos=True,
                            logprobs=job.get("logprobs"))
    counters.reset()
    engine = llm.llm_engine
    for i, prompt in enumerate(job["prompts"]):
        engine.add_request(str(i), {"prompt_token_ids": prompt}, params)
    outputs, step_s = {}, []
    while engine.has_unfinished_requests():
        start = time.perf_counter()
        for out in engine.step():
            if out.finished:
                outputs[int(out.request_id)] = out.outputs[0]
        step_s.append(time.perf_counter() - start)
    result = {"outputs": [], "counters": counters.snapshot(), "step_s": step_s}
    for i in range(len(job["prompts"])):
        o = outputs[i]
        lps = [{str(t): lp.logprob for t, lp in entry.items()} for entry in (o.logprobs or [])]
        result["outputs"].append({"token_ids": list(o.token_ids), "logprobs": lps})
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
