"""Fails loudly when the vLLM internals the probes wrap have moved."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine_ext.internals import UnsupportedVLLMVersion, table_for, vllm_version


def test_every_probed_internal_exists_in_installed_vllm():
    table = table_for()
    found = table.resolve_all()
    v2_needs_triton = {k for k in found if k.startswith("vllm.v1.worker.gpu.")}
    missing = [k for k, ok in found.items() if not ok and k not in v2_needs_triton]
    assert not missing, f"vLLM {vllm_version()} moved: {missing}"


def test_v2_internals_exist_in_source():
    """MRV2 modules may not import without Triton (CPU), but must exist with the names
    the probes patch: check the source text."""
    import importlib.util
    from pathlib import Path

    table = table_for()
    mod, cls = table.v2_speculator
    spec = importlib.util.find_spec(mod)
    assert spec is not None and spec.origin, f"{mod} is gone"
    src = Path(spec.origin).read_text()
    assert f"class {cls}(" in src and "def propose(" in src
    assert "set_forward_context" in src
    if table.v2_fused_decode_method:
        assert f"def {table.v2_fused_decode_method}(" in src
    cg = Path(importlib.util.find_spec(table.v2_cudagraph_module).origin).read_text()
    assert "class CudaGraphManager" in cg and "def run_fullgraph(" in cg
    # What the ledger counts runner V2's FULL forwards by (Ledger.on_capture/on_replay):
    # the manager begins a FULL capture (torch.cuda.graph) before the forward context,
    # and run_fullgraph replays the graph with no forward context of its own.
    capture = cg[cg.index("torch.cuda.graph("):]
    assert capture.index("forward_fn(CUDAGraphMode.NONE)") < capture.index("\n    def ")
    run = cg[cg.index("def run_fullgraph("):]
    run = run[:run.index("\n    def ")]
    assert ".replay()" in run and "set_forward_context" not in run


def test_graph_rules_and_constants_hold_in_installed_vllm():
    """The dispatch rules graph_config predicts with, and the compile-mode value it hands
    vLLM, are still what the installed vLLM's source says."""
    table = table_for()
    assert table.compile_mode_matches()
    rules = table.dispatch_rules_hold()
    assert rules and all(rules.values()), [k for k, ok in rules.items() if not ok]
    from vllm.config.compilation import CUDAGraphMode

    modes = {m.name for m in CUDAGraphMode}
    for name in (*table.v1_drafter_modes, *table.v2_draft_step_modes,
                 table.v2_first_pass_uniform_mode, table.v2_first_pass_mixed_mode):
        assert name in modes


def test_piece_wrapper_is_the_platform_static_graph_wrapper():
    """Pieces are counted on the class vLLM wraps split-graph pieces in (CUDA's)."""
    import importlib.util
    from pathlib import Path

    table = table_for()
    mod, cls = table.cudagraph_wrapper
    src = Path(importlib.util.find_spec("vllm.platforms.cuda").origin).read_text()
    assert f"{mod}.{cls}" in src
    backends = Path(importlib.util.find_spec("vllm.compilation.backends").origin).read_text()
    assert "runtime_mode=CUDAGraphMode.PIECEWISE" in backends

def test_torch_graph_methods_exist():
    import torch

    assert callable(torch.cuda.CUDAGraph.replay)
    assert callable(torch.cuda.CUDAGraph.capture_begin)


def test_unknown_versions_are_refused():
    with pytest.raises(UnsupportedVLLMVersion):
        table_for("0.40.0")
    assert table_for("0.26.0").v2_fused_decode_method is None
    assert table_for("0.32.0+cpu").v2_speculator[0].endswith("target_dependent_ar.speculator")


# ---- compiled drafters and the worker's drafter inspection -------------------------------
# Many of these names are instance attributes (``self.speculator = ...``), which only a
# built engine has; they are checked in the source text, for the installed vLLM and for
# the 0.26 sources the H200 runs (/work/vllm026, when unpacked there).
VLLM_026_SOURCES = Path("/work/vllm026")


