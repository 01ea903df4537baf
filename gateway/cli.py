"""``specgw serve``: start the gateway with the in-process vLLM engine.

Every flag has a ``SPECGW_*`` environment variable (flag wins); defaults serve the
bundled tiny Llama + EAGLE-3 pair on 127.0.0.1:8000.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from engine_ext.settings import EngineSettings
from gateway.protocol import MIN_POLL_INTERVAL_S
from gateway.routing import DEFAULT_POLICIES, POLICIES
from gateway.upstream import DEFAULT_RELAY_CLIENT, RELAY_CLIENTS

if TYPE_CHECKING:
    from gateway.remote_backend import RemoteBackend


def _env(name: str, default=None):
    return os.environ.get(f"SPECGW_{name}", default)


def _poll_interval(text: str) -> float:
    value = float(text)
    if not MIN_POLL_INTERVAL_S <= value <= 3600:
        raise argparse.ArgumentTypeError(
            f"must be between {MIN_POLL_INTERVAL_S:g} and 3600 seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specgw", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the OpenAI API with the in-process engine")
    s.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    s.add_argument("--port", type=int, default=int(_env("PORT", "8000")))
    s.add_argument("--model", help="target model: HF id or local dir (default: bundled)")
    s.add_argument("--draft-model", help="draft head: HF id or local dir")
    s.add_argument("--method", choices=["eagle", "eagle3", "mtp", "none"])
    s.add_argument("--num-speculative-tokens", "-k", type=int)
    s.add_argument("--served-model-name")
    s.add_argument("--max-num-seqs", type=int, help="engine batch limit")
    s.add_argument("--max-model-len", type=int)
    s.add_argument("--runner", choices=["auto", "v1", "v2"], help="vLLM model runner")
    s.add_argument("--draft-enforce-eager", action="store_true", default=None,
                   help="run the drafter eager (speculative_config.enforce_eager)")
    s.add_argument("--enforce-eager", action="store_true", default=None)
    s.add_argument("--max-capture-size", type=int)
    s.add_argument("--kv-cache-gib", type=float)
    s.add_argument("--tensor-parallel-size", "-tp", type=int)
    s.add_argument("--max-concurrency", type=int, default=int(_env("MAX_CONCURRENCY", "64")),
                   help="requests served at once; more wait in a bounded queue")
    s.add_argument("--max-queue", type=int, default=int(_env("MAX_QUEUE", "256")),
                   help="requests allowed to wait; beyond that 429")
    s.add_argument("--api-key", default=_env("API_KEY"))
    s.add_argument("--api-keys-file", default=_env("API_KEYS_FILE"),
                   help='JSON {"keys": {"<key>": {"rpm": 60}, ...}}: per-key rate limits')
    s.add_argument("--backend", action="append", default=[],
                   help="NAME=URL of a remote vLLM/specgw OpenAI server (repeatable); "
                        "with any, the gateway routes only and starts no engine")
    s.add_argument("--backends-file", default=_env("BACKENDS_FILE"),
                   help='JSON {"backends": [{"name", "url", "models"?, "timeout_s"?}]}')
    s.add_argument("--routing", default=_env("ROUTING", DEFAULT_POLICIES),
                   help="routing policy chain over the backends, first opinion wins "
                        f"(choices: {', '.join(POLICIES)})")
    s.add_argument("--router-client", choices=RELAY_CLIENTS,
                   default=_env("ROUTER_CLIENT", DEFAULT_RELAY_CLIENT),
                   help="HTTP client the router relays backend streams with (aiohttp: "
                        "C parser, lower CPU per chunk; httpx: the original relay)")
    s.add_argument("--drain-timeout", type=float, default=float(_env("DRAIN_TIMEOUT", "30")),
                   help="on SIGTERM: stop accepting, let streams finish for this long")
    s.add_argument("--poll-interval", type=_poll_interval,
                   default=_env("POLL_INTERVAL", "5"),  # a string: argparse applies type
                   help="seconds between worker probe polls (collective_rpc), at least "
                        f"{MIN_POLL_INTERVAL_S:g}")
    s.add_argument("--tool-call-parser", default=_env("TOOL_CALL_PARSER"),
                   help='vLLM tool-call parser for tool_choice "auto" (e.g. hermes); '
                        'without it "auto" is refused with a 400')
    s.add_argument("--generation-config", default=_env("GENERATION_CONFIG", "auto"),
                   help="sampling defaults: 'auto' = the model's generation_config.json "
                        "(as vllm serve), 'vllm' = off (vLLM's neutral defaults), or a dir")
    s.add_argument("--per-request-spec-metrics", action="store_true",
                   default=_env("PER_REQUEST_SPEC_METRICS", "") in ("1", "true"),
                   help="report each request's drafted/accepted tokens in usage")
    s.add_argument("--log-format", choices=["json", "text"], default=_env("LOG_FORMAT", "json"))
    s.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    return p


def setup_logging(fmt: str, level: str) -> None:
    from gateway.request_id import RequestIdFilter

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s",
            rename_fields={"levelname": "level"},
        ))
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"))
    for name in ("gateway", "engine_ext"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level.upper())
        lg.propagate = False


def settings_from_args(a: argparse.Namespace) -> EngineSettings:
    return EngineSettings.from_env(
        model=a.model, draft_model=a.draft_model, method=a.method,
        num_speculative_tokens=a.num_speculative_tokens, served_model_name=a.served_model_name,
        max_num_seqs=a.max_num_seqs, max_model_len=a.max_model_len, runner=a.runner,
        draft_enforce_eager=a.draft_enforce_eager, enforce_eager=a.enforce_eager,
        max_capture_size=a.max_capture_size, kv_cache_gib=a.kv_cache_gib,
        tensor_parallel_size=a.tensor_parallel_size,
        extra_engine_args=openai_engine_args(a),
    )


def openai_engine_args(a: argparse.Namespace) -> dict:
    """Engine arguments behind the OpenAI-layer flags (vLLM's own names and values)."""
    extra: dict = {"generation_config": a.generation_config}
    if a.per_request_spec_metrics:
        extra["per_request_spec_decode_metrics"] = "summary"
    return extra


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_format, args.log_level)
    log = logging.getLogger("gateway.cli")
    try:
        settings = settings_from_args(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"specgw: error: {exc}", file=sys.stderr)
        return 2
    from gateway.app import GatewayConfig, create_app
    from gateway.auth import KeyStore
    from gateway.routing import build_policies

    try:
        remotes = load_backends(args.backend, args.backends_file, args.router_client)
        keys = KeyStore.load(args.api_keys_file, args.api_key)
        build_policies(args.routing)  # fail at start, not at the first request
    except (ValueError, OSError) as exc:
        print(f"specgw: error: {exc}", file=sys.stderr)
        return 2
    if args.tool_call_parser and not remotes:
        from engine_ext.request_params import check_tool_call_parser

        try:
            check_tool_call_parser(args.tool_call_parser)
        except ValueError as exc:
            print(f"specgw: error: {exc}", file=sys.stderr)
            return 2
    config = GatewayConfig(args.max_concurrency, args.max_queue, args.api_key, keys,
                           args.routing, args.tool_call_parser)
    app = create_app(None if remotes else local_engine(settings, args.poll_interval),
                     config, remotes)
    engine = app.state.engine
    what = (f"router over {[r.name for r in remotes]} (relay client: {args.router_client})"
            if remotes else settings.model_name)
    log.info("serving %s on http://%s:%d (ready at /ready)", what, args.host, args.port)
    server = make_server(app, args.host, args.port, args.log_level, args.drain_timeout)
    try:
        server.run()
    except KeyboardInterrupt:
        # uvicorn has drained and shut down by now; it re-raises the SIGINT it caught.
        return 130
    return 1 if engine is not None and engine.start_error else 0


