"""The Qwen3.5 model and its engine, in parts named after what they hold (vLLM's split):

    engine/       LLMEngine, LLM, EngineConfig, the outputs and qwen-generate
    worker/       the model runner, its persistent batch, the page pool of KV pages and GDN states
    spec_decode/  speculative decoding with the MTP head: its config, the drafter, statistics
    network/      the Qwen3.5 layers (attention, GDN, MoE, MLP, MTP head) over one mixed batch
    sample/       SamplingParams, the sampler, greedy argmax, the rejection sampler
    loading/      config, weights, tokenizer, the built-in tiny model, INT8 KV scales

An import goes down this list (``scheduling`` and ``ops`` below all of it), never back up:
``tests/test_import_graph.py`` checks it.

Kept for users' imports: these modules stood flat in this package before it was split, and the old
paths still import the very same module objects (``import qwen_ops.model.sampling`` is
``qwen_ops.model.sample.sampling``). New code imports the new paths.
"""
import importlib
import importlib.abc
import importlib.util
import sys

OLD_PATHS = {
    "llm": "engine.llm",
    "outputs": "engine.outputs",
    "generate": "engine.generate",
    "sampling": "sample.sampling",
    "config": "loading.config",
    "weights": "loading.weights",
    "tokenizer": "loading.tokenizer",
    "default_model": "loading.default_model",
    "speculative_config": "spec_decode.speculative_config",
}


class _OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``qwen_ops.model.<old name>`` as its new module: the same object, so names and monkeypatches agree."""

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, name = fullname.rpartition(".")
        if prefix != __name__ or name not in OLD_PATHS:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(f"{__name__}.{OLD_PATHS[spec.name.rpartition('.')[2]]}")
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # The new module ran when it was imported; the import system has just set its __spec__ to the
        # old path's: give it back its own (its relative imports and importlib.reload read it).
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname):
        # ``python -m qwen_ops.model.generate`` (runpy asks the loader for code): run the new module as __main__.
        new = f"{__name__}.{OLD_PATHS[fullname.rpartition('.')[2]]}"
        return compile(f"import runpy\nrunpy.run_module({new!r}, run_name='__main__', alter_sys=True)\n",
                       f"<{fullname}: {new}>", "exec")

if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
    sys.meta_path.append(_OldPathFinder())
