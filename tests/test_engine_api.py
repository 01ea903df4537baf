"""The gateway/engine seam: the gateway's SpecEngine protocol is what engine_ext's
SpecEngine offers, sampling dicts become real vLLM SamplingParams on the engine side,
and no gateway module imports vLLM."""

from __future__ import annotations

import ast
import inspect
import typing

import pytest
from conftest import ROOT

from engine_ext.engine import SpecEngine as EngineImpl
from engine_ext.settings import EngineSettings
from gateway.engine_api import SpecEngine as EngineProtocol


def protocol_members(proto: type) -> set[str]:
    own = set()
    for klass in proto.__mro__:
        if klass in (typing.Protocol, typing.Generic, object):
            continue
        own |= set(getattr(klass, "__annotations__", {})) | {
            n for n in vars(klass) if not n.startswith("_")}
    return own


def test_engine_implements_the_gateway_protocol():
    members = protocol_members(EngineProtocol)
    assert {"generate", "abort", "tokenizer", "build_sampling_params", "max_model_len",
            "speculative", "ready", "model_name"} <= members
    engine = EngineImpl(EngineSettings())
    missing = [n for n in members if not hasattr(type(engine), n) and n not in vars(engine)]
    assert not missing
    for name in ("generate", "build_sampling_params"):
        want = list(inspect.signature(getattr(EngineProtocol, name)).parameters)
        got = list(inspect.signature(getattr(EngineImpl, name)).parameters)
        assert want == got, name
    assert inspect.iscoroutinefunction(EngineImpl.abort)
    assert engine.max_model_len == EngineSettings().max_model_len
    assert engine.speculative is True


def test_build_sampling_params_converts_plain_kwargs():
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    engine = EngineImpl(EngineSettings())
    p = engine.build_sampling_params({"n": 2, "max_tokens": 7, "temperature": 0.5,
                                      "output_kind": "delta", "stop": ["\n"],
                                      "structured_outputs": {"regex": "[ab]+"}})
    assert isinstance(p, SamplingParams)
    assert (p.n, p.max_tokens, p.temperature, p.stop) == (2, 7, 0.5, ["\n"])
    assert p.output_kind is RequestOutputKind.DELTA
    assert isinstance(p.structured_outputs, StructuredOutputsParams)
    assert p.structured_outputs.regex == "[ab]+"
    final = engine.build_sampling_params({"max_tokens": 1, "output_kind": "final_only"})
    assert final.output_kind is RequestOutputKind.FINAL_ONLY
    with pytest.raises((ValueError, TypeError)):
        engine.build_sampling_params({"max_tokens": 1, "top_k": -5})


def _imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_gateway_module_imports_vllm():
    files = sorted((ROOT / "gateway").rglob("*.py"))
    assert len(files) > 10
    for f in files:
        bad = {n for n in _imports(f) if n == "vllm" or n.startswith("vllm.")}
        assert not bad, f"{f.relative_to(ROOT)} imports {bad}"
        if f.name != "cli.py":  # the CLI creates the local engine, lazily
            assert "engine_ext.engine" not in _imports(f), f