def _module_ast(root: Path, module: str) -> ast.Module | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return ast.parse(path.read_text())
    return None


def _assigned_attrs(node: ast.AST) -> set[str]:
    """Attribute names assigned anywhere under ``node`` (``x.name = ...``)."""
    out = set()
    for n in ast.walk(node):
        targets = n.targets if isinstance(n, ast.Assign) else (
            [n.target] if isinstance(n, ast.AnnAssign | ast.AugAssign) else [])
        out |= {t.attr for t in targets if isinstance(t, ast.Attribute)}
    return out


def _defined_names(body: list[ast.stmt]) -> set[str]:
    out = set()
    for n in body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.Assign):
            out |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
        elif isinstance(n, ast.ImportFrom | ast.Import):
            out |= {a.asname or a.name.split(".")[0] for a in n.names}
    return out


def touch_point_missing(root: Path, module: str, cls: str, name: str) -> str | None:
    tree = _module_ast(root, module)
    if tree is None:
        return f"module {module} missing"
    if not cls:
        if name in _defined_names(tree.body) or name in _assigned_attrs(tree):
            return None
        return f"{module}.{name} missing"
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    if node is None:
        return f"class {module}.{cls} missing"
    if not name or name in _defined_names(node.body) or name in _assigned_attrs(node):
        return None
    return f"{module}.{cls}.{name} missing"


def _missing(table, root: Path) -> list[str]:
    return [m for pt in table.drafter_touch_points() if (m := touch_point_missing(root, *pt))]


def test_drafter_internals_import_in_installed_vllm():
    found = table_for().resolve_drafter_internals()
    assert found and all(found.values()), f"vLLM {vllm_version()} moved: {found}"


def test_drafter_touch_points_exist_in_installed_vllm_sources():
    import vllm

    assert not _missing(table_for(), Path(vllm.__file__).parent.parent)


@pytest.mark.skipif(not (VLLM_026_SOURCES / "vllm").is_dir(), reason="0.26 sources absent")
def test_drafter_touch_points_exist_in_vllm_026_sources():
    assert not _missing(table_for("0.26.0"), VLLM_026_SOURCES)


def test_touch_point_check_can_fail():
    import vllm

    root = Path(vllm.__file__).parent.parent
    t = table_for()
    assert touch_point_missing(root, t.registry_module, t.registry_class, "no_such_method")
    assert touch_point_missing(root, *t.dispatcher_class, "no_such_attr")
    assert touch_point_missing(root, "vllm.no_such_module", "", "x")
# ---- `vllm serve` + plugin touch points (engine_ext.endpoint_plugin / collector /
# vllm_series), checked in the installed vLLM and, by source text, in every vLLM tree
# at hand for the other range (the H200's 0.26 sources, when unpacked here).
VLLM_026_SRC = Path("/work/vllm026/vllm")


def _serve_plugin_sources() -> list[tuple[str, Path]]:
    import vllm

    trees = [(vllm_version(), Path(vllm.__file__).parent)]
    if (VLLM_026_SRC / "__init__.py").exists():
        trees.append(("0.26.0", VLLM_026_SRC))
    return trees


@pytest.mark.parametrize(("version", "root"), _serve_plugin_sources(),
                         ids=lambda v: str(v))
