"""The engine: ``LLMEngine`` (requests in, ``step()`` out), ``LLM`` over it, their outputs and ``qwen-generate``.

    llm_engine.py     LLMEngine: schedule -> execute -> update, the requests' records
    engine_config.py  EngineConfig: the arguments checked and resolved, the memory planned, before the engine
    llm.py            LLM: generate / stream with vLLM's names
    outputs.py        RequestOutput, CompletionOutput, StreamOutput, StepStats
    generate.py       the qwen-generate command

``LLMEngine`` and ``LLM`` load on first use (they pull in torch and the model), so that importing this
package, as ``qwen-generate --help`` does, stays cheap.
"""

__all__ = ["LLMEngine", "LLM", "EngineConfig"]


def __getattr__(name):
    if name == "LLMEngine":
        from .llm_engine import LLMEngine

        return LLMEngine
    if name == "LLM":
        from .llm import LLM

        return LLM
    if name == "EngineConfig":
        from .engine_config import EngineConfig

        return EngineConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
