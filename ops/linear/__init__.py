"""The decode-path projections on the CPU: ``small_m_linear`` (x @ weight^T for few rows of x)."""
from .op import SMALL_M_MAX_ROWS, small_m_linear, small_m_linear_available  # noqa: F401
