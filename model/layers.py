"""The small building blocks of Qwen3.5: zero-centred RMSNorm, gated RMSNorm, RoPE, SwiGLU.

Shapes are token-major: x is [T, ...] for a flat batch of T tokens.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm_zero_centred(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * (1 + w)`` over the last dim, in float32, cast back to x's dtype.

    Qwen3.5 stores ``w`` centred on zero (all its norms but the GDN output norm).
    x: [..., H]; weight: [H].
    """
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * (1.0 + weight.float())).to(x.dtype)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The GDN output norm: ``w * rmsnorm(x) * silu(gate)`` with a plain (not zero-centred) weight.

    x, gate: [..., D]; weight: [D]. The normalised x is cast to x's dtype before
    the weight, and the gate is applied in float32, as transformers does.
    """
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return ((weight * normed).float() * F.silu(gate.float())).to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [T, rotary_dim] (float32) of plain RoPE for integer positions [T].

    The two halves repeat the same rotary_dim/2 frequencies (rotate-half layout).
    Qwen3.5's multimodal RoPE sections all see the same position for text, so
    this is exactly what it computes on text.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=positions.device)
                                / rotary_dim))
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of each head with rotate-half; the rest pass through.

    x: [T, heads, D]; cos, sin: [T, rotary_dim] float32.
    """
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    c, s = cos[:, None, :].to(x.dtype), sin[:, None, :].to(x.dtype)
    half = rot // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    return torch.cat((x_rot * c + rotated * s, x_pass), dim=-1)


def swiglu_mlp(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, down_w: torch.Tensor) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))``; x: [T, H] -> [T, H]."""
    return F.linear(F.silu(F.linear(x, gate_w)) * F.linear(x, up_w), down_w)
