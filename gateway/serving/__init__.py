"""One serving class per OpenAI API on the in-process engine (as vLLM's
``entrypoints/openai`` does): request -> prompt + sampling -> engine -> JSON or SSE."""

from gateway.serving.chat import ChatServing
from gateway.serving.completions import CompletionServing

__all__ = ["ChatServing", "CompletionServing"]
