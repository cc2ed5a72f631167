"""Token-budget scheduler for serving Qwen3.5 on Ascend: vLLM V1 semantics plus Ascend step metadata."""

from .config import SchedulerConfig, default_batch_limits
from .hybrid_page_size import hybrid_block_size
from .request import Request, RequestStatus
from .scheduler import EngineCoreOutput, Scheduler, SchedulerOutput
from .step_metadata import AttentionState, StepMetadata, build_step_metadata

__all__ = [
    "AttentionState",
    "Request",
    "EngineCoreOutput",
    "RequestStatus",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "StepMetadata",
    "build_step_metadata",
    "default_batch_limits",
    "hybrid_block_size",
]
