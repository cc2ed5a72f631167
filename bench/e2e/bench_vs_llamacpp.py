"""qwen_ops against llama.cpp on the CPU, same checkpoint, matching precisions.

    python bench/e2e/bench_vs_llamacpp.py --work /tmp/llamacpp --model DIR [--threads 2] [--repeats 3]
    python bench/e2e/bench_vs_llamacpp.py --work /tmp/llamacpp --make-0p8b   # a 0.8B-shaped random checkpoint

Steps (each reuses what an earlier run left in ``--work``):
1. llama.cpp from the ``llama-cpp-python`` sdist the package index serves (``pip download --no-binary``;
   its vendored ``vendor/llama.cpp``), built CPU-only with ``-DGGML_NATIVE=ON`` (about 5 minutes on 2 cores):
   ``llama-bench``, ``llama-batched-bench``, ``llama-simple``.
2. The checkpoint converted with llama.cpp's own ``convert_hf_to_gguf.py`` at f32, bf16 and q8_0 (the
   Qwen3.5 tokenizer is copied beside the weights first: the converter reads it).
3. Greedy agreement: 16 new tokens after the same text prompt, qwen_ops float32 against llama.cpp f32
   (llama-simple samples greedily); compared as text, token by token of qwen_ops' output.
4. Timings, 2 threads each, the engines alternating (qwen_ops, llama.cpp, qwen_ops, ...), ``--repeats``
   rounds, medians: decode at batch 1 (128-token prompt, 64 new), prefill of one 512-token prompt, and 16
   parallel sequences (16-token prompts, 64 new, decode tok/s summed), at float32/f32, bfloat16/bf16 and
   INT8 (qwen_ops' weight-only INT8, with float32 activations and with bfloat16 ones) against q8_0; the load
   time of each. Each engine is warmed up before it is timed: llama-bench and llama-batched-bench run a
   warm-up of their own, and qwen_ops runs each workload's shape once after loading (not in its load time),
   since an engine's first steps pay one-time costs (measured: the first round's bfloat16 decode read 16.2
   tok/s, the next two 28.2 and 25.7).
Run on a 0.8B-shaped checkpoint (``--make-0p8b``): bench/RESULTS.md, "On the CPU against llama.cpp".
Printed: one markdown table (precision, workload, qwen_ops tok/s, llama.cpp tok/s, ratio), the loads, the
agreement and the machine's load average. Nothing is asserted; ``--parse-only FILE`` re-reads saved tool
output (what tests/test_bench_llamacpp.py exercises, no build in CI).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
TARGETS = ("llama-bench", "llama-batched-bench", "llama-simple")
# qwen_ops precision -> (LLM arguments, llama.cpp GGUF type)
PRECISIONS = {
    "float32": ({"dtype": "float32"}, "f32"),
    "bfloat16": ({"dtype": "bfloat16"}, "bf16"),
    "int8": ({"dtype": "float32", "quantization": "int8_weight_only"}, "q8_0"),
    # The same INT8 weights with bfloat16 activations (q8_0 rounds its activations to 8 bits, both of ours keep more)
    "int8-bf16": ({"dtype": "bfloat16", "quantization": "int8_weight_only"}, "q8_0"),
}
DECODE = dict(prompt=128, new=64)
PREFILL = dict(prompt=512)
PARALLEL = dict(sequences=16, prompt=16, new=64)
GREEDY_TOKENS = 16
GREEDY_PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"


# ----------------------------------------------------------------------------- parsing (tested in CI)

def parse_llama_bench(text: str) -> dict[str, float]:
    """``llama-bench -o json`` -> {"pp<N>": tok/s, "tg<N>": tok/s, "pp<N>+tg<M>": tok/s} (each test's mean over
    its repetitions; a ``-pg`` test has both counts non-zero and its own key)."""
    rates = {}
    for entry in json.loads(text):
        n_prompt, n_gen = int(entry["n_prompt"]), int(entry["n_gen"])
        key = f"pp{n_prompt}" if n_gen == 0 else f"tg{n_gen}" if n_prompt == 0 else f"pp{n_prompt}+tg{n_gen}"
        rates[key] = float(entry["avg_ts"])
    return rates


def parse_batched_bench(text: str) -> list[dict[str, float]]:
    """The markdown table of ``llama-batched-bench`` -> one dict per row (PP, TG, B, N_KV, S_PP, S_TG, ...)."""
    rows, header = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            if "PP" in cells and "S_TG t/s" in cells:
                header = [c.replace(" t/s", "").replace(" s", "") for c in cells]
            continue
        if len(cells) != len(header):
            raise ValueError(f"llama-batched-bench row with {len(cells)} cells, header has {len(header)}: {line!r}")
        rows.append({name: float(value) for name, value in zip(header, cells)})
    if header is None:
        raise ValueError("no llama-batched-bench table (a header with PP and S_TG t/s) in the output")
    return rows


def simple_generated_text(stdout: str, prompt: str) -> str:
    """What ``llama-simple`` generated: its stdout after the echoed prompt."""
    at = stdout.find(prompt)
    if at < 0:
        raise ValueError("llama-simple's output does not echo the prompt")
    return stdout[at + len(prompt):]


def agreeing_tokens(pieces: list[str], text: str) -> int:
    """How many of qwen_ops' generated tokens (their text pieces, in order) llama.cpp's text starts with."""
    agreed, at = 0, 0
    for piece in pieces:
        if not text.startswith(piece, at):
            break
        agreed, at = agreed + 1, at + len(piece)
    return agreed


def report(rows: list[dict], loads: dict[str, tuple[float, float]], agreement: str, loadavg: str) -> str:
    """The markdown table and the summary lines. rows: {precision, workload, ours, theirs} (tok/s medians)."""
    lines = ["| precision | workload | qwen_ops tok/s | llama.cpp tok/s | qwen_ops / llama.cpp |", "|---|---|---|---|---|"]
    for r in rows:
        ratio = r["ours"] / r["theirs"] if r["theirs"] > 0 else float("nan")
        lines.append(f"| {r['precision']} | {r['workload']} | {r['ours']:.1f} | {r['theirs']:.1f} | {ratio:.2f}x |")
    for precision, (ours, theirs) in loads.items():
        lines.append(f"load {precision}: qwen_ops {ours:.1f} s, llama.cpp {theirs:.1f} s (median)")
    lines.append(f"greedy agreement: {agreement}")
    lines.append(f"load average during the run: {loadavg}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- llama.cpp: build, convert, run

def run(cmd, **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def build_llama_cpp(work: str, jobs: int) -> tuple[str, str]:
    """(bin dir, source dir) of llama.cpp built from the llama-cpp-python sdist, CPU only, native."""
    src_root = os.path.join(work, "sdist")
    build = os.path.join(work, "build")
    binaries = os.path.join(build, "bin")
    if not glob.glob(os.path.join(src_root, "*", "vendor", "llama.cpp")):
        os.makedirs(src_root, exist_ok=True)
        run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-d", src_root,
             LLAMA_CPP_PYTHON])
        for archive in glob.glob(os.path.join(src_root, "*.tar.gz")):
            with tarfile.open(archive) as tar:
                tar.extractall(src_root, filter="data")
    source = glob.glob(os.path.join(src_root, "*", "vendor", "llama.cpp"))[0]
    if not all(os.path.exists(os.path.join(binaries, t)) for t in TARGETS):
        run(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
             "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF", "-DLLAMA_CURL=OFF",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"])
        run(["cmake", "--build", build, "--config", "Release", "-j", str(jobs), "--target", *TARGETS])
    return binaries, source


def with_tokenizer(model_dir: str, work: str) -> str:
    """A copy of the checkpoint directory (links to its files) with the Qwen3.5 tokenizer files beside them."""
    from qwen_ops.model.loading.tokenizer import TOKENIZER_FILE, default_tokenizer_path

    target = os.path.join(work, "hf_model")
    os.makedirs(target, exist_ok=True)
    for path in glob.glob(os.path.join(model_dir, "*")):
        dst = os.path.join(target, os.path.basename(path))
        if not os.path.exists(dst):
            os.symlink(os.path.abspath(path), dst)
    # The model directory's own tokenizer when it has one (linked above), else the built-in one, which the
    # cache holds only once something has asked for it (a fresh machine has none yet).
    dst = os.path.join(target, TOKENIZER_FILE)
    if not os.path.exists(dst):
        shutil.copy(default_tokenizer_path(), dst)
    return target


def convert(source: str, hf_dir: str, work: str, outtype: str) -> str:
    out = os.path.join(work, f"model-{outtype}.gguf")
    if not os.path.exists(out):
        # --no-mtp: the converter otherwise expects an MTP head (mtp_num_hidden_layers) in a Qwen3.5 checkpoint;
        # the engines compared here run the target model only.
        run([sys.executable, os.path.join(source, "convert_hf_to_gguf.py"), hf_dir, "--outtype", outtype,
             "--outfile", out, "--no-mtp"])
    return out


def llama_rates(binaries: str, gguf: str, threads: int) -> dict[str, float]:
    """decode (tg), prefill (pp) and 16-sequence decode tok/s of one llama.cpp run each (one repetition)."""
    # tg: decode from an empty context; the -pg test decodes after the 128-token prompt (reported beside it).
    bench = run([os.path.join(binaries, "llama-bench"), "-m", gguf, "-t", str(threads), "-r", "1", "-o", "json",
                 "-p", str(PREFILL["prompt"]), "-n", str(DECODE["new"]), "-pg", f"{DECODE['prompt']},{DECODE['new']}"])
    rates = parse_llama_bench(bench.stdout)
    p = PARALLEL
    batched = run([os.path.join(binaries, "llama-batched-bench"), "-m", gguf, "-t", str(threads),
                   "-c", str(p["sequences"] * (p["prompt"] + p["new"]) + 64), "-b", "512", "-ub", "512",
                   "-npp", str(p["prompt"]), "-ntg", str(p["new"]), "-npl", str(p["sequences"])])
    row = parse_batched_bench(batched.stdout + batched.stderr)[-1]
    return {"decode": rates[f"tg{DECODE['new']}"], "prefill": rates[f"pp{PREFILL['prompt']}"], "parallel": row["S_TG"]}


def llama_load_seconds(binaries: str, gguf: str, threads: int) -> float:
    start = time.perf_counter()
    run([os.path.join(binaries, "llama-simple"), "-m", gguf, "-n", "1", "hi"], env={**os.environ,
                                                                                 "OMP_NUM_THREADS": str(threads)})
    return time.perf_counter() - start


def llama_greedy_text(binaries: str, gguf: str) -> str:
    out = run([os.path.join(binaries, "llama-simple"), "-m", gguf, "-n", str(GREEDY_TOKENS), GREEDY_PROMPT])
    return simple_generated_text(out.stdout, GREEDY_PROMPT)


# ----------------------------------------------------------------------------- qwen_ops

def qwen_engine(model_dir: str, precision: str):
    """The engine and its load time; then warmed up, as the llama.cpp tools warm up before they time."""
    from qwen_ops import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(model_dir, enable_prefix_caching=False, **PRECISIONS[precision][0])
    load = time.perf_counter() - start
    warm = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    llm.generate([[1] * DECODE["prompt"]], warm)
    llm.generate([[1] * PARALLEL["prompt"]] * PARALLEL["sequences"], warm)
    return llm, load


def qwen_rates(llm) -> dict[str, float]:
    """The same three workloads on the engine: decode tok/s from the time of N+1 tokens less that of 1."""
    import torch

    from qwen_ops import SamplingParams

    gen = torch.Generator().manual_seed(0)

    def prompts(n, length):
        return [torch.randint(1, 100000, (length,), generator=gen).tolist() for _ in range(n)]

    def timed(batch, new):
        start = time.perf_counter()
        llm.generate(batch, SamplingParams(max_tokens=new, temperature=0, ignore_eos=True))
        return time.perf_counter() - start

    one = prompts(1, DECODE["prompt"])
    decode = DECODE["new"] / max(timed(one, DECODE["new"] + 1) - timed(one, 1), 1e-9)
    prefill = PREFILL["prompt"] / timed(prompts(1, PREFILL["prompt"]), 1)
    p = PARALLEL
    many = prompts(p["sequences"], p["prompt"])
    parallel = p["sequences"] * p["new"] / max(timed(many, p["new"] + 1) - timed(many, 1), 1e-9)
    return {"decode": decode, "prefill": prefill, "parallel": parallel}


def qwen_greedy_pieces(llm) -> list[str]:
    from qwen_ops import SamplingParams

    out = llm.generate([GREEDY_PROMPT], SamplingParams(max_tokens=GREEDY_TOKENS, temperature=0, ignore_eos=True))
    return [llm.tokenizer.decode([t]) for t in out[0].outputs[0].token_ids]


# ----------------------------------------------------------------------------- main

WORKLOAD_NAMES = {"decode": f"decode, batch 1 ({DECODE['prompt']}-token prompt, {DECODE['new']} new)",
                  "prefill": f"prefill, one {PREFILL['prompt']}-token prompt",
                  "parallel": f"{PARALLEL['sequences']} parallel sequences ({PARALLEL['prompt']}-token prompts, "
                              f"{PARALLEL['new']} new, summed)"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", required=False, help="folder for the sdist, the build and the GGUF files")
    p.add_argument("--model", default=None, help="checkpoint directory (default: the built-in tiny model)")
    p.add_argument("--make-0p8b", action="store_true", help="write and use a Qwen3.5-0.8B-shaped random checkpoint")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--parse-only", default=None, help="a JSON file of saved tool outputs: print the report only")
    args = p.parse_args(argv)
    if args.parse_only:
        with open(args.parse_only, encoding="utf-8") as f:
            saved = json.load(f)
        rows = []
        for precision, outputs in saved["llama"].items():
            bench = parse_llama_bench(outputs["llama_bench"])
            parallel = parse_batched_bench(outputs["batched_bench"])[-1]["S_TG"]
            theirs = {"decode": bench[f"tg{DECODE['new']}"], "prefill": bench[f"pp{PREFILL['prompt']}"],
                      "parallel": parallel}
            rows += [{"precision": precision, "workload": WORKLOAD_NAMES[w], "ours": saved["qwen_ops"][precision][w],
                      "theirs": theirs[w]} for w in WORKLOAD_NAMES]
        pieces = saved["greedy"]["qwen_ops_pieces"]
        agreed = agreeing_tokens(pieces, simple_generated_text(saved["greedy"]["llama_simple"], GREEDY_PROMPT))
        print(report(rows, {k: tuple(v) for k, v in saved["loads"].items()}, f"{agreed}/{len(pieces)} tokens",
                     saved["loadavg"]))
        return 0
    if not args.work:
        p.error("--work is required (unless --parse-only)")
    import torch

    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    model_dir = args.model
    if args.make_0p8b:
        from bench_vs_transformers import make_0p8b_checkpoint

        model_dir = os.path.join(args.work, "q0p8b")
        if not os.path.exists(os.path.join(model_dir, "config.json")):  # written once: the GGUFs are made from it
            make_0p8b_checkpoint(model_dir)
    if model_dir is None:
        from qwen_ops.model.loading.default_model import default_model_dir

        model_dir = default_model_dir()
    binaries, source = build_llama_cpp(args.work, args.threads)
    hf_dir = with_tokenizer(model_dir, args.work)
    precisions = args.precisions.split(",")
    ggufs = {precision: convert(source, hf_dir, args.work, PRECISIONS[precision][1]) for precision in precisions}

    rows, loads, agreement = [], {}, "not checked (float32 not among --precisions)"
    for precision in precisions:
        llm, load = qwen_engine(model_dir, precision)
        if precision == "float32":
            pieces = qwen_greedy_pieces(llm)
            agreed = agreeing_tokens(pieces, llama_greedy_text(binaries, ggufs[precision]))
            agreement = f"{agreed}/{len(pieces)} tokens (qwen_ops float32 vs llama.cpp f32, as text)"
        ours, theirs = [], []
        for _ in range(args.repeats):  # alternating: one round of each engine, then again
            ours.append(qwen_rates(llm))
            theirs.append(llama_rates(binaries, ggufs[precision], args.threads))
        loads[precision] = (load, llama_load_seconds(binaries, ggufs[precision], args.threads))
        for w in WORKLOAD_NAMES:
            rows.append({"precision": f"{precision} / {PRECISIONS[precision][1]}", "workload": WORKLOAD_NAMES[w],
                         "ours": statistics.median(r[w] for r in ours),
                         "theirs": statistics.median(r[w] for r in theirs)})
        del llm
    loadavg = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(report(rows, loads, agreement, loadavg))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
