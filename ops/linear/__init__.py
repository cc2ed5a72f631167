"""The decode-path projections on the CPU: ``small_m_linear`` (x @ weight^T for few rows of x; float32 or bfloat16)."""
from .op import SMALL_M_MAX_ROWS, small_m_linear, small_m_linear_available, small_m_linear_bf16_simd  # noqa: F401
