"""INT8-weight projections: ``int8_linear`` (W8A8 and weight-only) and the activation quantizers of the W8A8 schemes."""
from .activation_quant import quantize_per_token, quantize_static  # noqa: F401
from .op import MAX_K, int8_linear  # noqa: F401
