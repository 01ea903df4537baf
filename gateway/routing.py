"""Pick the backend for a request: by model name, then the healthy backend with the
fewest outstanding requests (power of two choices when there are more than two)."""

from __future__ import annotations

import hashlib
import random
from typing import Protocol

from gateway.errors import OpenAIError, model_not_found


class Backend(Protocol):
    name: str
    outstanding: int

    @property
    def models(self) -> list[str]: ...

    @property
    def healthy(self) -> bool: ...


class Router:
    def __init__(self, backends: list[Backend], rng: random.Random | None = None):
        self.backends = backends
        self.rng = rng or random.Random()

    def models(self) -> list[str]:
        seen: dict[str, None] = {}
        for b in self.backends:
            for m in b.models:
                seen.setdefault(m, None)
        return list(seen)

    def pick(self, model: str, exclude: frozenset[str] = frozenset(),
             affinity: str | None = None) -> Backend:
        serving = [b for b in self.backends if model in b.models]
        if not serving:
            raise model_not_found(model)
        healthy = [b for b in serving if b.healthy and b.name not in exclude]
        if affinity and healthy:
            # Session affinity: a stable choice among the healthy backends (rendezvous
            # hashing), so losing one backend moves only its own sessions.
            return max(healthy, key=lambda b: hashlib.blake2b(
                f"{affinity}|{b.name}".encode(), digest_size=8).digest())
        if not healthy:
            raise OpenAIError(f"No healthy backend for model `{model}` right now.", 503,
                              "service_unavailable", "model", "backend_unavailable")
        if len(healthy) > 2:
            healthy = self.rng.sample(healthy, 2)
        return min(healthy, key=lambda b: b.outstanding)
