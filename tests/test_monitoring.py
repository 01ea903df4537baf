"""A real Prometheus scrapes the gateway; every dashboard query and alert rule is
evaluated through its HTTP API after a bounded burst of real requests. The same checks
run against both scrape targets users have: ``specgw serve``, and a stock ``vllm serve``
with the specgw plugin (the dashboard and alert rules must work unchanged on both)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml
from conftest import LOG_DIR, MODEL, ROOT, free_port, wait_until_ok

from monitoring.dashboard import DASHBOARD_PATH, PANELS, all_queries, build
from monitoring.preview import render, substitute

MON = ROOT / "monitoring"
RATE_WINDOW = "30s"


@pytest.fixture(scope="module", params=["specgw_serve", "vllm_serve"])
def target(request) -> str:
    """The scraped server: the session gateway, or vLLM's own server with our plugin."""
    return request.getfixturevalue("server" if request.param == "specgw_serve"
                                   else "vllm_serve").url


@pytest.fixture(scope="module")
def prometheus(target: str, tmp_path_factory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not installed (scripts/install_prometheus.sh)"
    d = tmp_path_factory.mktemp("prom")
    shutil.copy(MON / "alerts.yml", d / "alerts.yml")
    cfg = yaml.safe_load((MON / "prometheus.yml").read_text())
    cfg["global"].update(scrape_interval="1s", evaluation_interval="1s")
    cfg["scrape_configs"][0]["static_configs"] = [{"targets": [target.split("//")[1]]}]
    (d / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    log = (LOG_DIR / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ok(f"{url}/-/ready", 60, proc, "prometheus")
        yield url
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def burst(base_url: str) -> None:
    """A bounded mix: streamed and plain requests, and a few that fail on purpose.
    Greedy, so acceptance in the window is deterministic (sampling could accept nothing)."""
    from openai import BadRequestError, NotFoundError, OpenAI

    c = OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120)
    for i in range(6):
        msgs = [{"role": "user", "content": f"def f{i}(x):"}]
        if i % 2:
            list(c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=32,
                                           temperature=0, stream=True))
        else:
            c.completions.create(model=MODEL, prompt=f"import os{i}", max_tokens=32,
                                 temperature=0)
    for bad in ({"max_tokens": -1}, {"temperature": -1}):
        with pytest.raises(BadRequestError):
            c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                      **bad)
    with pytest.raises(NotFoundError):
        c.chat.completions.create(model="missing", messages=[{"role": "user", "content": "x"}])


def query(prom: str, expr: str) -> dict:
    r = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=30)
    return r.json()


def test_every_dashboard_query_returns_data(prometheus, target, request):
    burst(target)
    time.sleep(6)  # a few 1 s scrapes after the burst, so rate() has its two samples
    burst(target)
    time.sleep(4)
    empty, failed = [], []
    for title, expr in all_queries():
        res = query(prometheus, substitute(expr, RATE_WINDOW))
        if res.get("status") != "success":
            failed.append((title, res.get("error")))
        elif not res["data"]["result"]:
            empty.append((title, expr))
    assert not failed, failed
    assert not empty, empty
    # The numbers themselves: CPU drafter never replays, acceptance length > 1.
    panel = {p.title: p for p in PANELS}
    hit = query(prometheus, substitute(panel["Drafter CUDA-graph hit rate"].targets[0][1],
                                       RATE_WINDOW))
    assert all(float(s["value"][1]) == 0.0 for s in hit["data"]["result"])
    al = query(prometheus, substitute(panel["Mean acceptance length"].targets[0][1],
                                      RATE_WINDOW))
    assert float(al["data"]["result"][0]["value"][1]) > 1.0
    name = request.node.callspec.params["target"]
    png = "dashboard.png" if name == "specgw_serve" else f"dashboard-{name}.png"
    render(prometheus, LOG_DIR / png, minutes=1, step=1, rate_window=RATE_WINDOW)


def test_alert_rules_evaluate_without_error(prometheus):
    deadline = time.monotonic() + 30
    while True:
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("20") and
                         not r["lastEvaluation"].startswith("0001") for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(1)
    names = {r["name"] for r in rules}
    assert {"SpecgwDrafterGraphHitRateLow", "SpecgwHighErrorRate", "SpecgwNotReady"} <= names
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    # On CPU no drafter graph is expected, so the hit-rate alert must stay quiet.
    hit_alert = next(r for r in rules if r["name"] == "SpecgwDrafterGraphHitRateLow")
    assert hit_alert["state"] == "inactive"


def test_promtool_checks(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool
    shutil.copy(MON / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(MON / "alerts.yml", tmp_path / "alerts.yml")
    subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], check=True,
                   capture_output=True)
    subprocess.run([promtool, "check", "rules", str(MON / "alerts.yml")], check=True,
                   capture_output=True)


def test_dashboard_json_is_current_and_well_formed():
    committed = json.loads(DASHBOARD_PATH.read_text())
    assert committed == build(), "run `python -m monitoring.dashboard` and commit"
    assert committed["schemaVersion"] >= 39
    variables = {v["name"]: v for v in committed["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert {"model_name", "instance"} <= set(variables)
    ids = [p["id"] for p in committed["panels"]]
    assert len(ids) == len(set(ids))
    for p in committed["panels"]:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}"
        assert p["targets"] and all(t["expr"] for t in p["targets"])
        assert {"h", "w", "x", "y"} <= set(p["gridPos"])
    titles = " ".join(p["title"] for p in committed["panels"]).lower()
    for needed in ("drafter cuda-graph hit rate", "target cuda-graph hit rate", "eager",
                   "acceptance length", "per draft position", "tokens per second",
                   "status", "time to first token", "inter-token", "end-to-end", "queue"):
        assert needed in titles, needed


def test_dockerfile_and_compose_reference_real_files():
    text = (ROOT / "Dockerfile").read_text()
    for src in re.findall(r"^COPY\s+(.+?)\s+\S+$", text, re.M):
        for item in src.split():
            assert (ROOT / item).exists(), item
    entries = [json.loads(e) for e in re.findall(r"^ENTRYPOINT\s+(\[.*\])$", text, re.M)]
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entries[-1][0] in scripts  # the default (last) stage runs specgw serve
    # The vllm-plugin stage runs vLLM's own server with exactly the README's plugin flag
    # and env, bound for a container.
    from engine_ext.endpoint_plugin import VLLM_PLUGINS_LINE
    from engine_ext.engine import WORKER_EXTENSION

    assert re.search(r"^FROM vllm/vllm-openai:\S+ AS vllm-plugin$", text, re.M)
    assert entries[0][:2] == ["vllm", "serve"] and WORKER_EXTENSION in entries[0]
    assert VLLM_PLUGINS_LINE in text
    assert VLLM_PLUGINS_LINE in (ROOT / "README.md").read_text()
    assert re.search(r"^USER\s+(?!root\b)\S+", text, re.M)
    assert "HEALTHCHECK" in text and "/ready" in text
    compose = yaml.safe_load((MON / "docker-compose.yml").read_text())
    for svc in compose["services"].values():
        for vol in svc.get("volumes", []):
            assert (MON / vol.split(":")[0]).exists(), vol
    assert (MON / compose["services"]["gateway"]["build"]["context"] / "Dockerfile").exists()
