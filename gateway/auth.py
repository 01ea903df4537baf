"""API keys (``Authorization: Bearer <key>``) with per-key token-bucket rate limits."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway.errors import OpenAIError
from monitoring import metrics as m


@dataclass
class _Bucket:
    rpm: float
    tokens: float
    stamp: float = field(default_factory=time.monotonic)

    def take(self) -> float:
        """0 if a request may go now, else seconds until it may."""
        now = time.monotonic()
        self.tokens = min(self.rpm, self.tokens + (now - self.stamp) * self.rpm / 60.0)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) * 60.0 / self.rpm


class KeyStore:
    """``keys``: key -> requests per minute (0 or None: unlimited)."""

    def __init__(self, keys: dict[str, float | None]):
        self.keys = keys
        self.buckets = {k: _Bucket(rpm, rpm) for k, rpm in keys.items() if rpm}

    @classmethod
    def load(cls, path: str | None, single_key: str | None) -> KeyStore | None:
        keys: dict[str, float | None] = {}
        if path:
            data = json.loads(Path(path).read_text())
            for k, v in data.get("keys", {}).items():
                keys[k] = (v or {}).get("rpm")
        if single_key:
            keys.setdefault(single_key, None)
        return cls(keys) if keys else None

    def check(self, authorization: str) -> None:
        key = authorization[7:] if authorization.startswith("Bearer ") else ""
        if key not in self.keys:
            raise OpenAIError("Incorrect API key provided.", 401, "invalid_request_error",
                              None, "invalid_api_key")
        bucket = self.buckets.get(key)
        if bucket is not None and (wait := bucket.take()) > 0:
            m.RATE_LIMITED.labels("api_key").inc()
            raise OpenAIError(f"Rate limit reached for this key ({bucket.rpm:g} requests per "
                              f"minute). Retry in {wait:.1f}s.", 429, "rate_limit_error",
                              None, "rate_limit_exceeded",
                              headers={"Retry-After": str(max(1, math.ceil(wait)))})
