"""Reading a checkpoint: its config, weights, tokenizer and INT8 KV scales; the built-in tiny model.

    config.py         Qwen35Config from config.json
    weights.py        load_weights from safetensors, with clear errors
    tokenizer.py      TextTokenizer
    default_model.py  the built-in tiny random model (default_config.json)
    kv_scales.py      INT8 KV-cache scales: the checkpoint's, or calibrated
"""
