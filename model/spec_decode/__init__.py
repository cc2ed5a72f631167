"""Speculative decoding with Qwen3.5's MTP head.

    speculative_config.py  speculative_config (vLLM's spelling) checked
    drafter.py             SpeculativeDecoder: the model runner's state rows, verification and drafting
    stats.py               SpecDecodingStats: acceptance counts
"""
