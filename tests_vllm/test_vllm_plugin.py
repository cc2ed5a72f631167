"""vLLM 0.33.0 with the qwen_ops plug-in against transformers on tiny random Qwen3.5 checkpoints.

Run in the vLLM environment that .ci/run builds (vLLM 0.33.0 + qwen_ops[vllm]); each vLLM job
runs in its own process (tests_vllm/vllm_job.py). Greedy tokens must equal transformers' float32
ones; the plug-in's call counters must show its ops ran for every GDN and attention layer.
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch
from checkpoints import hf_greedy, hf_model
from tolerances import MODEL_INT8_KV_VS_TRANSFORMERS

HERE = os.path.dirname(os.path.abspath(__file__))
JOB_TIMEOUT_S = 600

# One long prompt that a 16-token budget splits into chunks (the later ones start from the saved
# GDN state), behind a short one that is decoding meanwhile (steps with decodes and prefill chunks).
PROMPTS = [[9, 8, 7],
           [5, 17, 3, 99, 42, 7, 8, 200, 11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
            20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 250, 33, 34, 35, 36, 37],
           [77, 66, 55, 44, 33]]
BATCHING = dict(max_model_len=256, max_num_batched_tokens=16, max_num_seqs=4)
# The tiny checkpoints: layers 0-2 GDN, layer 3 full attention. vLLM's layer names carry the
# layout's prefix ("model.layers.0.linear_attn", "language_model.model.layers.0.linear_attn").
GDN_LAYER_IDS, ATTN_LAYER_IDS = [0, 1, 2], [3]
# The multimodal layout (weights under model.language_model., a vision tower) runs text prompts:
# vLLM's Qwen3-VL input processor needs a tokenizer and an image processor config, which the tiny
# checkpoint does not have, so vLLM loads its language model only.
MULTIMODAL_TEXT_ONLY = dict(language_model_only=True)


def run_job(job: dict, env: dict | None = None) -> dict:
    proc = subprocess.run([sys.executable, os.path.join(HERE, "vllm_job.py"), json.dumps(job)], cwd=HERE,
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env={**os.environ, **(env or {})})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"vLLM job failed (rc {proc.returncode}):\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def hf_reference(checkpoint, prompts, max_tokens):
    model = hf_model(checkpoint)
    return [hf_greedy(model, p, max_tokens)[0] for p in prompts]


def layers_of(counters, suffix):
    """{layer index: vLLM layer name} of the counted layers whose name ends in ``suffix``."""
    return {int(name.split("layers.")[1].split(".")[0]): name for name in counters if name.endswith(suffix)}


def assert_plugin_ran_everywhere(counters, kv_dtype="float32"):
    """Every GDN and attention layer ran the plug-in's ops; returns (GDN layer names, attention layer names)."""
    gdn, attn = layers_of(counters, ".linear_attn"), layers_of(counters, ".self_attn.attn")
    assert sorted(gdn) == GDN_LAYER_IDS and sorted(attn) == ATTN_LAYER_IDS, sorted(counters)
    assert len(counters) == len(gdn) + len(attn), sorted(counters)
    for layer in gdn.values():
        ops = counters.get(layer, {})
        for op in ("fused_gdn_gating", "causal_conv1d_fn", "chunk_gated_delta_rule", "causal_conv1d_update",
                   "fused_recurrent_gated_delta_rule", "step with decodes and prefill chunks",
                   "prefill chunk from a saved state"):
            assert ops.get(op, 0) > 0, f"{layer}: {op} never ran ({ops})"
    for layer in attn.values():
        ops = counters.get(layer, {})
        assert ops.get("mixed_attention", 0) > 0, ops
        assert ops.get(f"reshape_and_cache {kv_dtype}", 0) > 0, ops
    return list(gdn.values()), list(attn.values())


@pytest.mark.parametrize("layout", ["text", "multimodal"])
def test_greedy_tokens_equal_transformers(layout, text_checkpoint, multimodal_checkpoint):
    checkpoint = text_checkpoint if layout == "text" else multimodal_checkpoint
    extra = {} if layout == "text" else MULTIMODAL_TEXT_ONLY
    result = run_job(dict(model=checkpoint, llm=dict(dtype="float32", **extra, **BATCHING), prompts=PROMPTS,
                          max_tokens=8))
    assert [o["token_ids"] for o in result["outputs"]] == hf_reference(checkpoint, PROMPTS, 8)
    gdn, attn = assert_plugin_ran_everywhere(result["counters"])
    # Every step ran every layer once: the GDN gating count is the number of model steps.
    steps = result["counters"][gdn[0]]["fused_gdn_gating"]
    assert all(result["counters"][layer]["fused_gdn_gating"] == steps for layer in gdn)
    assert result["counters"][attn[0]]["mixed_attention"] == steps


def test_int8_kv_cache_within_int8_tolerance(multimodal_checkpoint):
    """kv_cache_dtype='int8': the project's per-channel INT8 cache; logprobs within the project's INT8 tolerance."""
    result = run_job(dict(model=multimodal_checkpoint, llm=dict(dtype="float32", kv_cache_dtype="int8",
                                                                     **MULTIMODAL_TEXT_ONLY, **BATCHING),
                          prompts=PROMPTS, max_tokens=8, logprobs=0))
    assert_plugin_ran_everywhere(result["counters"], kv_dtype="int8")
    model = hf_model(multimodal_checkpoint)
    atol, _ = MODEL_INT8_KV_VS_TRANSFORMERS[torch.float32]
    worst = 0.0
    for prompt, out in zip(PROMPTS, result["outputs"]):
        ids = prompt + out["token_ids"]
        with torch.no_grad():
            ref = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
        for i, (token, entry) in enumerate(zip(out["token_ids"], out["logprobs"])):
            worst = max(worst, abs(entry[str(token)] - ref[len(prompt) - 1 + i, token].item()))
    assert worst <= atol, f"INT8 KV logprobs differ from transformers' float32 ones by {worst} > {atol}"


