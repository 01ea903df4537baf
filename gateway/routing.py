"""Pick the backend for a request: by model name, then by a chain of routing policies.

A policy is a small unit behind one protocol: it gets the healthy candidates and the
request's routing key and returns its choice, or None to let the next policy decide.
The default chain is session affinity (when the request has a key), then the least
outstanding of two random choices. :func:`build_policies` makes a chain from names.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from gateway.errors import OpenAIError, model_not_found

if TYPE_CHECKING:
    from fastapi import Response

    from gateway.context import RequestContext


class Backend(Protocol):
    """Where a request runs: the in-process engine or a remote OpenAI server."""

    name: str
    outstanding: int

    @property
    def models(self) -> list[str]: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def up(self) -> bool:
        """Passes its active health check (``healthy`` also requires not being ejected
        after failed requests)."""
        ...

    async def handle(self, ctx: RequestContext) -> Response:
        """Serve the request. Raises ``BackendUnavailable`` only before anything was
        sent to the backend's engine, so the caller may retry elsewhere."""
        ...


class RoutingPolicy(Protocol):
    name: str

    def choose(self, candidates: Sequence[Backend], key: str | None) -> Backend | None: ...


class SessionAffinity:
    """The same key always lands on the same healthy backend (rendezvous hashing), so
    losing one backend moves only its own sessions. No key: no opinion."""

    name = "session-affinity"

    def choose(self, candidates: Sequence[Backend], key: str | None) -> Backend | None:
        if not key:
            return None
        return max(candidates, key=lambda b: hashlib.blake2b(
            f"{key}|{b.name}".encode(), digest_size=8).digest())


class LeastOutstanding:
    """Fewest requests in flight; among more than two candidates, of two random ones
    (power of two choices: near-best balance without herding on one backend)."""

    name = "least-outstanding"

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random()

    def choose(self, candidates: Sequence[Backend], key: str | None) -> Backend | None:
        pool = list(candidates)
        if len(pool) > 2:
            pool = self.rng.sample(pool, 2)
        return min(pool, key=lambda b: b.outstanding)


POLICIES: dict[str, Callable[[], RoutingPolicy]] = {
    SessionAffinity.name: SessionAffinity,
    LeastOutstanding.name: LeastOutstanding,
}
DEFAULT_POLICIES = "session-affinity,least-outstanding"


def build_policies(spec: str = DEFAULT_POLICIES) -> list[RoutingPolicy]:
    """``"a,b"`` -> [a(), b()]. When every policy passes, the first healthy backend
    is taken, so a chain may end in one that sometimes has no opinion."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if not names or unknown:
        raise ValueError(f"routing policies must be some of {sorted(POLICIES)}, "
                         f"got {spec!r}")
    return [POLICIES[n]() for n in names]


class Router:
    def __init__(self, backends: Sequence[Backend],
                 policies: Sequence[RoutingPolicy] | None = None):
        self.backends = list(backends)
        self.policies = list(policies) if policies is not None else build_policies()

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
        if not healthy:
            # Panic mode (as Envoy's panic threshold): with every backend ejected after
            # failed requests, route to those that still pass their health check rather
            # than refuse everything; one flaky moment on the only backend must not turn
            # into eject_for_s of 503s.
            healthy = [b for b in serving if b.up and b.name not in exclude]
        if not healthy:
            raise OpenAIError(f"No healthy backend for model `{model}` right now.", 503,
                              "service_unavailable", "model", "backend_unavailable")
        for policy in self.policies:
            chosen = policy.choose(healthy, affinity)
            if chosen is not None:
                return chosen
        return healthy[0]