def test_serve_plugin_names_exist_in_source(version, root):
    t = table_for(version)
    src = lambda rel: (root / rel).read_text()  # noqa: E731
    proto_mod, proto_cls = t.endpoint_plugin_protocol
    proto = src(proto_mod.removeprefix("vllm.").replace(".", "/") + ".py")
    assert f"class {proto_cls}(" in proto
    assert "def attach_router(self, app" in proto and "async def init_state(" in proto
    core_mod, core_cls = t.core_client_class
    core = src(core_mod.removeprefix("vllm.").replace(".", "/") + ".py")
    assert f"class {core_cls}(" in core
    assert f"def {t.core_utility_method}(" in core and "engine: EngineIdentity" in core
    assert f"self.{t.core_engines_attr}" in core
    # The engine core's utility that the collector calls on each engine.
    assert "def collective_rpc(" in src("v1/engine/core.py")
    assert f"self.{t.engine_client_core_attr} = " in src("v1/engine/async_llm.py")
    # The probe switch passes its argument through collective_rpc's ``args``.
    llm = src("v1/engine/async_llm.py")
    rpc_def = llm[llm.index("async def collective_rpc("):][:400]
    assert "args: tuple = ()" in rpc_def
    # ... and the engine core's, called by position under data parallelism:
    # (method, timeout, args, kwargs).
    core = src("v1/engine/core.py")
    core_def = core[core.index("def collective_rpc("):][:400]
    assert [n for n in ("method:", "timeout:", "args:", "kwargs:")
            if n in core_def] == ["method:", "timeout:", "args:", "kwargs:"]
    assert core_def.index("method:") < core_def.index("timeout:") < \
        core_def.index("args:") < core_def.index("kwargs:")
    section, attr = t.worker_extension_config
    assert f"{attr}:" in src(f"config/{section.removesuffix('_config')}.py")
    reg_mod, reg_fn = t.prometheus_registry_fn
    assert f"def {reg_fn}(" in src(reg_mod.removeprefix("vllm.").replace(".", "/") + ".py")
    metric_src = src("v1/metrics/loggers.py") + src("v1/spec_decode/metrics.py")
    for name in t.vllm_metric_names:
        assert f'"{name}"' in metric_src, name
    plugins = src("plugins/__init__.py")
    assert '"vllm.endpoint_plugins"' in plugins and '"vllm.general_plugins"' in plugins


def test_serve_plugin_names_resolve_in_installed_vllm():
    import importlib
    import inspect

    from engine_ext import vllm_series

    t = table_for()
    proto = getattr(importlib.import_module(t.endpoint_plugin_protocol[0]),
                    t.endpoint_plugin_protocol[1])
    from engine_ext.endpoint_plugin import SpecgwEndpoints

    assert isinstance(SpecgwEndpoints(), proto)  # runtime_checkable Protocol
    core = getattr(importlib.import_module(t.core_client_class[0]), t.core_client_class[1])
    params = inspect.signature(getattr(core, t.core_utility_method)).parameters
    assert "engine" in params and "method" in params
    from vllm.config import ParallelConfig

    assert t.worker_extension_config[1] in ParallelConfig.__dataclass_fields__
    assert callable(getattr(importlib.import_module(t.prometheus_registry_fn[0]),
                            t.prometheus_registry_fn[1]))
    assert set(t.vllm_metric_names) == {vllm_series.GEN, vllm_series.PROMPT,
                                        vllm_series.DRAFTS, vllm_series.ACCEPTED,
                                        vllm_series.PER_POS}


# ---- the OpenAI layer's engine side (engine_ext.request_params) -------------------------
def test_openai_layer_names_exist_in_installed_vllm():
    import vllm

    t = table_for()
    root = Path(vllm.__file__).parent.parent
    assert not [m for pt in t.openai_touch_points() if (m := touch_point_missing(root, *pt))]
    assert callable(t.resolve(*t.tool_parser_manager, "get_tool_parser"))


@pytest.mark.skipif(not (VLLM_026_SOURCES / "vllm").is_dir(), reason="0.26 sources absent")
def test_openai_layer_names_exist_in_vllm_026_sources():
    t = table_for("0.26.0")
    assert not [m for pt in t.openai_touch_points()
                if (m := touch_point_missing(VLLM_026_SOURCES, *pt))]
    # What 0.26 lacks is declared, not assumed: the check would find it missing.
    assert t.spec_metrics_output_attr is None
    assert touch_point_missing(VLLM_026_SOURCES, "vllm.outputs", "CompletionOutput",
                               "spec_decode_metrics")
