"""The Qwen3.5 network: its layers over one flat mixed batch of decode rows and prefill chunks.

    qwen3_5.py          Qwen35ForCausalLM: embeddings, the hybrid decoder layers, norm, lm_head
    attention.py        the gated full-attention layer
    gdn.py              the Gated DeltaNet (linear attention) layer
    moe.py, dense_mlp.py  the sparse MoE block and the dense MLP
    mtp.py              the multi-token-prediction head (the drafter's network) and its weights
    layers.py           building blocks: linear, norms, RoPE, SwiGLU
    greedy_head.py      the greedy tokens from the hidden states, the lm_head a slice at a time
    step_inputs.py      StepInputs: what one forward pass reads
    kv_cache_groups.py  which KV cache group each GDN layer reads
    backends.py         which ops backend each op of a layer runs on
"""
