"""The one probe collector, shared by ``specgw serve`` (:class:`engine_ext.engine.SpecEngine`)
and a stock ``vllm serve`` with our endpoint plugin (:mod:`engine_ext.endpoint_plugin`).

Given vLLM's engine client (``AsyncLLM``: both front ends hold one), it runs the start-up
self-check once, then mirrors every worker's probe ledger into Prometheus: every poll
interval and, through the front end, right before each ``/metrics`` scrape.

Every rank of every engine: vLLM's ``collective_rpc`` reaches all workers of one engine,
but under data parallelism (``DPLBAsyncMPClient``) it returns engine 0's results only.
:func:`all_engines_rpc` therefore sends the same utility call to each engine the client
manages and tags each result with its engine index and a rank unique across engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from engine_ext.internals.table import InternalsTable

log = logging.getLogger("engine_ext.collector")

RpcFn = Callable[[str, tuple], Awaitable[list[Any]]]  # (method, args)


def all_engines_rpc(engine_client: Any, table: InternalsTable) -> RpcFn:
    """``collective_rpc`` over every worker of every engine behind ``engine_client``.

    Never with vLLM's own ``timeout``: when it expires, vLLM's multiprocess executor
    gives up waiting but the worker still answers, and its late answer stays in the
    executor's response queue, where the next call (the next engine step) reads it. On
    the CPU engine under load one such timeout left the engine answering every later
    request with no tokens. Callers bound their wait on their own side
    (``ProbePoller.collective_rpc``); the engine then finishes the call in its own time."""
    core = getattr(engine_client, table.engine_client_core_attr, None)
    engines = list(getattr(core, table.core_engines_attr, None) or [])
    call_one = getattr(core, table.core_utility_method, None)

    if not engines or call_one is None:  # an in-process engine core: one engine
        async def rpc_single(method: str, args: tuple = ()) -> list[Any]:
            return tag_engine(0, 1, await engine_client.collective_rpc(method, args=args))

        return rpc_single

    async def rpc(method: str, args: tuple = ()) -> list[Any]:
        per_engine = await asyncio.gather(*(
            call_one("collective_rpc", method, None, args, None, engine=e) for e in engines))
        out: list[Any] = []
        for idx, results in enumerate(per_engine):
            out.extend(tag_engine(idx, len(results), results))
        return out

    return rpc


def tag_engine(engine_idx: int, world: int, results: list[Any]) -> list[Any]:
    """Label dict results with their engine and a rank unique across engines (engine 0's
    ranks keep their numbers, so a single engine looks exactly as before)."""
    for r in results:
        if isinstance(r, dict):
            r["engine"] = engine_idx
            r["rank"] = engine_idx * world + int(r.get("rank", 0))
    return results


class ProbeReadError(RuntimeError):
    """The workers did not answer a probe call in time, or not with one dict each."""


class ProbeSwitchError(RuntimeError):
    """A probe switch that did not reach every rank."""


class ProbeAlternationBusy(RuntimeError):
    """An alternation (engine_ext.probes.alternate) is still running on some rank."""

    status_code = 409  # both front ends answer it as a conflict, not as a 503


class ProbePoller:
    """Self-check once, then keep ``monitoring.metrics.PROBES`` current.

    ``run_self_check`` takes any object with ``collective_rpc``, ``device`` and
    ``model_name``; this class is that object for both front ends.
    """

    def __init__(self, rpc: RpcFn, model_name: str, device: str,
                 poll_interval_s: float = 5.0) -> None:
        from engine_ext.vllm_series import VLLM_DERIVED

        self._rpc = rpc
        self.model_name = model_name
        self.device = device
        self.poll_interval_s = poll_interval_s
        # How long a probe read may wait for the workers (a step in progress finishes
        # first); past it the read is given up on this side and the last one stays.
        self.rpc_timeout_s = float(os.environ.get("SPECGW_PROBE_RPC_TIMEOUT_S", "10"))
        self.self_check: dict[str, Any] | None = None
        self.snapshots: list[dict] = []  # the last refresh's, one per rank
        self.enabled = True  # the workers' probes are in (switch())
        self._lock = asyncio.Lock()
        self._switch_lock = asyncio.Lock()
        self._wake = asyncio.Event()  # set by switch(): poll now, with the new interval
        self._task: asyncio.Task | None = None
        VLLM_DERIVED.add_model(model_name)

    async def collective_rpc(self, method: str, timeout: float | None = None,
                             args: tuple = ()) -> list[Any]:
        """Every rank's answer, waited for at most ``timeout`` seconds (default
        ``rpc_timeout_s``) on this side only (see :func:`all_engines_rpc`)."""
        wait = self.rpc_timeout_s if timeout is None else timeout
        # Serialised: each call occupies the engine's step loop on every rank.
        async with self._lock:
            try:
                answers = await asyncio.wait_for(self._rpc(method, args), wait)
            except (TimeoutError, asyncio.TimeoutError) as exc:  # distinct before 3.11
                raise ProbeReadError(f"{method}: no answer from the workers within "
                                     f"{wait:g} s") from exc
        if not all(isinstance(a, dict) for a in answers):
            raise ProbeReadError(f"{method}: ranks answered "
                                 f"{[type(a).__name__ for a in answers]}, not a dict each")
        return answers

    async def start(self) -> dict[str, Any]:
        from engine_ext.self_check import run_self_check

        self.self_check = await run_self_check(self)
        try:
            await self.refresh()
        except ProbeReadError as exc:  # the poll loop reads them again shortly
            log.warning("first probe read failed: %s", exc)
        self._task = asyncio.create_task(self._poll_loop(), name="specgw-probe-poller")
        return self.self_check

    async def switch(self, enabled: bool, poll_interval_s: float | None = None
                     ) -> dict[str, Any]:
        """Probes in or out on every rank, and the poll interval. While out, nothing is
        polled and a scrape does not refresh: the workers run vLLM's own functions where
        the probes were. On the way out the ledgers are read once more after the switch,
        so the exported counts end where the probes did. Raises ``ProbeSwitchError`` when
        a rank did not answer (its state is then unknown: switch again)."""
        async with self._switch_lock:
            if poll_interval_s is not None:
                self.poll_interval_s = poll_interval_s
                self._wake.set()  # a new interval applies now, not after the old sleep
            try:
                ranks = await self.collective_rpc("specgw_probes_set", args=(enabled,))
                # Read the ledgers whichever way it went (they stay readable when out).
                snaps = await self.collective_rpc("specgw_probe_snapshot")
            except Exception as exc:
                raise ProbeSwitchError(
                    f"probe switch failed ({type(exc).__name__}: {exc}); some ranks may "
                    "have switched: send the switch again") from exc
            if any(r.get("enabled") is not enabled for r in ranks):
                raise ProbeSwitchError(f"probe switch: ranks answered {ranks}; send the "
                                       "switch again")
            self.enabled = enabled
            self._export(snaps)
            return {"enabled": self.enabled, "poll_interval_s": self.poll_interval_s,
                    "ranks": ranks}

    async def alternate(self, steps: int, mode: str = "ab", seed: int = 0,
                        groups: list[str] | None = None) -> dict[str, Any]:
        """Start a step-by-step A/B of the probes on every rank
        (:mod:`engine_ext.probes.alternate`); ``alternation()`` reads it back. Raises
        ``ProbeAlternationBusy`` while one runs (the ranks are asked before any starts)."""
        async with self._switch_lock:  # not interleaved with a switch
            if any(r["record"] is not None and not r["record"]["done"]
                   for r in await self.collective_rpc("specgw_probe_alternation")):
                raise ProbeAlternationBusy("a probe alternation is running; read "
                                           "GET /v1/engine/probes/alternate until done")
            ranks = await self.collective_rpc("specgw_probe_alternate",
                                              args=(steps, mode, seed, groups))
            return {"ranks": ranks}

    async def alternation(self, stop: bool = False) -> dict[str, Any]:
        """Every rank's last alternation record (``done`` once its steps have run);
        ``stop`` ends a running one first (its record then holds the steps it ran)."""
        method = "specgw_probe_alternation_stop" if stop else "specgw_probe_alternation"
        ranks = await self.collective_rpc(method)
        return {"done": all(r["record"] is not None and r["record"]["done"] for r in ranks),
                "ranks": ranks}

    def _export(self, snaps: list[dict]) -> None:
        from monitoring import metrics as m

        m.PROBES.update(self.model_name, snaps)
        self.snapshots = snaps

    async def refresh(self) -> list[dict]:
        """Pull every rank's ledger into the Prometheus collector (the last snapshots,
        marked off, while the probes are switched off)."""
        if not self.enabled:
            return self.snapshots
        snaps = await self.collective_rpc("specgw_probe_snapshot")
        self._export(snaps)
        return snaps

    async def _poll_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll_interval_s)
            self._wake.clear()
            try:
                await self.refresh()
            except Exception as exc:  # never let metrics take serving down
                log.warning("probe poll failed: %s", exc)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
