"""Padding a step to a captured graph's shape, exactly: padded rows are requests that touch no real state.

A compiled graph (``graph_runner.py``) is traced for fixed shapes, so every step is padded up to one of a
small set of capture sizes (vLLM's ``cudagraph_capture_sizes``): the decode rows to a capture size, the
prefill part to a capture size of sequences and one of tokens, and the block tables to the persistent
batch's full width. Padding is made of whole fake requests, never of extra tokens on a real one, so that
no real row's attention or GDN recurrence sees them:

* a padding decode row: one token 0 at position 0, context 0, seq_len 1, a block table of the null block;
* padding prefill sequences (at least one whenever there are prefill rows; the first ones one token each,
  the last one the rest): context 0, no initial state, a null block table;
* every padding token has slot -1 (``reshape_and_cache`` writes nothing) and every padding request GDN
  state row -1 (the conv and delta-rule ops skip the sequence: no read, no write), speculative rows included.

A padding row may read the null block 0's contents; what it computes is never used: the runner keeps only
the real rows' hidden states (``real_rows``), and every op is row-wise or per-sequence, so a real row's
output does not depend on a padding row.
"""
from __future__ import annotations

import bisect
import dataclasses

import torch

from ...scheduling import StepMetadata


def capture_sizes(maximum: int) -> list[int]:
    """1, 2, 4, 8, then every 8 up to 32, every 16 up to 128, every 64 beyond, and ``maximum`` itself
    (vLLM's ``cudagraph_capture_sizes`` shape: dense where decode batches usually are, sparse beyond)."""
    if isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 1:
        raise ValueError(f"capture size maximum must be an int >= 1, got {maximum!r}")
    sizes, s = [], 1
    while s <= maximum:
        sizes.append(s)
        s = s * 2 if s < 8 else s + (8 if s < 32 else 16 if s < 128 else 64)
    if sizes[-1] != maximum:
        sizes.append(maximum)
    return sizes


def round_up(sizes: list[int], n: int) -> int | None:
    """The smallest capture size >= n (0 for 0), or None when n exceeds the largest."""
    if n == 0:
        return 0
    i = bisect.bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


@dataclasses.dataclass
class PaddedStep:
    """A step padded to a graph's shape.

    meta: the padded ``StepMetadata`` (CPU); gdn_rows: the padded per-group state rows (or None);
    real_rows: [T] int64, the padded row of each real token, in the real step's order.
    """

    meta: StepMetadata
    gdn_rows: tuple[torch.Tensor, torch.Tensor | None] | None
    real_rows: torch.Tensor


