"""Which compilation config makes the drafter run under CUDA graphs, and what vLLM will
do with it (a pure-Python prediction of the drafter's runtime mode per phase).

The version-specific rules and constants live in the per-version internals tables
(``engine_ext.internals``, checked by tests/test_version_guard.py); the logic here is
(see ``shared/notes/vllm-internals.md`` §1):

* Model Runner V1: the drafter owns its own dispatcher handing out ``v1_drafter_modes``
  (PIECEWISE) iff ``mixed_mode()`` of the target mode is PIECEWISE or FULL and
  ``speculative_config.enforce_eager`` is off. PIECEWISE also needs a torch-compiled
  drafter (otherwise no wrapper exists and "PIECEWISE" runs eager).
* Model Runner V2: the first pass replays ``v2_first_pass_uniform_mode`` (FULL) for
  uniform decode batches and ``v2_first_pass_mixed_mode`` (PIECEWISE) for mixed ones,
  which again needs a compiled drafter or breakable graphs; per-token steps are
  ``v2_draft_step_modes`` only (FULL: ``-O1``/PIECEWISE means eager steps).
  ``speculative_config.enforce_eager`` is ignored.
* Any pass with more tokens than ``max_cudagraph_capture_size`` runs eager.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine_ext.settings import EngineSettings

if TYPE_CHECKING:
    from engine_ext.internals.table import InternalsTable


def _rules(rules: InternalsTable | None) -> InternalsTable:
    if rules is not None:
        return rules
    from engine_ext.internals import table_for

    return table_for()

# vLLM's own default ceiling for capture sizes (0.26: min(2*seqs*(k+1), 512)).
DEFAULT_CAPTURE_CEILING = 512


def capture_sizes(max_size: int) -> list[int]:
    """1, 2, 4, then multiples of 8 up to ``max_size``; the shape vLLM uses by default,
    always including ``max_size`` itself so the largest first pass has a graph."""
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    sizes += list(range(8, max_size + 1, 8))
    if max_size not in sizes:
        sizes.append(max_size)
    return sorted(set(sizes))


def first_pass_tokens(batch: int, k: int) -> int:
    return batch * (k + 1)


def compilation_config(s: EngineSettings, device: str,
                       rules: InternalsTable | None = None) -> dict | None:
    """The ``compilation_config`` we hand vLLM, or None to leave vLLM's defaults.

    On CUDA: VLLM_COMPILE with FULL_AND_PIECEWISE (the only mode under which both
    runners graph every drafter phase) and capture sizes that cover the largest
    steady-state first pass, ``max_num_seqs * (k+1)`` tokens.
    """
    if device != "cuda" or s.enforce_eager:
        return None
    k = s.num_speculative_tokens if s.speculative else 0
    max_size = s.max_capture_size or max(first_pass_tokens(s.max_num_seqs, k), s.max_num_seqs)
    return {
        "mode": _rules(rules).compile_mode_value,  # CompilationMode.VLLM_COMPILE
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "cudagraph_capture_sizes": capture_sizes(max_size),
    }


@dataclass(frozen=True)
class DrafterModes:
    first_pass: str  # piecewise | full | none (uniform decode batch)
    draft_step: str
    reasons: tuple[str, ...] = ()
    # First pass of a mixed (prefill + decode) batch; on V1 the same as first_pass.
    first_pass_mixed: str | None = None


def _split(mode: str) -> tuple[str, str]:
    """(decode_mode, mixed_mode) of a CUDAGraphMode name."""
    mode = mode.upper()
    return {
        "NONE": ("NONE", "NONE"),
        "PIECEWISE": ("PIECEWISE", "PIECEWISE"),
        "FULL": ("FULL", "FULL"),
        "FULL_DECODE_ONLY": ("FULL", "NONE"),
        "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE"),
    }.get(mode, ("NONE", "NONE"))


def predict_drafter_modes(
    *,
    runner: str,
    cudagraph_mode: str | None,
    max_capture_size: int | None,
    k: int,
    batch: int,
    drafter_compiled: bool | None,
    spec_enforce_eager: bool = False,
    breakable_graphs: bool = False,
    rules: InternalsTable | None = None,
) -> DrafterModes:
    """What the drafter will run as in steady decode at ``batch`` requests."""
    rules = _rules(rules)
    reasons: list[str] = []
    decode_mode, mixed_mode = _split(cudagraph_mode or "NONE")
    cap = max_capture_size or 0
    first_tokens, step_tokens = first_pass_tokens(batch, k), batch
    # PIECEWISE replays only where pieces exist: a compiled drafter or breakable graphs.
    has_pieces = drafter_compiled is not False or breakable_graphs

    def fits(tokens: int, phase: str) -> bool:
        if tokens > cap:
            reasons.append(f"{phase}: {tokens} tokens > max_cudagraph_capture_size {cap}")
            return False
        return True

    if cudagraph_mode is None or cudagraph_mode.upper() == "NONE":
        return DrafterModes("none", "none", ("cudagraph_mode is NONE",), "none")

    if runner == "v1":
        if spec_enforce_eager:
            return DrafterModes("none", "none", ("speculative_config.enforce_eager",), "none")
        if mixed_mode not in ("PIECEWISE", "FULL"):
            return DrafterModes("none", "none", (f"{cudagraph_mode}: no piecewise part",),
                                "none")
        dispatched = rules.v1_drafter_modes[0].lower()
        if mixed_mode == "FULL":
            reasons.append("FULL target mode: no piecewise wrappers in the drafter")
            return DrafterModes("none", "none", tuple(reasons), "none")
        if not has_pieces:
            return DrafterModes("none", "none", (
                f"drafter not torch-compiled: {dispatched.upper()} dispatch runs eager",),
                "none")
        first = dispatched if fits(first_tokens, "first_pass") else "none"
        step = dispatched if fits(step_tokens, "draft_step") else "none"
        return DrafterModes(first, step, tuple(reasons), first)

    # Model Runner V2
    uniform, mixed_pw = rules.v2_first_pass_uniform_mode, rules.v2_first_pass_mixed_mode
    if decode_mode == uniform and fits(first_tokens, "first_pass"):
        first = uniform.lower()
    elif mixed_mode == mixed_pw and has_pieces and first_tokens <= cap:
        first = mixed_pw.lower()
    else:
        first = "none"
    if mixed_mode == mixed_pw and has_pieces:
        first_mixed = mixed_pw.lower()
    else:
        first_mixed = "none"
        if mixed_mode == mixed_pw:
            reasons.append(f"first_pass_mixed: dispatched {mixed_pw}, drafter not "
                           "torch-compiled and no breakable graphs: runs eager")
    if k <= 1:
        step = "none"
    elif decode_mode in rules.v2_draft_step_modes and fits(step_tokens, "draft_step"):
        step = decode_mode.lower()
    else:
        step = "none"
        if decode_mode not in rules.v2_draft_step_modes:
            reasons.append(f"draft_step: V2 decode steps are "
                           f"{'/'.join(rules.v2_draft_step_modes)}-only, mode {cudagraph_mode}")
    return DrafterModes(first, step, tuple(reasons), first_mixed)
