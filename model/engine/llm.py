"""``LLM``: offline generation over the engine, with vLLM's names (``generate``, ``stream``).

Example::

    from qwen_ops import LLM, SamplingParams
    llm = LLM()                       # the built-in tiny model; or LLM("path/to/Qwen3.5")
    out = llm.generate(["Hello"], SamplingParams(max_tokens=8, temperature=0))
    print(out[0].outputs[0].text)
"""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from ..sample.sampling import SamplingParams
from .llm_engine import LLMEngine
from .outputs import RequestOutput, StreamOutput
from .step_failure import StepFailedError

__all__ = ["LLM", "SamplingParams", "RequestOutput", "StreamOutput"]


class LLM:
    """Generate with a Qwen3.5 checkpoint; takes ``LLMEngine``'s arguments (see there).

    ``add_request`` / ``step`` / ``abort_request`` drive the engine one step at a
    time; every other attribute (``config``, ``scheduler``, ``step_stats``,
    ``budget_summary()``, ...) is the engine's.
    """

    def __init__(self, model=None, *args, **kwargs):
        self.llm_engine = LLMEngine(model, *args, **kwargs)
        self.last_outputs: list[RequestOutput] = []

    def __getattr__(self, name):
        engine = self.__dict__.get("llm_engine")
        if engine is None:
            raise AttributeError(name)
        return getattr(engine, name)

    @property
    def trace(self) -> bool:
        """Print one line per step (``StepStats.line``)."""
        return self.llm_engine.trace

    @trace.setter
    def trace(self, value: bool) -> None:
        self.llm_engine.trace = bool(value)

    def add_request(self, prompt: str | list[int], sampling_params: SamplingParams | None = None,
                    request_id: str | None = None) -> str:
        return self.llm_engine.add_request(prompt, sampling_params, request_id)

    def step(self) -> list[RequestOutput]:
        return self.llm_engine.step()

    def abort_request(self, request_id: str) -> bool:
        return self.llm_engine.abort_request(request_id)

    def has_unfinished_requests(self) -> bool:
        return self.llm_engine.has_unfinished_requests()

    # ----------------------------------------------------------------- batches

    def _add_all(self, prompts, sampling_params) -> list[str]:
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = list(prompts)
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != len(prompts):
                raise ValueError(f"got {len(sampling_params)} sampling_params for {len(prompts)} prompts")
            params = list(sampling_params)
        else:
            params = [sampling_params] * len(prompts)
        engine = self.llm_engine
        prepared = [engine._prepare(p, s) for p, s in zip(prompts, params)]  # all checked before any is queued
        return [engine.add_request(ids if text is None else text, s) for text, ids, s in prepared]

    def _run_until_done(self, request_ids: list[str]) -> Iterator[list[RequestOutput]]:
        """Step until every request of ``request_ids`` ended; yields each step's outputs of those requests.

        A step that fails (``StepFailedError``) was rolled back by the engine: it is logged and stepping
        goes on, so a request hit by a fault is retried, and one whose steps fail repeatedly comes back
        with finish_reason "error" instead of failing the whole batch. A failure that touched no request
        (nothing to retry) is raised."""
        engine = self.llm_engine
        ours, pending = set(request_ids), set(request_ids)
        try:
            while pending:
                if not engine.has_unfinished_requests():
                    raise RuntimeError(f"requests {sorted(pending)} are neither running nor waiting")
                try:
                    step_outputs = engine.step()
                except StepFailedError as failure:
                    if not failure.request_ids:
                        raise
                    continue  # rolled back (the engine logged it): its requests are retried or ended
                outputs = [o for o in step_outputs if o.request_id in ours]
                yield outputs
                pending -= {o.request_id for o in outputs if o.finished}
                pending -= {r for r in pending if engine.is_finished(r)}  # aborted
        except BaseException:
            for r in pending:  # leave nothing half-served behind (e.g. on KeyboardInterrupt)
                engine.abort_request(r)
            raise

    def _finish(self, request_ids: list[str]) -> list[RequestOutput]:
        self.last_outputs = [self.llm_engine._output(r, forget=True) for r in request_ids]
        return self.last_outputs

    def generate(self, prompts: str | list[int] | Iterable[str | list[int]],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """Generate for every prompt (text or token ids); outputs in prompt order.

        Every prompt is checked before any is queued, so a bad one raises
        ``ValueError``/``TypeError`` and leaves the engine serving as before. A fault inside a step does not
        fail the call: the engine rolls the step back and its requests are retried; one whose steps fail
        ``max_consecutive_step_failures`` times in a row is returned with finish_reason "error" and the
        tokens it had (``step_failure.py``).
        """
        ids = self._add_all(prompts, sampling_params)
        bar = None
        if use_tqdm:
            from tqdm import tqdm

            bar = tqdm(total=len(ids), desc="Generating", unit="req")
        for outputs in self._run_until_done(ids):
            if bar is not None:
                bar.update(sum(1 for o in outputs if o.finished))
        if bar is not None:
            bar.close()
        return self._finish(ids)

    def stream(self, prompts, sampling_params=None) -> Iterator[StreamOutput]:
        """Generate, yielding each request's new tokens (and text) as soon as a step produces them.

        When the iterator is exhausted, ``last_outputs`` holds the full ``RequestOutput`` list.
        """
        ids = self._add_all(prompts, sampling_params)
        index = {r: i for i, r in enumerate(ids)}
        sent: dict[str, tuple[int, str]] = {r: (0, "") for r in ids}  # tokens and text already yielded
        for outputs in self._run_until_done(ids):
            for output in outputs:
                yield self._delta(output, index[output.request_id], sent)
        self._finish(ids)

    @staticmethod
    def _delta(output: RequestOutput, index: int, sent: dict[str, tuple[int, str]]) -> StreamOutput:
        completion = output.outputs[0]
        num_sent, text_sent = sent[output.request_id]
        new_tokens = completion.token_ids[num_sent:]
        new_text = ""
        # Hold back a trailing partial UTF-8 character until its other bytes arrive.
        if output.finished or not completion.text.endswith("\ufffd"):
            new_text, text_sent = completion.text[len(text_sent):], completion.text
        sent[output.request_id] = (len(completion.token_ids), text_sent)
        return StreamOutput(index, output.request_id, new_tokens, new_text, output.finished,
                            completion.finish_reason)