def local_engine(settings: EngineSettings, poll_interval: float):
    """The in-process engine. Imported here, not at module level: router mode
    (``--backend``) never loads engine_ext.engine, let alone vLLM."""
    from engine_ext.engine import SpecEngine

    return SpecEngine(settings, poll_interval_s=poll_interval)


def make_server(app, host: str, port: int, log_level: str = "info",
                drain_timeout: float = 30.0):
    """The uvicorn server ``specgw serve`` runs (the GPU benchmark runs the same one)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level=log_level.lower(), access_log=False,
        timeout_graceful_shutdown=drain_timeout))
    app.state.stop_server = lambda: setattr(server, "should_exit", True)
    return server


def load_backends(flags: list[str], path: str | None,
                  relay_client: str | None = None) -> list[RemoteBackend]:
    import json
    from pathlib import Path

    from gateway.remote_backend import BackendSpec, RemoteBackend

    specs = []
    for flag in flags:
        name, sep, url = flag.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise ValueError(f"--backend wants NAME=http://host:port, got {flag!r}")
        specs.append(BackendSpec(name, url))
    if path:
        for b in json.loads(Path(path).read_text()).get("backends", []):
            specs.append(BackendSpec(**b))
    names = [s.name for s in specs]
    if len(names) != len(set(names)):
        raise ValueError(f"backend names must be unique: {names}")
    return [RemoteBackend(s, relay_client=relay_client) for s in specs]


if __name__ == "__main__":
    sys.exit(main())
