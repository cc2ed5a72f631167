"""The block size of a hybrid model's one page pool: vLLM 0.33's rule for attention and GDN pages of equal size."""


def hybrid_block_size(block_size: int, attention_bytes_per_token: int, gdn_page_bytes: int,
                      kernel_block_alignment: int = 1) -> tuple[int, int]:
    """Return (block_size, page_bytes) for a pool whose pages serve both attention and GDN layers.

    vLLM's Platform._align_hybrid_block_size: one page is one layer's share of a
    block. The attention block size is raised, in steps of
    max(kernel_block_alignment, block_size) tokens, until an attention page
    (block_size * attention_bytes_per_token) is at least a GDN page (one layer's
    conv plus recurrent state); the GDN page is then padded to equal it.

    block_size: the requested attention block size (tokens).
    attention_bytes_per_token: one token's K and V in one attention layer, in bytes
        (2 * num_kv_heads * head_dim * element size; an INT8 cache halves it).
    gdn_page_bytes: one request's conv and recurrent state in one GDN layer, in bytes.
    kernel_block_alignment: the attention kernel's smallest block size (the result
        stays a multiple of it and of block_size).
    """
    for name, value in (("block_size", block_size), ("attention_bytes_per_token", attention_bytes_per_token),
                        ("gdn_page_bytes", gdn_page_bytes), ("kernel_block_alignment", kernel_block_alignment)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"hybrid_block_size: {name} must be an int >= 1, got {value!r}")
    step = max(kernel_block_alignment, block_size)
    needed = step * -(-gdn_page_bytes // (step * attention_bytes_per_token))
    block_size = max(block_size, needed)
    return block_size, block_size * attention_bytes_per_token
