"""Global concurrency limit with a bounded wait queue (memory stays bounded)."""

from __future__ import annotations

import asyncio

from gateway.errors import OpenAIError


class ConcurrencyLimiter:
    def __init__(self, max_concurrency: int, max_queue: int):
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self._sem = asyncio.Semaphore(max_concurrency)
        self.waiting = 0

    async def acquire(self) -> None:
        """Wait for a slot; 429 at once when the wait queue is full. The caller owns
        the slot until :meth:`release` (the request context releases it exactly once)."""
        if self._sem.locked() and self.waiting >= self.max_queue:
            raise OpenAIError(
                f"Server is at capacity ({self.max_concurrency} in flight, "
                f"{self.waiting} queued). Retry later.",
                429, "rate_limit_error", None, "server_overloaded", headers={"Retry-After": "1"},
            )
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1

    def release(self) -> None:
        self._sem.release()
