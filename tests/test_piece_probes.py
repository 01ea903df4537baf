"""The installed probes on vLLM's real ``CUDAGraphWrapper`` and ``set_forward_context``
(CPU, no engine): pieces are counted per forward and the dispatch label is read however
it is passed. CPU torch cannot replay a graph, so the captured entry holds a stand-in
whose ``replay()`` reports to the ledger exactly as the ``torch.cuda.CUDAGraph.replay``
probe does; everything else (mode matching, the entry lookup) is vLLM's code."""

from __future__ import annotations

import pytest

from engine_ext.probes.ledger import UNKNOWN, Ledger


class _Backend:
    """A split-graph piece (vLLM's PiecewiseBackend carries ``vllm_backend.prefix``)."""

    def __init__(self, prefix: str):
        self.vllm_backend = type("VllmBackend", (), {"prefix": prefix})()

    def __call__(self, x):
        return x + 1


class _Replayable:
    def __init__(self, ledger: Ledger):
        self.ledger = ledger

    def replay(self) -> None:
        self.ledger.on_replay()


@pytest.fixture(scope="module")
def vllm_env():
    from vllm.compilation.cuda_graph import CUDAGraphEntry, CUDAGraphWrapper
    from vllm.config import CUDAGraphMode, VllmConfig
    from vllm.forward_context import BatchDescriptor, set_forward_context
    from vllm.platforms import current_platform

    from engine_ext.internals import table_for
    from engine_ext.internals.install import _piece_probes

    ledger = Ledger()
    _piece_probes(table_for(), ledger)
    assert ledger.installed == {"graph.pieces.__init__": True, "graph.pieces.__call__": True}
    # The CPU platform has no graph pool; the wrapper only stores the handle.
    platform_cls = type(current_platform)
    had = "graph_pool_handle" in vars(platform_cls)
    old = vars(platform_cls).get("graph_pool_handle")
    platform_cls.graph_pool_handle = staticmethod(lambda: None)
    yield dict(ledger=ledger, Wrapper=CUDAGraphWrapper, Entry=CUDAGraphEntry,
               Mode=CUDAGraphMode, cfg=VllmConfig(), Desc=BatchDescriptor,
               set_fc=set_forward_context)
    if had:
        platform_cls.graph_pool_handle = old
    else:
        del platform_cls.graph_pool_handle


def split_graph(env, n: int, captured: list[bool]) -> list:
    """``n`` PIECEWISE wrappers, piece i holding a captured graph for 8 tokens iff
    ``captured[i]``."""
    pieces = []
    for i in range(n):
        w = env["Wrapper"](_Backend("eagle_head"), env["cfg"], env["Mode"].PIECEWISE)
        if captured[i]:
            desc = env["Desc"](num_tokens=8)
            w.concrete_cudagraph_entries[desc] = env["Entry"](
                batch_descriptor=desc, cudagraph=_Replayable(env["ledger"]), output=100 + i)
        pieces.append(w)
    return pieces


def run(env, pieces: list, mode) -> None:
    lg = env["ledger"]
    from engine_ext.internals.install import dispatch_label_reader

    label = dispatch_label_reader(env["set_fc"])
    args = (None, env["cfg"], 8, None, mode, env["Desc"](num_tokens=8))  # positional label
    with lg.forward("draft", label(args, {})), env["set_fc"](*args):
        x = 0
        for p in pieces:
            x = p(x)


def last_forwards(lg: Ledger) -> dict:
    return {tuple(r[:4]): r[4] for r in lg.snapshot()["forwards"]}


def test_piece_wrappers_counted_per_prefix_and_full_wrappers_are_not_pieces(vllm_env):
    lg = vllm_env["ledger"]
    before = lg.snapshot()["piece_wrappers"].get("eagle_head", 0)
    split_graph(vllm_env, 3, [False] * 3)
    vllm_env["Wrapper"](_Backend("eagle_head"), vllm_env["cfg"], vllm_env["Mode"].FULL)
    assert lg.snapshot()["piece_wrappers"]["eagle_head"] == before + 3


def test_real_wrappers_classify_graph_partial_eager(vllm_env):
    lg, mode = vllm_env["ledger"], vllm_env["Mode"]
    full = split_graph(vllm_env, 4, [True] * 4)
    half = split_graph(vllm_env, 4, [True, True, False, False])
    run(vllm_env, full, mode.PIECEWISE)  # first pass: learns 4 pieces, all replayed
    c0 = last_forwards(lg)
    assert c0.get(("draft", "first_pass", "piecewise", "graph")) == 1
    # Pieces without a captured graph would be captured on first sight, which only the
    # capture phase allows: vLLM raises here, as it would at serving time on a GPU.
    with pytest.raises(RuntimeError):
        run(vllm_env, half, mode.PIECEWISE)
    run(vllm_env, full, mode.NONE)  # same split graph, dispatched NONE: eager by decision
    run(vllm_env, [], mode.PIECEWISE)  # uncompiled drafter: no piece at all
    c = last_forwards(lg)
    assert c[("draft", "first_pass", "none", "eager")] == 1
    assert c[("draft", "first_pass", "piecewise", "eager")] == 1
    assert c[("draft", "first_pass", "piecewise", "partial")] == 1  # the raising one
    assert lg.snapshot()["known_pieces"]["draft"] == 4
    rep, exp = next((r[2], r[3]) for r in lg.snapshot()["pieces"] if r[:2] == ["draft",
                                                                              "first_pass"])
    assert (rep, exp) == (4 + 2, 4 + 4 + 4)  # graph 4/4, the raising one 2/4, eager 0/4


def test_dispatch_label_read_by_keyword_position_default_or_unknown(vllm_env):
    from engine_ext.internals.install import dispatch_label_reader

    mode, cfg = vllm_env["Mode"], vllm_env["cfg"]
    read = dispatch_label_reader(vllm_env["set_fc"])
    assert read((None, cfg), {"cudagraph_runtime_mode": mode.FULL}) == mode.FULL
    assert read((None, cfg, 8, None, mode.PIECEWISE), {}) == mode.PIECEWISE
    assert read((None, cfg), {}) == mode.NONE  # left out: vLLM's default, what runs

    def moved(attn_metadata, vllm_config, **kw):  # a vLLM that renamed the parameter
        return None

    assert read is not dispatch_label_reader(moved)
    assert dispatch_label_reader(moved)((None, cfg), {"runtime_mode": mode.FULL}) == UNKNOWN
