"""Routing policies and the router: pure logic, no engine, no network."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

import pytest
from conftest import ROOT

from gateway.errors import OpenAIError
from gateway.routing import (
    DEFAULT_POLICIES,
    LeastOutstanding,
    Router,
    SessionAffinity,
    build_policies,
)


@dataclass
class Node:
    """A backend as the router sees it (routing reads only these fields)."""

    name: str
    outstanding: int = 0
    healthy: bool = True
    up: bool = True  # passes its health check (healthy = up and not ejected)
    models: list[str] = field(default_factory=lambda: ["m"])

    async def handle(self, ctx):  # never called: routing only chooses
        raise AssertionError("routing must not serve")


def test_least_outstanding_two_candidates_takes_the_idler():
    a, b = Node("a", 3), Node("b", 1)
    assert LeastOutstanding().choose([a, b], None) is b
    assert LeastOutstanding().choose([b, a], "key-is-ignored") is b


def test_least_outstanding_power_of_two_never_takes_the_busiest():
    nodes = [Node("idle", 0), Node("mid", 5), Node("busy", 9)]
    policy = LeastOutstanding(random.Random(0))
    picks = Counter(policy.choose(nodes, None).name for _ in range(600))
    assert picks["busy"] == 0
    # Two random of three: the idlest is in the pair 2/3 of the time, "mid" wins the rest.
    assert 330 < picks["idle"] < 470 and picks["mid"] == 600 - picks["idle"]


def test_session_affinity_is_stable_and_moves_only_lost_sessions():
    nodes = [Node(n) for n in "abcd"]
    policy = SessionAffinity()
    assert policy.choose(nodes, None) is None and policy.choose(nodes, "") is None
    home = {f"user-{i}": policy.choose(nodes, f"user-{i}").name for i in range(200)}
    assert set(home.values()) == set("abcd")  # keys spread over every backend
    assert all(policy.choose(list(reversed(nodes)), k).name == h for k, h in home.items())
    survivors = [n for n in nodes if n.name != "c"]
    for key, was in home.items():
        now = policy.choose(survivors, key).name
        assert now == was if was != "c" else now != "c"


def test_router_filters_by_model_then_health_then_policies():
    a, b = Node("a", 5), Node("b", 0, models=["m", "other"])
    down = Node("down", 0, healthy=False, up=False)
    router = Router([a, b, down])
    assert router.models() == ["m", "other"]
    assert router.pick("other") is b
    assert router.pick("m") is b  # least outstanding among the healthy
    assert router.pick("m", exclude=frozenset({"b"})) is a
    with pytest.raises(OpenAIError) as e:
        router.pick("nope")
    assert (e.value.status, e.value.code) == (404, "model_not_found")
    with pytest.raises(OpenAIError) as e:
        router.pick("m", exclude=frozenset({"a", "b"}))
    assert (e.value.status, e.value.code) == (503, "backend_unavailable")


def test_router_panics_to_ejected_backends_that_pass_health_checks():
    ejected = Node("ejected", 0, healthy=False, up=True)
    down = Node("down", 0, healthy=False, up=False)
    assert Router([down, ejected]).pick("m") is ejected
    assert Router([Node("ok", 9), ejected]).pick("m").name == "ok"  # no panic needed
    with pytest.raises(OpenAIError) as e:
        Router([down]).pick("m")
    assert e.value.status == 503


def test_router_chain_affinity_first_then_load():
    a, b = Node("a", 0), Node("b", 100)
    router = Router([a, b], build_policies(DEFAULT_POLICIES))
    sticky = {router.pick("m", affinity=f"s{i}").name for i in range(50)}
    assert sticky == {"a", "b"}  # affinity ignores load
    assert router.pick("m").name == "a"  # no key: load decides
    only_load = Router([a, b], build_policies("least-outstanding"))
    assert {only_load.pick("m", affinity=f"s{i}").name for i in range(50)} == {"a"}
    only_affinity = Router([a, b], build_policies("session-affinity"))
    assert only_affinity.pick("m").name == "a"  # no opinion: the first healthy backend


@pytest.mark.parametrize("spec", ["", "round-robin", "session-affinity,bogus", " , "])
def test_build_policies_rejects_unknown_names(spec):
    with pytest.raises(ValueError, match="routing policies"):
        build_policies(spec)


def test_cli_refuses_unknown_routing_policy_at_start():
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--backend",
                        "a=http://127.0.0.1:9", "--routing", "fastest"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "routing policies" in r.stderr


def test_router_client_flag_env_default_and_refusal(monkeypatch):
    """The relay client: aiohttp unless SPECGW_ROUTER_CLIENT or --router-client says
    otherwise; an unknown name is refused at start, and each name builds its relay."""
    from gateway.cli import build_parser
    from gateway.remote_backend import BackendSpec, RemoteBackend
    from gateway.upstream import AiohttpUpstream, HttpxUpstream

    monkeypatch.delenv("SPECGW_ROUTER_CLIENT", raising=False)
    assert build_parser().parse_args(["serve"]).router_client == "aiohttp"
    monkeypatch.setenv("SPECGW_ROUTER_CLIENT", "httpx")
    assert build_parser().parse_args(["serve"]).router_client == "httpx"
    assert build_parser().parse_args(
        ["serve", "--router-client", "aiohttp"]).router_client == "aiohttp"
    assert isinstance(RemoteBackend(BackendSpec("x", "http://127.0.0.1:9")).upstream,
                      HttpxUpstream)  # the env default reaches RemoteBackend too
    assert isinstance(RemoteBackend(BackendSpec("x", "http://127.0.0.1:9"),
                                    relay_client="aiohttp").upstream, AiohttpUpstream)
    r = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--backend",
                        "a=http://127.0.0.1:9", "--router-client", "requests"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--router-client" in r.stderr
