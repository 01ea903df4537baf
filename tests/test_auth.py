"""API keys: `Authorization: Bearer <key>` on /v1/*, probes stay open."""

from __future__ import annotations

from fastapi.testclient import TestClient

from engine_ext.engine import SpecEngine
from engine_ext.settings import EngineSettings
from gateway.app import GatewayConfig, create_app


def test_api_key_required_on_v1_only():
    # No `with`: the lifespan (engine start) does not run; auth sits in front of it.
    app = create_app(SpecEngine(EngineSettings()), GatewayConfig(api_key="s3cret"))
    c = TestClient(app)
    r = c.get("/v1/models")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert c.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = c.get("/v1/models", headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == "tiny-code-llama"
    assert c.get("/health").status_code == 200
    assert c.get("/ready").status_code == 503  # engine not started


def test_per_key_rate_limit_returns_429_with_retry_after(tmp_path):
    import json

    from gateway.auth import KeyStore

    f = tmp_path / "keys.json"
    f.write_text(json.dumps({"keys": {"sk-slow": {"rpm": 2}, "sk-free": {}}}))
    app = create_app(SpecEngine(EngineSettings()),
                     GatewayConfig(keys=KeyStore.load(str(f), None)))
    c = TestClient(app)
    slow = {"Authorization": "Bearer sk-slow", "x-request-id": "req-123"}
    assert c.get("/v1/models", headers=slow).status_code == 200
    r = c.get("/v1/models", headers=slow)
    assert r.status_code == 200 and r.headers["x-request-id"] == "req-123"
    r = c.get("/v1/models", headers=slow)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "rate_limit_exceeded"
    assert int(r.headers["Retry-After"]) >= 1
    for _ in range(5):  # unlimited key
        assert c.get("/v1/models", headers={"Authorization": "Bearer sk-free"}).status_code == 200
    assert c.get("/v1/models").headers["x-request-id"]  # generated when absent
