"""``qwen-generate``: generate text with the qwen_ops engine from the command line.

    qwen-generate                                  # built-in tiny random Qwen3.5, one default prompt
    qwen-generate --model DIR --prompt "Hello" --max-tokens 64 --temperature 0.7
    qwen-generate --model DIR --prompts-file prompts.txt --kv-cache-dtype int8 --trace

It prints the budget in use, streams the text of a single prompt (a progress
bar over many), and ends with throughput, time to first token and step statistics.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

DEFAULT_PROMPT = "The future of AI inference on Ascend NPUs is"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qwen-generate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default=None,
                   help="checkpoint directory (config.json + safetensors); default: the built-in tiny random model")
    p.add_argument("--prompt", action="append", default=None, help="a prompt (repeatable)")
    p.add_argument("--prompts-file", default=None, help="a file with one prompt per line")
    p.add_argument("--max-tokens", type=int, default=32, help="tokens to generate per prompt")
    p.add_argument("--temperature", type=float, default=1.0, help="0 is greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 keeps all tokens")
    p.add_argument("--seed", type=int, default=0, help="engine sampling seed")
    p.add_argument("--ignore-eos", action="store_true", help="keep generating after the end-of-sequence token")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "int8"])
    p.add_argument("--quantization", default=None, choices=["ascend", "int8_weight_only"],
                   help="INT8 projections: msModelSlim W8A8 checkpoints ('ascend'; found by default when the "
                        "checkpoint has quant_model_description.json) or per-channel INT8 of a float checkpoint")
    p.add_argument("--block-size", type=int, default=16,
                   help="requested KV block size; raised until an attention page holds a GDN page (vLLM's rule)")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
                   help="reuse cached prefixes (vLLM's align mode for the GDN states); default: on, as in vLLM "
                        "0.33 for hybrid models, off with --speculative-tokens")
    p.add_argument("--num-blocks", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--kv-cache-memory-gib", type=float, default=None)
    p.add_argument("--backend", default=None, choices=["torch", "triton", "ascendc"])
    p.add_argument("--device", default=None, help="torch device (default: npu, else cuda, else cpu)")
    p.add_argument("--speculative-tokens", type=int, default=0,
                   help="MTP speculative decoding: draft this many tokens a step with the checkpoint's MTP head "
                        "(0: off; greedy requests only so far)")
    p.add_argument("--trace", action="store_true", help="print one line per scheduler step")
    return p


def _prompts(args) -> list[str]:
    prompts = list(args.prompt or [])
    if args.prompts_file:
        with open(args.prompts_file, encoding="utf-8") as f:
            prompts += [line.rstrip("\n") for line in f if line.strip()]
    return prompts or [DEFAULT_PROMPT]


def _summary(llm, outputs, wall: float) -> list[str]:
    prompt_tokens = sum(len(o.prompt_token_ids) for o in outputs)
    gen_tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    ttft = [o.metrics["first_token_time"] - o.metrics["arrival_time"] for o in outputs
            if o.metrics.get("first_token_time") is not None]
    steps = llm.step_stats
    step_ms = [s.seconds * 1e3 for s in steps]
    decode_ms = [s.seconds * 1e3 for s in steps if s.num_prefills == 0]
    lines = [
        f"requests: {len(outputs)}  prompt tokens: {prompt_tokens}  generated tokens: {gen_tokens}  "
        f"wall time: {wall:.2f} s",
        f"throughput: prompt {prompt_tokens / wall:.1f} tok/s, generation {gen_tokens / wall:.1f} tok/s",
    ]
    if ttft:
        lines.append(f"time to first token: mean {statistics.mean(ttft) * 1e3:.1f} ms, "
                     f"median {statistics.median(ttft) * 1e3:.1f} ms, max {max(ttft) * 1e3:.1f} ms")
    if steps:
        lines.append(f"steps: {len(steps)}  mean {statistics.mean(step_ms):.1f} ms  median "
                     f"{statistics.median(step_ms):.1f} ms  max {max(step_ms):.1f} ms  "
                     f"mean tokens/step {statistics.mean(s.num_tokens for s in steps):.1f}  "
                     f"preemptions {sum(s.num_preempted for s in steps)}")
    if decode_ms:
        lines.append(f"decode-only steps: {len(decode_ms)}  median {statistics.median(decode_ms):.1f} ms")
    if llm.llm_engine.enable_prefix_caching:
        cached = sum(o.num_cached_tokens for o in outputs)
        lines.append(f"prefix cache: {cached} of {prompt_tokens} prompt tokens hit "
                     f"({100 * cached / max(prompt_tokens, 1):.1f} % hit rate)")
        stats = llm.llm_engine.scheduler.prefix_cache_stats
        if stats.requests:  # a hybrid model: engine-wide, why the hits stopped where they did
            lines.append(stats.summary())
    spec = llm.model_runner.spec
    if spec is not None:
        lines.append(spec.total.summary())
    return lines


# What a user's input can cause (a missing file, a bad checkpoint or flag, a prompt too long):
# reported as one line and exit code 2 rather than a traceback. The checkpoint errors
# (ConfigError, WeightsError) and the tokenizer's are ValueErrors.
USER_ERRORS = (OSError, ValueError)


def _fail(exc: BaseException) -> int:
    print(f"qwen-generate: {exc}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Imported after the arguments parse, so that --help and a bad flag answer without loading torch.
    from ..sample.sampling import SamplingParams
    from ..spec_decode.speculative_config import speculative_config_from_cli
    from .llm import LLM

    try:
        params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                                top_k=args.top_k, ignore_eos=args.ignore_eos)
        prompts = _prompts(args)
    except USER_ERRORS as exc:
        return _fail(exc)
    if args.model is None:
        print("qwen-generate: no --model given, using the built-in tiny Qwen3.5-shaped model with random "
              "weights (its text is meaningless; it is created and cached on first use)", file=sys.stderr)
    start = time.perf_counter()
    try:
        llm = LLM(args.model, dtype=args.dtype, kv_cache_dtype=args.kv_cache_dtype, block_size=args.block_size,
                  num_blocks=args.num_blocks, max_num_batched_tokens=args.max_num_batched_tokens,
                  max_num_seqs=args.max_num_seqs, backend=args.backend, seed=args.seed,
                  max_model_len=args.max_model_len, device=args.device,
                  kv_cache_memory_gib=args.kv_cache_memory_gib, enable_prefix_caching=args.enable_prefix_caching,
                  speculative_config=speculative_config_from_cli(args.speculative_tokens),
                  quantization=args.quantization)
        _ = llm.tokenizer  # load (or build once) before timing generation
    except USER_ERRORS as exc:
        return _fail(exc)
    llm.trace = args.trace
    print(f"model: {llm.model_dir} (loaded in {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    print(f"budget: {llm.budget_summary()}", file=sys.stderr)
    print(llm.backend_summary(), file=sys.stderr)
    if llm.kv_scale_source:
        print(f"INT8 KV scales: {llm.kv_scale_source}", file=sys.stderr)

    start = time.perf_counter()
    try:
        if len(prompts) == 1:
            print(prompts[0], end="", flush=True)
            for chunk in llm.stream(prompts, params):
                print(chunk.new_text, end="", flush=True)
            print()
            # stream() forgets finished requests: rebuild the summary from the engine's records.
            outputs = llm.last_outputs
        else:
            outputs = llm.generate(prompts, params, use_tqdm=True)
            for o in outputs:
                print(f"--- {o.prompt!r}\n{o.outputs[0].text}")
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except ValueError as exc:  # a prompt the engine rejects (all are checked before any runs)
        return _fail(exc)
    wall = time.perf_counter() - start
    for line in _summary(llm, outputs, wall):
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
