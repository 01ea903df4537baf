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
