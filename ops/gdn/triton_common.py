"""Host-side plumbing shared by the two Triton delta-rule kernels.

Both kernels see the inputs as token-major rows: q, k [T_total, Hk, Dk],
v [T_total, Hv, Dv], g, beta [T_total, Hv], with the N sequences given by
offsets ``cu`` [N+1] (built from B and T when the caller packed nothing).

Where a sequence starts and where its final state goes is a per-sequence
table (``StatePlan``) so the kernels need no branches on the calling mode:

* ``read_rows[r]``: row of ``state_in`` to start from, -1 for zeros;
* ``write_rows[r]``: in pool mode the pool row that receives the final
  state, -1 marking a padding sequence that the kernels skip entirely (its
  outputs stay zero and nothing is written); otherwise r (never negative);
* ``final``: float32 [N, Hv, Dk, Dv] for ``output_final_state``, else None;
* ``token_rows``: speculative decoding only, int32 [N, W]: the pool row that
  receives the state after each token (``read_rows`` then holds the row of
  column ``num_accepted_tokens - 1``; ``write_rows`` only marks padding).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

# ``use_qk_l2norm_in_kernel`` divides by sqrt(sum(x^2) + L2NORM_EPS).
L2NORM_EPS = 1e-6


@dataclass
class Rows:
    """The delta-rule inputs flattened to token-major rows, plus sequence offsets."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor
    beta: torch.Tensor
    cu: torch.Tensor  # int32 [N+1]

    @property
    def n_seqs(self) -> int:
        return self.cu.shape[0] - 1


def _rows(x: torch.Tensor) -> torch.Tensor:
    """[B, T, ...] -> [B*T, ...] with the last dim contiguous (a view when possible)."""
    x = x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])
    return x if x.stride(-1) == 1 else x.contiguous()


def flatten(q, k, v, g, beta, cu_seqlens) -> Rows:
    b, t = q.shape[:2]
    if cu_seqlens is None:
        cu = torch.arange(0, b + 1, dtype=torch.int32, device=q.device) * t
    else:
        cu = cu_seqlens.to(torch.int32)
    return Rows(_rows(q), _rows(k), _rows(v), _rows(g), _rows(beta), cu)


@dataclass
class StatePlan:
    state_in: torch.Tensor  # [S, Hv, Dk, Dv] float32, or a dummy when nothing is read
    read_rows: torch.Tensor  # int32 [N]
    write_rows: torch.Tensor  # int32 [N]; pool rows to write (-1: padding), or arange(N) without a pool
    pool: bool
    final: torch.Tensor | None  # float32 [N, Hv, Dk, Dv]
    token_rows: torch.Tensor | None = None  # int32 [N, W], speculative decoding: pool row after each token

    @property
    def final_arg(self) -> torch.Tensor:
        """The final-state pointer argument: a dummy when it is not stored."""
        return self.final if self.final is not None else self.state_in


def plan_states(*, initial_state, ssm_state_indices, has_initial_state, output_final_state, n, hv, dk, dv,
                device, num_accepted_tokens=None) -> StatePlan:
    """Resolve the calling mode (fresh, per-sequence initial states, pool, speculative decoding) into row tables."""
    token_rows = None
    pool = ssm_state_indices is not None and num_accepted_tokens is None
    if num_accepted_tokens is not None:
        token_rows = ssm_state_indices.to(torch.int32).contiguous()
        read = token_rows.gather(1, (num_accepted_tokens.to(torch.int64) - 1)[:, None])[:, 0]
        # Only a row of all -1 is padding (validated); real rows are numbered, as without a pool.
        padding = (token_rows < 0).all(dim=1)
        write = torch.where(padding, -1, torch.arange(n, dtype=torch.int32, device=device)).to(torch.int32)
    elif pool:
        rows = ssm_state_indices.to(torch.int32)
        read = rows
        write = rows
    else:
        # No pool: every sequence is real (write row >= 0) and none is written back.
        write = torch.arange(n, dtype=torch.int32, device=device)
        read = write if initial_state is not None else torch.full_like(write, -1)
    if has_initial_state is not None:
        read = torch.where(has_initial_state, read, -1).to(torch.int32)
    state_in = initial_state if initial_state is not None else torch.zeros(1, dtype=torch.float32, device=device)
    final = None
    if output_final_state:
        # Padding sequences of a pool are skipped: their final state stays zero.
        alloc = torch.zeros if pool or token_rows is not None else torch.empty
        final = alloc((n, hv, dk, dv), dtype=torch.float32, device=device)
    return StatePlan(state_in, read.contiguous(), write.contiguous(), pool, final, token_rows)


def output_buffer(v_rows: torch.Tensor, pool: bool) -> torch.Tensor:
    """o rows [T_total, Hv, Dv] in v's dtype; zero-filled when padding sequences may leave rows unwritten."""
    alloc = torch.zeros if pool else torch.empty
    return alloc(v_rows.shape, dtype=v_rows.dtype, device=v_rows.device)


def prepare_launch(q, k, v, g, beta, *, cu_seqlens, initial_state, ssm_state_indices, has_initial_state,
                   output_final_state, num_accepted_tokens=None) -> tuple[Rows, StatePlan, torch.Tensor]:
    """The host-side work both kernels do before launching, on the validated op arguments.

    Returns (rows: the inputs as token-major ``Rows``, plan: the ``StatePlan``,
    o: the output rows [T_total, Hv, Dv] in v's dtype from ``output_buffer``).
    """
    rows = flatten(q, k, v, g, beta, cu_seqlens)
    plan = plan_states(initial_state=initial_state, ssm_state_indices=ssm_state_indices,
                       has_initial_state=has_initial_state, output_final_state=output_final_state,
                       n=rows.n_seqs, hv=v.shape[2], dk=q.shape[3], dv=v.shape[3], device=q.device,
                       num_accepted_tokens=num_accepted_tokens)
    return rows, plan, output_buffer(rows.v, plan.pool or plan.token_rows is not None)


def tile(dim: int) -> int:
    """Power-of-two tile covering ``dim``, at least 16 so that every ``tl.dot`` dimension is >= 16."""
    return max(16, triton.next_power_of_2(dim))


@triton.jit
def dot_f32_acc(a, b, DOT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``a @ b`` with both operands rounded to ``DOT``, accumulated in float32.

    ``DOT`` is the model's dtype: bfloat16/float16 put the product on tensor
    cores (the cube on Ascend); float32 operands are multiplied as
    ``PRECISION`` says, the host's ``_triton.dot_precision`` (IEEE: float32
    inputs follow the float32 reference to float32 rounding) or
    ``_triton.float32_dot_precision`` for float32 operands in a 16-bit model.
    Named explicitly: triton-ascend has no default for it.

    ``UPCAST`` (the host sets it under the interpreter only): the rounded
    operands are multiplied as float32. The product of two 16-bit values is
    exact in float32, so this is what a tensor core computes; the
    interpreter's own bfloat16 ``tl.dot`` is wrong, and this lets the CPU
    tests run the bfloat16 path of the kernels.
    """
    a = a.to(DOT)
    b = b.to(DOT)
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision=PRECISION)
    return tl.dot(a, b, input_precision=PRECISION)