def test_tensor_parallel_2_on_cpu_with_replicated_kv_head(one_kv_head_checkpoint, tmp_path):
    """tensor_parallel_size=2 (gloo): each rank runs half the heads; the single KV head is replicated."""
    counters_prefix = str(tmp_path / "counters")
    result = run_job(dict(model=one_kv_head_checkpoint, llm=dict(dtype="float32", tensor_parallel_size=2, **BATCHING),
                          prompts=PROMPTS, max_tokens=6), env={"QWEN_OPS_VLLM_COUNTERS": counters_prefix})
    assert [o["token_ids"] for o in result["outputs"]] == hf_reference(one_kv_head_checkpoint, PROMPTS, 6)
    ranks = [json.load(open(tmp_path / f)) for f in sorted(os.listdir(tmp_path)) if f.startswith("counters")]
    assert len(ranks) == 2, ranks
    for counters in ranks:
        gdn, attn = assert_plugin_ran_everywhere(counters)
        # 4 query heads, 1 KV head; GDN 2 key heads, 4 value heads -> per rank 2/1 and 1/2.
        assert counters[attn[0]].get("heads q=2 kv=1", 0) > 0, counters[attn[0]]
        assert all(counters[layer].get("heads k=1 v=2", 0) > 0 for layer in gdn)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_vllm_serve_answers_a_completion(text_checkpoint, tmp_path):
    """`vllm serve` with the plug-in on 127.0.0.1 answers one OpenAI completion request, then is stopped."""
    port = _free_port()
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "QWEN_OPS_VLLM_COUNTERS": str(tmp_path / "counters")}
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", text_checkpoint, "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--enforce-eager", "--skip-tokenizer-init",
           "--kv-cache-memory-bytes", str(64 << 20), "--max-model-len", "256", "--max-num-seqs", "2",
           "--compilation-config", '{"custom_ops": ["none"]}', "--no-enable-prefix-caching"]
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + JOB_TIMEOUT_S
        while True:
            assert server.poll() is None, open(tmp_path / "serve.log").read()[-6000:]
            assert time.time() < deadline, "vllm serve did not become healthy in time"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(2)
        body = json.dumps({"model": text_checkpoint, "prompt": PROMPTS[0], "max_tokens": 5, "temperature": 0,
                           "ignore_eos": True, "return_token_ids": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            answer = json.load(r)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        log.close()
    choice = answer["choices"][0]
    assert answer["usage"]["completion_tokens"] == 5 and choice["finish_reason"] == "length", answer
    if choice.get("token_ids") is not None:
        assert choice["token_ids"] == hf_reference(text_checkpoint, PROMPTS[:1], 5)[0]
    seen = {}
    for f in os.listdir(tmp_path):
        if f.startswith("counters"):
            for layer, ops in json.load(open(tmp_path / f)).items():
                for op, n in ops.items():
                    seen.setdefault(layer, {}).setdefault(op, 0)
                    seen[layer][op] += n
    gdn, attn = layers_of(seen, ".linear_attn"), layers_of(seen, ".self_attn.attn")
    assert sorted(gdn) == GDN_LAYER_IDS and sorted(attn) == ATTN_LAYER_IDS, seen
    assert all(seen[name].get("chunk_gated_delta_rule", 0) > 0 for name in gdn.values()), seen
    assert all(seen[name].get("mixed_attention", 0) > 0 for name in attn.values()), seen


def test_env_switch_turns_the_plugin_off():
    """QWEN_OPS_VLLM_PLUGIN=0: vLLM's own GDN layer and CPU attention backend stay in place."""
    probe = ("from vllm.plugins import load_general_plugins; load_general_plugins()\n"
             "from vllm.model_executor.custom_op import op_registry_oot\n"
             "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E\n"
             "print('OOT', sorted(op_registry_oot)); print('CPU_ATTN', E.CPU_ATTN.get_path())\n")
    outs = {}
    for value in ("0", "1"):
        proc = subprocess.run([sys.executable, "-c", probe], cwd=HERE, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "QWEN_OPS_VLLM_PLUGIN": value})
        assert proc.returncode == 0, proc.stderr[-4000:]
        outs[value] = proc.stdout
    assert "QwenGatedDeltaNetAttention" not in outs["0"] and "qwen_ops" not in outs["0"], outs["0"]
    assert "QwenGatedDeltaNetAttention" in outs["1"] and "qwen_ops.vllm_plugin" in outs["1"], outs["1"]


def test_other_vllm_versions_are_refused():
    from qwen_ops.vllm_plugin.version import SUPPORTED_VLLM_VERSION, UnsupportedVLLMVersion, check_vllm_version

    check_vllm_version(SUPPORTED_VLLM_VERSION)
    check_vllm_version(SUPPORTED_VLLM_VERSION + "+cpu")
    for other in ("0.32.0", "0.33.1", "0.34.0rc1"):
        with pytest.raises(UnsupportedVLLMVersion, match=f"supports vLLM {SUPPORTED_VLLM_VERSION} only, found "
                                                            f"vLLM {other}"):
            check_vllm_version(other)
