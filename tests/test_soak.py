"""The reliability soak (``benchmarks/soak.py``), CI size: the router in front of two real
backends (bundled pair on the vLLM CPU engine: a ``specgw serve`` and a stock ``vllm
serve`` + specgw plugin) for 150 s of mixed load with one stall of the specgw backend
(SIGSTOP past the router's backend timeout) and one kill + restart of the vllm serve
backend's whole process tree (the 20-minute run hits each backend with both). Zero lost requests,
the ledger adds up, nothing leaks. The ledger's judge is tested on its own first: the soak
is only as good as its ability to call a request lost.
"""

from __future__ import annotations

import pytest

from benchmarks.soak_workload import Entry, StreamState, judge, stream_event, stream_verdict

FAULT = [{"kind": "kill", "backend": "b", "t_start": 10.0, "t_end": 40.0}]


def _stream(lines: list[str], n: int = 1) -> Entry:
    e = Entry("r1", "completion_stream", t=100.0, dur=1.0, status=200)
    st = StreamState(n)
    for line in lines:
        stream_event(e, st, line, 0.0)
        if st.done:
            break
    stream_verdict(e, st)
    return e


CHUNK = '{"choices":[{"index":0,"text":"x","finish_reason":null}]}'
LAST = '{"choices":[{"index":0,"text":"","finish_reason":"length"}]}'
ERROR = '{"error":{"message":"cut","type":"backend_error","param":null,' \
        '"code":"backend_stream_interrupted"}}'


def test_complete_stream_succeeds():
    e = _stream([CHUNK, LAST, "[DONE]"])
    judge(e, FAULT)
    assert (e.outcome, e.verdict) == ("ok", "succeeded")


@pytest.mark.parametrize("lines", [[CHUNK], [CHUNK, LAST], [CHUNK, "[DONE]"]],
                         ids=["no-done", "no-done-finished", "done-unfinished"])
def test_truncated_stream_without_error_event_is_lost(lines):
    e = _stream(lines)
    judge(e, FAULT)  # even while a fault is active: a silent truncation is never expected
    assert (e.outcome, e.verdict) == ("truncated", "lost")


def test_error_event_is_expected_only_while_a_fault_is_active():
    during = _stream([CHUNK, ERROR, "[DONE]"])
    during.t = 30.0
    judge(during, FAULT)
    assert (during.verdict, during.err_code) == ("failed_expected", "backend_stream_interrupted")
    later = _stream([CHUNK, ERROR, "[DONE]"])
    judge(later, FAULT)  # t=100 s, the fault (and its grace) ended at 60 s
    assert later.verdict == "lost" and "unexplained" in later.reason


@pytest.mark.parametrize("entry,verdict", [
    (Entry("r", "chat", 100.0, 1.0, 502, "error", "backend_error"), "lost"),
    (Entry("r", "chat", 20.0, 1.0, 503, "error", "service_unavailable"), "failed_expected"),
    (Entry("r", "chat", 100.0, 1.0, 400, "error", "invalid_request_error"), "lost"),
    (Entry("r", "bad_input", 100.0, 1.0, 200, "ok"), "lost"),
    (Entry("r", "bad_input", 100.0, 1.0, 400, "error", "invalid_request_error"),
     "failed_expected"),
    (Entry("r", "chat", 100.0, 1.0, 429, "error", "rate_limit_error", "server_overloaded"),
     "failed_expected"),
    (Entry("r", "chat", 100.0, 1.0, 429, "error", "rate_limit_error", "rate_limit_exceeded"),
     "lost"),
    (Entry("r", "chat", 100.0, 121.0, None, "hung"), "lost"),
    (Entry("r", "chat", 20.0, 1.0, None, "exception"), "lost"),
    (Entry("r", "bad_input", 100.0, 1.0, 422, "error", "invalid_request_error"),
     "failed_expected"),
    (Entry("r", "bad_input", 20.0, 1.0, 503, "error", "service_unavailable"),
     "failed_expected"),
    (Entry("r", "bad_input", 100.0, 1.0, 503, "error", "service_unavailable"), "lost"),
    (Entry("r", "bad_input", 100.0, 1.0, 400, "exception"), "lost"),
    (Entry("r", "bad_input", 100.0, 1.0, 400, "error", "BadRequestError", "400"), "lost"),
    (Entry("r", "bad_input", 100.0, 1.0, 429, "error", "rate_limit_error",
           "server_overloaded"), "failed_expected"),
    (Entry("r", "bad_input", 100.0, 1.0, 429, "error", "rate_limit_error",
           "rate_limit_exceeded"), "lost"),
], ids=["502-no-fault", "503-in-fault", "400-on-good-input", "bad-input-accepted",
        "bad-input-400", "queue-429", "key-429-on-unlimited-key", "hung", "dropped-connection",
        "bad-input-422", "bad-input-503-in-fault", "bad-input-503-no-fault",
        "bad-input-400-not-openai-shape", "bad-input-400-vllm-type", "bad-input-queue-429",
        "bad-input-key-429"])
def test_judge(entry, verdict):
    judge(entry, FAULT)
    assert entry.verdict == verdict, entry.reason


@pytest.mark.slow
def test_soak_ci_size_loses_nothing(tmp_path):
    """Two engines + a router under the engine lock, about five minutes in all."""
    from benchmarks.soak import Config, soak
    from benchmarks.soak_report import verdicts

    cfg = Config(duration_s=150, warmup_s=20, first_fault_s=20, fault_every_s=60,
                 window_s=30, sample_s=3, backends="specgw,vllm", faults="stall:a,kill:b")
    res = soak(cfg, tmp_path, tmp_path / "logs")
    faults = sorted((f["kind"], f["backend_kind"]) for f in res["faults"])
    assert faults == [("kill", "vllm"), ("stall", "specgw")], res["faults"]
    kill = next(f for f in res["faults"] if f["kind"] == "kill")
    assert kill["killed_procs"] >= 2, kill  # vllm serve's API server and engine core
    served = {r[Entry.FIELDS.index("backend")] for r in res["ledger"]["rows"]}
    assert {"a", "b"} <= served, served
    by = res["totals"]["by_verdict"]
    assert by.get("succeeded", 0) > 50 and by.get("aborted", 0) > 0, by
    failed = [c for c in verdicts(res) if c["gate"] and not c["ok"]]
    lost = [r for r in res["ledger"]["rows"] if r[Entry.FIELDS.index("verdict")] == "lost"]
    assert not failed, (failed, lost[:20])