def pad_step(meta: StepMetadata, gdn_rows, sizes: list[int], block_table_width: int) -> PaddedStep | None:
    """``meta`` (validated, on the CPU) padded to the capture sizes ``sizes``; None when a part of it is larger
    than the largest size (the caller runs it eager). gdn_rows: ``(state_rows [G, N], spec_rows [G, D, 1+k]
    or None)`` or None."""
    nd, ndt = meta.num_decodes, meta.num_decode_tokens
    npf, nptok = meta.num_prefills, meta.num_actual_tokens - ndt
    nd_pad = round_up(sizes, nd)
    np_pad, ptok_pad = _prefill_sizes(sizes, npf, nptok)
    if nd_pad is None or np_pad is None or block_table_width < meta.block_tables.shape[1]:
        return None
    extra_decodes, extra_seqs = nd_pad - nd, np_pad - npf
    pad_seq_lens = [1] * extra_seqs
    if extra_seqs:
        pad_seq_lens[-1] += ptok_pad - nptok - extra_seqs
    pad_decode_tokens = extra_decodes
    decode_end = ndt + pad_decode_tokens  # first prefill row of the padded step
    total = decode_end + ptok_pad

    def tokens(t: torch.Tensor, fill: int) -> torch.Tensor:
        out = t.new_full((total,), fill)
        out[:ndt] = t[:ndt]
        out[decode_end:decode_end + nptok] = t[ndt:meta.num_actual_tokens]
        return out

    def rows(t: torch.Tensor, fill) -> torch.Tensor:  # per request, along dim 0
        shape = (nd_pad + np_pad,) + tuple(t.shape[1:])
        out = t.new_full(shape, fill)
        out[:nd] = t[:nd]
        out[nd_pad:nd_pad + npf] = t[nd:]
        return out

    qlens = (meta.query_start_loc[1:] - meta.query_start_loc[:-1]).to(torch.int32)
    qlens_pad = rows(qlens, 1)
    if extra_seqs:
        qlens_pad[nd_pad + npf:] = torch.tensor(pad_seq_lens, dtype=torch.int32)
    qsl = torch.zeros(nd_pad + np_pad + 1, dtype=torch.int32)
    torch.cumsum(qlens_pad, 0, out=qsl[1:])
    context = rows(meta.context_lens, 0)
    tables = meta.block_tables.new_zeros((nd_pad + np_pad, block_table_width))
    tables[:nd, :meta.block_tables.shape[1]] = meta.block_tables[:nd]
    tables[nd_pad:nd_pad + npf, :meta.block_tables.shape[1]] = meta.block_tables[nd:]
    request_index = torch.repeat_interleave(torch.arange(nd_pad + np_pad, dtype=torch.int32), qlens_pad)
    spec = meta.spec_state_indices
    padded = dataclasses.replace(
        meta,
        req_ids=list(meta.req_ids),
        query_start_loc=qsl, seq_lens=context + qlens_pad, context_lens=context, block_tables=tables,
        slot_mapping=tokens(meta.slot_mapping, -1), positions=tokens(meta.positions, 0),
        token_request_indices=request_index, input_ids=tokens(meta.input_ids, 0),
        num_decodes=nd_pad, num_decode_tokens=decode_end, num_prefills=np_pad,
        num_prefill_tokens=ptok_pad, num_actual_tokens=total,
        state_indices=rows(meta.state_indices, -1) if meta.state_indices.numel() else meta.state_indices,
        has_initial_state=rows(meta.has_initial_state, False),
        spec_state_indices=None if spec is None else _pad_rows(spec, nd_pad, -1),
        num_accepted_tokens=None if spec is None else _pad_rows(meta.num_accepted_tokens, nd_pad, 1))
    padded_gdn = None
    if gdn_rows is not None:
        state_rows, spec_rows = gdn_rows
        g = state_rows.shape[0]
        padded_state = state_rows.new_full((g, nd_pad + np_pad), -1)
        padded_state[:, :nd] = state_rows[:, :nd]
        padded_state[:, nd_pad:nd_pad + npf] = state_rows[:, nd:]
        padded_spec = None
        if spec_rows is not None:
            padded_spec = spec_rows.new_full((g, nd_pad) + tuple(spec_rows.shape[2:]), -1)
            padded_spec[:, :nd] = spec_rows
        padded_gdn = (padded_state, padded_spec)
    real_rows = torch.cat([torch.arange(ndt), torch.arange(decode_end, decode_end + nptok)])
    return PaddedStep(padded, padded_gdn, real_rows)


def _prefill_sizes(sizes: list[int], npf: int, nptok: int) -> tuple[int | None, int | None]:
    """(sequences, tokens) of the padded prefill part: both capture sizes, every padding sequence holding at
    least one token (so one more sequence when only the tokens need padding); (None, None) if none fits."""
    np_pad, ptok_pad = round_up(sizes, npf), round_up(sizes, nptok)
    while np_pad is not None and ptok_pad is not None:
        if np_pad == npf and ptok_pad > nptok:  # leftover tokens need a padding sequence to hold them
            np_pad = round_up(sizes, npf + 1)
            continue
        needed = round_up(sizes, nptok + np_pad - npf)
        if needed == ptok_pad:
            return np_pad, ptok_pad
        ptok_pad = needed
    return None, None


def _pad_rows(t: torch.Tensor, n: int, fill: int) -> torch.Tensor:
    out = t.new_full((n,) + tuple(t.shape[1:]), fill)
    out[:t.shape[0]] = t
    return out
