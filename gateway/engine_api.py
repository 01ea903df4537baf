"""What the gateway needs from the in-process engine, as a Protocol.

The gateway never imports vLLM: sampling parameters travel as a plain dict of
``SamplingParams`` keyword arguments, and the engine (``engine_ext.engine.SpecEngine``)
turns them into vLLM types. So ``specgw serve --backend ...`` (router mode) runs
without vLLM installed or loaded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, runtime_checkable


class Tokenizer(Protocol):
    """The slice of the engine's (Hugging Face style) tokenizer the gateway uses."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> Any: ...

    def __len__(self) -> int: ...


class CompletionOutput(Protocol):
    """One choice of an engine output (vLLM's ``CompletionOutput``)."""

    index: int
    text: str
    token_ids: Sequence[int]
    logprobs: list[dict[int, Any]] | None
    finish_reason: str | None


# (model text, tool definitions) -> (remaining content, [(function name, arguments JSON)])
ToolCallExtractor = Callable[[str, list[dict]], tuple[str | None, list[tuple[str, str]]]]


class RequestOutput(Protocol):
    outputs: Sequence[CompletionOutput]


@runtime_checkable
class SpecEngine(Protocol):
    """The in-process engine. ``sampling`` dicts may carry ``output_kind`` as
    ``"delta"`` or ``"final_only"`` and ``structured_outputs`` as a plain dict."""

    start_error: str | None
    self_check: dict[str, Any] | None

    @property
    def model_name(self) -> str: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def speculative(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    @property
    def errored(self) -> bool: ...

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...

    async def refresh_probes(self) -> list[dict]:
        """Every rank's probe ledger, read now. Raises ``RuntimeError`` when the workers
        did not answer in time (the last ledgers stay exported)."""
        ...

    async def switch_probes(self, enabled: bool, poll_interval_s: float | None
                            ) -> dict[str, Any]:
        """Every worker's probes in or out; ``poll_interval_s`` None keeps it. Raises
        ``RuntimeError`` when a worker did not answer (its state is then unknown)."""
        ...

    async def alternate_probes(self, steps: int, mode: str, seed: int,
                               groups: list[str] | None = None) -> dict[str, Any]:
        """Start the probes' step-by-step A/B over the next ``steps`` engine steps
        (``groups``: only those kinds of wrapper switched, the rest out).
        Raises ``RuntimeError``: with ``status_code`` 409 while one runs, else when a
        worker did not answer."""
        ...

    async def probe_alternation(self, stop: bool = False) -> dict[str, Any]:
        """``{"done", "ranks": [{"rank", "record"}]}`` of the last alternation; ``stop``
        ends a running one first."""
        ...

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary: rows of its embedding and width of its logits, which
        may differ from ``len(tokenizer)`` either way."""
        ...

    def build_sampling_params(self, kwargs: dict[str, Any]) -> Any:
        """Raises ``ValueError``/``TypeError`` for parameters the engine refuses; the
        ValueError may carry the offending parameter as ``.param``."""
        ...

    def sampling_defaults(self) -> dict[str, Any]:
        """The model's generation-config sampling defaults (``{}`` when turned off)."""
        ...

    def spec_decode_counts(self, output: CompletionOutput) -> dict[str, int] | None:
        """Per-request draft/accepted counts of a finished choice, when enabled."""
        ...

    def tool_call_extractor(self, parser: str) -> ToolCallExtractor:
        """The engine's named tool-call parser as a function (see ToolCallExtractor)."""
        ...

    def generate(self, prompt_token_ids: list[int], params: Any,
                 request_id: str) -> AsyncIterator[RequestOutput]: ...

    async def abort(self, request_ids: list[str]) -> None: ...
