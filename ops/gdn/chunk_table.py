"""The chunk table of ``chunk_gated_delta_rule``: which tokens each chunk of 64 covers.

Derived from the sequence offsets alone, so an engine builds it once per step
from the CPU copy of ``cu_seqlens`` and passes it to every GDN layer (as fla's
``chunk_indices``); the op builds it itself when none is given, which on a
device reads the chunk count back to the host once per call.
"""
from __future__ import annotations

import torch

CHUNK = 64  # tokens per chunk, as in the torch chunked reference


def prepare_chunk_indices(cu_seqlens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunks of ``CHUNK`` tokens of every sequence, on ``cu_seqlens``' device.

    Args:
        cu_seqlens: [N+1] int32/int64 offsets, 0 first and non-decreasing.
    Returns:
        ``(chunk_indices, chunk_offsets)``: chunk_indices int32 [C, 2], the
        first token and the end token (exclusive) of each of the C chunks,
        sequence by sequence; chunk_offsets int32 [N+1], sequence r's chunks
        are rows ``chunk_offsets[r]:chunk_offsets[r+1]``. Reads C on the host
        (it sizes the table).
    """
    cu = cu_seqlens.to(torch.int64)
    lens = cu[1:] - cu[:-1]
    per_seq = (lens + CHUNK - 1) // CHUNK
    chunk_offsets = torch.zeros(cu.shape[0], dtype=torch.int64, device=cu.device)
    chunk_offsets[1:] = torch.cumsum(per_seq, 0)
    n_chunks = int(chunk_offsets[-1])
    seq_of = torch.repeat_interleave(torch.arange(lens.shape[0], device=cu.device), per_seq, output_size=n_chunks)
    index_in_seq = torch.arange(n_chunks, device=cu.device) - chunk_offsets[seq_of]
    first = cu[seq_of] + CHUNK * index_in_seq
    end = torch.minimum(first + CHUNK, cu[seq_of + 1])
    chunk_indices = torch.stack([first, end], dim=1).to(torch.int32).contiguous()
    return chunk_indices, chunk_offsets.to(torch.int32)
