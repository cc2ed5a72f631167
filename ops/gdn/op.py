"""Public GDN ops: argument checks, backend dispatch, torch.library entries.

Shapes: q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv]; Hv % Hk == 0
and value head h reads key head h // (Hv / Hk). With ``cu_seqlens`` [N+1],
B == 1 and the N sequences are packed along T; otherwise N == B. States are
float32 [N, Hv, Dk, Dv]; with ``ssm_state_indices`` [N] the initial state is a
pool [S, Hv, Dk, Dv] updated in place. ``fused_recurrent_gated_delta_rule``
also has a speculative-decoding form (``num_accepted_tokens`` with 2-D
``ssm_state_indices`` [N, 1 + k]: one pool row per token of the step).
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import _validate as check
from .._backend import dispatch
from .._library import custom_op, resolved_scale
from .chunk_table import CHUNK as CHUNK_SIZE, prepare_chunk_indices

F32 = (torch.float32,)


def _check_delta_rule(op, q, k, v, g, beta, initial_state, output_final_state, cu_seqlens, ssm_state_indices,
                      has_initial_state, chunk_indices=None, chunk_offsets=None, *, values,
                      num_accepted_tokens=None, checkpoint_boundaries=None):
    check.tensor(op, "q", q, dtypes=check.FLOAT_DTYPES, ndim=4, layout="[B, T, Hk, Dk]")
    b, t, hk, dk = q.shape
    check.nonempty_dim(op, "q", q, 3, "key head dim Dk")  # the default scale is Dk ** -0.5
    check.tensor(op, "k", k, dtypes=check.FLOAT_DTYPES, shape=(b, t, hk, dk), layout=f"[B, T, Hk, Dk] = {list(q.shape)}")
    check.tensor(op, "v", v, dtypes=check.FLOAT_DTYPES, ndim=4, layout="[B, T, Hv, Dv]")
    check.tensor(op, "v", v, shape=(b, t, None, None), layout=f"[B, T, Hv, Dv] with B = {b}, T = {t}")
    hv, dv = v.shape[2], v.shape[3]
    check.same_dtype(op, q=q, k=k, v=v)
    check.gqa(op, hv, hk, q_name="v", kv_name="q")
    check.tensor(op, "g", g, dtypes=F32, shape=(b, t, hv), layout=f"[B, T, Hv] = [{b}, {t}, {hv}] float32")
    check.tensor(op, "beta", beta, dtypes=check.FLOAT_DTYPES, shape=(b, t, hv), layout=f"[B, T, Hv] = [{b}, {t}, {hv}]")
    n = b
    if cu_seqlens is not None:
        check.tensor(op, "cu_seqlens", cu_seqlens, dtypes=check.INDEX_DTYPES, ndim=1, layout="[N+1]")
        if b != 1:
            raise ValueError(f"{op}: with 'cu_seqlens' the batch size B of 'q' must be 1, got {b}")
        n = cu_seqlens.shape[0] - 1
        check.cumulative(op, "cu_seqlens", cu_seqlens, t, values=values)
    spec_decode = num_accepted_tokens is not None or (isinstance(ssm_state_indices, torch.Tensor)
                                                      and ssm_state_indices.dim() == 2)
    if spec_decode:
        _check_spec_decode(op, t, n, cu_seqlens, ssm_state_indices, num_accepted_tokens)
    elif ssm_state_indices is not None:
        check.tensor(op, "ssm_state_indices", ssm_state_indices, dtypes=check.INDEX_DTYPES, shape=(n,),
                     layout=f"[N] = [{n}]")
    if ssm_state_indices is not None:
        if initial_state is None:
            raise ValueError(f"{op}: 'ssm_state_indices' needs 'initial_state', the state pool [S, Hv, Dk, Dv]")
        check.tensor(op, "initial_state", initial_state, dtypes=F32, shape=(None, hv, dk, dv),
                     layout=f"[S, Hv, Dk, Dv] = [S, {hv}, {dk}, {dv}] float32 (a state pool)")
        check.indices(op, "ssm_state_indices", ssm_state_indices, initial_state.shape[0], allow_padding=True,
                      values=values)
        if spec_decode:
            _check_spec_decode_rows(op, t, cu_seqlens, ssm_state_indices, num_accepted_tokens, values=values)
    elif initial_state is not None:
        check.tensor(op, "initial_state", initial_state, dtypes=F32, shape=(n, hv, dk, dv),
                     layout=f"[N, Hv, Dk, Dv] = [{n}, {hv}, {dk}, {dv}] float32")
    if has_initial_state is not None:
        check.tensor(op, "has_initial_state", has_initial_state, dtypes=(torch.bool,), shape=(n,),
                     layout=f"[N] = [{n}] bool")
        if initial_state is None:
            raise ValueError(f"{op}: 'has_initial_state' was given without 'initial_state'")
    if initial_state is not None and not initial_state.is_contiguous():
        raise ValueError(f"{op}: argument 'initial_state' must be contiguous")
    check.same_device(op, q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, cu_seqlens=cu_seqlens,
                      ssm_state_indices=ssm_state_indices, has_initial_state=has_initial_state,
                      num_accepted_tokens=num_accepted_tokens)
    _check_chunk_table(op, q, cu_seqlens, n, t, chunk_indices, chunk_offsets, values=values)
    _check_checkpoint_boundaries(op, q, cu_seqlens, n, t, checkpoint_boundaries, values=values)
    return n, hv, dk, dv


def _check_checkpoint_boundaries(op, q, cu_seqlens, n, t, boundaries, *, values):
    """``checkpoint_boundaries`` [P, 2]: rows (sequence r, j) with 0 <= r < N and 1 <= j, 64 * j <= len_r."""
    if boundaries is None:
        return
    if op != "chunk_gated_delta_rule":
        raise ValueError(f"{op}: 'checkpoint_boundaries' is an argument of chunk_gated_delta_rule only")
    check.tensor(op, "checkpoint_boundaries", boundaries, dtypes=check.INDEX_DTYPES, shape=(None, 2),
                 layout="[P, 2] (sequence, chunk boundary j)")
    check.same_device(op, q=q, checkpoint_boundaries=boundaries)
    if not values or boundaries.shape[0] == 0:
        return
    rows = boundaries.to(torch.int64)
    seq, j = rows[:, 0], rows[:, 1]
    if int(seq.min()) < 0 or int(seq.max()) >= n:
        raise ValueError(f"{op}: argument 'checkpoint_boundaries' names sequences outside [0, {n}), got "
                         f"{seq.tolist()}")
    lengths = ((cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int64) if cu_seqlens is not None else
               torch.full((n,), t, dtype=torch.int64, device=rows.device))
    if torch.unique(rows, dim=0).shape[0] != rows.shape[0]:
        raise ValueError(f"{op}: argument 'checkpoint_boundaries' repeats a (sequence, j) row: {rows.tolist()}")
    if int(j.min()) < 1 or bool((j * CHUNK_SIZE > lengths[seq]).any()):
        raise ValueError(f"{op}: argument 'checkpoint_boundaries' must hold chunk boundaries j >= 1 with "
                         f"{CHUNK_SIZE} * j <= the sequence's length, got {rows.tolist()} for lengths "
                         f"{lengths.tolist()}")


def _check_chunk_table(op, q, cu_seqlens, n, t, chunk_indices, chunk_offsets, *, values):
    """A given chunk table must be the one ``prepare_chunk_indices`` builds from the sequence offsets."""
    if chunk_indices is None and chunk_offsets is None:
        return
    if op != "chunk_gated_delta_rule":
        raise ValueError(f"{op}: 'chunk_indices'/'chunk_offsets' are arguments of chunk_gated_delta_rule only")
    if chunk_indices is None or chunk_offsets is None:
        raise ValueError(f"{op}: 'chunk_indices' and 'chunk_offsets' go together (prepare_chunk_indices gives both)")
    check.tensor(op, "chunk_indices", chunk_indices, dtypes=(torch.int32,), shape=(None, 2), layout="[C, 2] int32")
    check.tensor(op, "chunk_offsets", chunk_offsets, dtypes=(torch.int32,), shape=(n + 1,),
                 layout=f"[N+1] = [{n + 1}] int32")
    check.same_device(op, q=q, chunk_indices=chunk_indices, chunk_offsets=chunk_offsets)
    if not values:
        return
    b = q.shape[0]
    cu = cu_seqlens if cu_seqlens is not None else torch.arange(b + 1, device=q.device) * t
    want_indices, want_offsets = prepare_chunk_indices(cu)
    if not (torch.equal(chunk_indices, want_indices) and torch.equal(chunk_offsets, want_offsets)):
        raise ValueError(f"{op}: 'chunk_indices'/'chunk_offsets' are not prepare_chunk_indices(cu_seqlens) "
                         "of these sequences")


SPEC_DECODE_OP = "fused_recurrent_gated_delta_rule"


def _check_spec_decode(op, t, n, cu_seqlens, ssm_state_indices, num_accepted_tokens):
    """Shapes of the speculative-decoding form: indices [N, W], num_accepted_tokens [N] (both needed)."""
    if op != SPEC_DECODE_OP:
        raise ValueError(f"{op}: 'num_accepted_tokens' and 2-D 'ssm_state_indices' (speculative decoding) are "
                         f"taken by {SPEC_DECODE_OP} only")
    if ssm_state_indices is None or num_accepted_tokens is None:
        raise ValueError(f"{op}: speculative decoding needs both 'ssm_state_indices' [N, 1 + k] (a pool row per "
                         "token of the step) and 'num_accepted_tokens' [N]")
    check.tensor(op, "ssm_state_indices", ssm_state_indices, dtypes=check.INDEX_DTYPES, shape=(n, None),
                 layout=f"[N, 1 + k] = [{n}, W]")
    if ssm_state_indices.shape[1] < 1:
        raise ValueError(f"{op}: argument 'ssm_state_indices' must have W = 1 + k >= 1 columns, got "
                         f"{tuple(ssm_state_indices.shape)}")
    check.tensor(op, "num_accepted_tokens", num_accepted_tokens, dtypes=check.INDEX_DTYPES, shape=(n,),
                 layout=f"[N] = [{n}]")
    if cu_seqlens is None and t > ssm_state_indices.shape[1]:
        raise ValueError(f"{op}: each sequence has T = {t} tokens but 'ssm_state_indices' has only "
                         f"{ssm_state_indices.shape[1]} pool rows per sequence (one per token)")


def _check_spec_decode_rows(op, t, cu_seqlens, ssm_state_indices, num_accepted_tokens, *, values):
    """Values of the speculative-decoding form: each real row reads and writes valid pool rows."""
    if not values or ssm_state_indices.shape[0] == 0:
        return
    width = ssm_state_indices.shape[1]
    accepted = num_accepted_tokens.to(torch.int64)
    if int(accepted.min()) < 1 or int(accepted.max()) > width:
        raise ValueError(f"{op}: argument 'num_accepted_tokens' must be in [1, {width}] (1 + k pool rows per "
                         f"sequence), got {accepted.tolist()}")
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.int64) if cu_seqlens is not None else \
        torch.full_like(accepted, t)
    if int(lengths.max()) > width:
        raise ValueError(f"{op}: a sequence has {int(lengths.max())} tokens but 'ssm_state_indices' has only "
                         f"{width} pool rows per sequence (one per token)")
    rows = ssm_state_indices.to(torch.int64)
    padding = (rows < 0).all(dim=1)
    column = torch.arange(width, device=rows.device)[None, :]
    used = (column < lengths[:, None]) | (column == accepted[:, None] - 1)
    if bool(((rows < 0) & used & ~padding[:, None]).any()):
        raise ValueError(f"{op}: argument 'ssm_state_indices' has -1 where a sequence reads its state (column "
                         "num_accepted_tokens - 1) or writes one (its first L columns); only a row of all -1 is "
                         "padding")


def _register_delta_rule(name: str):
    """Both delta-rule ops share one signature; register one of them.

    ``num_accepted_tokens`` (speculative decoding) reaches the backends of
    ``fused_recurrent_gated_delta_rule`` only; the chunked op refuses it.
    """

    @custom_op(name, mutates_args=("initial_state",))
    def _op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
            scale: Optional[float], initial_state: Optional[torch.Tensor], output_final_state: bool,
            cu_seqlens: Optional[torch.Tensor], ssm_state_indices: Optional[torch.Tensor],
            has_initial_state: Optional[torch.Tensor], use_qk_l2norm_in_kernel: bool,
            backend: Optional[str], chunk_indices: Optional[torch.Tensor] = None,
            chunk_offsets: Optional[torch.Tensor] = None,
            num_accepted_tokens: Optional[torch.Tensor] = None,
            checkpoint_boundaries: Optional[torch.Tensor] = None,
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _check_delta_rule(name, q, k, v, g, beta, initial_state, output_final_state, cu_seqlens,
                          ssm_state_indices, has_initial_state, chunk_indices, chunk_offsets,
                          values=check.values_checked(q.device), num_accepted_tokens=num_accepted_tokens,
                          checkpoint_boundaries=checkpoint_boundaries)
        extra = {"num_accepted_tokens": num_accepted_tokens} if name == SPEC_DECODE_OP else {}
        if checkpoint_boundaries is not None:
            extra["checkpoint_boundaries"] = checkpoint_boundaries.contiguous()
        result = dispatch(name, backend, q.device, q=q, k=k, v=v, g=g, beta=beta,
                          scale=resolved_scale(name, scale, q.shape[-1]), initial_state=initial_state,
                          output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                          ssm_state_indices=ssm_state_indices, has_initial_state=has_initial_state,
                          use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                          derived=dict(chunk_indices=chunk_indices, chunk_offsets=chunk_offsets), **extra)
        o, final = result[0], result[1]
        checkpoints = result[2] if checkpoint_boundaries is not None else q.new_empty(0, dtype=torch.float32)
        # custom ops cannot return None: an empty tensor stands for "no final state" / "no checkpoints".
        return o, (final if final is not None else q.new_empty(0, dtype=torch.float32)), checkpoints

    @_op.register_fake
    def _fake(q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, ssm_state_indices,
              has_initial_state, use_qk_l2norm_in_kernel, backend, chunk_indices=None, chunk_offsets=None,
              num_accepted_tokens=None, checkpoint_boundaries=None):
        n, hv, dk, dv = _check_delta_rule(name, q, k, v, g, beta, initial_state, output_final_state, cu_seqlens,
                                          ssm_state_indices, has_initial_state, chunk_indices, chunk_offsets,
                                          values=False, num_accepted_tokens=num_accepted_tokens,
                                          checkpoint_boundaries=checkpoint_boundaries)
        shape = (n, hv, dk, dv) if output_final_state else (0,)
        points = (checkpoint_boundaries.shape[0], hv, dk, dv) if checkpoint_boundaries is not None else (0,)
        return v.new_empty(v.shape), q.new_empty(shape, dtype=torch.float32), q.new_empty(points, dtype=torch.float32)

    return _op


_register_delta_rule("chunk_gated_delta_rule")
_register_delta_rule("fused_recurrent_gated_delta_rule")

_DELTA_RULE_DOC = """

    Per sequence and value head, with state S [Dk, Dv] in float32, for each
    token t: ``S = S * exp(g_t)``; ``S = S + outer(k_t, beta_t * (v_t - S^T k_t))``;
    ``o_t = S^T (scale * q_t)``.

    Args:
        q, k: [B, T, Hk, Dk]; v: [B, T, Hv, Dv]; one float dtype.
        g: [B, T, Hv] float32 log-decay. beta: [B, T, Hv], float.
        scale: default ``Dk ** -0.5``.
        initial_state: float32 [N, Hv, Dk, Dv] (zeros if None), or with
            ``ssm_state_indices`` a state pool [S, Hv, Dk, Dv].
        output_final_state: also return the final states [N, Hv, Dk, Dv].
        cu_seqlens: [N+1] int32/int64; B must be 1, sequences packed along T.
        ssm_state_indices: [N]; sequence r starts from pool row
            ``ssm_state_indices[r]`` and its final state is written back there
            in place. -1 marks padding: skipped, its outputs (and its
            final_state row, if requested) are zeros, nothing is written.
        has_initial_state: [N] bool; False rows start from zeros.
        use_qk_l2norm_in_kernel: divide q and k by ``sqrt(sum(x^2) + 1e-6)`` first.{spec}
        chunk_indices, chunk_offsets (``chunk_gated_delta_rule`` only): the
            chunk table ``prepare_chunk_indices(cu_seqlens)`` (int32 [C, 2] and
            [N+1]), built once per step by an engine; built here when None.
        checkpoint_boundaries (``chunk_gated_delta_rule`` only): int32/int64
            [P, 2], rows (sequence r, j): also return the state of sequence r
            after its first 64 * j tokens (1 <= j, 64 * j <= its length; a chunk
            boundary of the kernel, which computes that state anyway), for a
            prefix cache. Every backend emits them (torch, Triton, Ascend C).
    Returns:
        ``(o, final_state)``: o [B, T, Hv, Dv] in v's dtype; final_state
        float32 [N, Hv, Dk, Dv] or None when not requested. With
        ``checkpoint_boundaries``, ``(o, final_state, checkpoints)``:
        checkpoints float32 [P, Hv, Dk, Dv] in its row order (zeros for a
        padding sequence).
    """


_SPEC_DECODE_DOC = """
        num_accepted_tokens: [N] int32/int64, speculative decoding (vLLM's
            spec-decode GDN metadata). Then ``ssm_state_indices`` is
            [N, W = 1 + k] and holds one pool row per token of the step:
            sequence r (L_r <= W tokens) starts from pool row
            ``ssm_state_indices[r, num_accepted_tokens[r] - 1]`` (the state
            after the last token the previous step accepted) and the state
            after its t-th token is written to ``ssm_state_indices[r, t]``, so
            no rollback is ever needed. 1 <= num_accepted_tokens <= W; a row of
            all -1 is padding; a real row needs valid rows where it reads and
            writes. Not served by the ascendc backend (BackendError)."""


def _delta_rule(name, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, ssm_state_indices,
                has_initial_state, use_qk_l2norm_in_kernel, backend, chunk_indices=None, chunk_offsets=None,
                num_accepted_tokens=None, checkpoint_boundaries=None):
    op = getattr(torch.ops.qwen_ops, name)
    o, final, checkpoints = op(q, k, v, g, beta, scale, initial_state, bool(output_final_state), cu_seqlens,
                               ssm_state_indices, has_initial_state, bool(use_qk_l2norm_in_kernel), backend,
                               chunk_indices, chunk_offsets, num_accepted_tokens, checkpoint_boundaries)
    if checkpoint_boundaries is not None:
        return o, (final if output_final_state else None), checkpoints
    return o, (final if output_final_state else None)


def chunk_gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                           cu_seqlens=None, ssm_state_indices=None, has_initial_state=None,
                           use_qk_l2norm_in_kernel=False, backend: str | None = None, chunk_indices=None,
                           chunk_offsets=None, checkpoint_boundaries=None):
    return _delta_rule("chunk_gated_delta_rule", q, k, v, g, beta, scale, initial_state, output_final_state,
                       cu_seqlens, ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel, backend,
                       chunk_indices, chunk_offsets, checkpoint_boundaries=checkpoint_boundaries)


def fused_recurrent_gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None, output_final_state=False,
                                     cu_seqlens=None, ssm_state_indices=None, has_initial_state=None,
                                     use_qk_l2norm_in_kernel=False, backend: str | None = None,
                                     num_accepted_tokens=None):
    return _delta_rule("fused_recurrent_gated_delta_rule", q, k, v, g, beta, scale, initial_state,
                       output_final_state, cu_seqlens, ssm_state_indices, has_initial_state,
                       use_qk_l2norm_in_kernel, backend, num_accepted_tokens=num_accepted_tokens)


chunk_gated_delta_rule.__doc__ = (
    "Gated delta rule over whole sequences, computed chunk by chunk (chunk size 64)."
    " Compatible with flash-linear-attention's function of the same name." + _DELTA_RULE_DOC.format(spec=""))
fused_recurrent_gated_delta_rule.__doc__ = (
    "Gated delta rule computed token by token; with ``ssm_state_indices`` it is the"
    " decode update engines call every step." + _DELTA_RULE_DOC.format(spec=_SPEC_DECODE_DOC))


# ----------------------------------------------------------------------------- gating

GATING = "fused_gdn_gating"


def _check_gating(A_log, a, b, dt_bias):
    check.tensor(GATING, "a", a, dtypes=check.FLOAT_DTYPES, ndim=2, layout="[T, Hv]")
    hv = a.shape[1]
    check.tensor(GATING, "b", b, dtypes=check.FLOAT_DTYPES, shape=tuple(a.shape), layout=f"[T, Hv] = {list(a.shape)}")
    check.tensor(GATING, "A_log", A_log, dtypes=check.FLOAT_DTYPES, shape=(hv,), layout=f"[Hv] = [{hv}]")
    check.tensor(GATING, "dt_bias", dt_bias, dtypes=check.FLOAT_DTYPES, shape=(hv,), layout=f"[Hv] = [{hv}]")
    check.same_device(GATING, A_log=A_log, a=a, b=b, dt_bias=dt_bias)


@custom_op(GATING)
def _gating_op(A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor,
               backend: Optional[str]) -> tuple[torch.Tensor, torch.Tensor]:
    _check_gating(A_log, a, b, dt_bias)
    return dispatch(GATING, backend, a.device, A_log=A_log, a=a, b=b, dt_bias=dt_bias)


@_gating_op.register_fake
def _gating_fake(A_log, a, b, dt_bias, backend):
    _check_gating(A_log, a, b, dt_bias)
    return a.new_empty(a.shape, dtype=torch.float32), b.new_empty(b.shape)


def fused_gdn_gating(A_log, a, b, dt_bias, *, backend: str | None = None):
    """GDN gates from the projections ``a`` and ``b``.

    Args:
        A_log, dt_bias: [Hv]; a, b: [T, Hv]; float dtypes.
    Returns:
        ``(g, beta)``: g = ``-exp(A_log) * softplus(a + dt_bias)`` float32
        [T, Hv] (softplus as torch's, beta 1, threshold 20);
        beta = ``sigmoid(b)`` [T, Hv] in b's dtype.
    """
    return torch.ops.qwen_ops.fused_gdn_gating(A_log, a, b, dt_bias, backend)
