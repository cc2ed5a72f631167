"""The model's RMSNorm on the CPU in one call: ``rms_norm`` (x * rsqrt(mean(x^2) + eps) * scale)."""
from .op import rms_norm, rms_norm_available  # noqa: F401
