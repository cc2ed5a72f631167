"""The engine: ``LLMEngine`` (requests in, ``step()`` out), ``LLM`` over it, their outputs and ``qwen-generate``.

    llm_engine.py     LLMEngine: schedule -> execute -> update, the requests' records
    engine_config.py  EngineConfig: the arguments checked and resolved, the memory planned, before the engine
    llm.py            LLM: generate / stream with vLLM's names
    outputs.py        RequestOutput, CompletionOutput, StreamOutput, StepStats
    step_failure.py   StepFailedError: what a failed step raises (the engine rolled it back), the retry limit
    generate.py       the qwen-generate command

``LLMEngine`` and ``LLM`` load on first use (they pull in torch and the model), so that importing this
package, as ``qwen-generate --help`` does, stays cheap.
"""

__all__ = ["LLMEngine", "LLM", "EngineConfig", "StepFailedError"]


def __getattr__(name):
    if name == "LLMEngine":
        from .llm_engine import LLMEngine

        return LLMEngine
    if name == "LLM":
        from .llm import LLM

        return LLM
    if name == "StepFailedError":
        from .step_failure import StepFailedError

        return StepFailedError
    if name == "EngineConfig":
        from .engine_config import EngineConfig

        return EngineConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
