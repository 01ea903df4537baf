"""Which compilation config makes the drafter run under CUDA graphs, and what vLLM will
do with it (a pure-Python prediction of the drafter's runtime mode per phase).

The rules are read from vLLM 0.26-0.32 (see ``shared/notes/vllm-internals.md`` §1):

* Model Runner V1: the drafter owns a PIECEWISE-only dispatcher; it gets keys iff
  ``mixed_mode()`` of the target mode is PIECEWISE or FULL and
  ``speculative_config.enforce_eager`` is off. PIECEWISE also needs a torch-compiled
  drafter (otherwise no wrapper exists and "PIECEWISE" runs eager).
* Model Runner V2: the first pass replays a FULL graph for uniform decode batches and
  PIECEWISE for mixed ones; per-token steps are FULL-only (so ``-O1``/PIECEWISE means
  eager steps). ``speculative_config.enforce_eager`` is ignored.
* Any pass with more tokens than ``max_cudagraph_capture_size`` runs eager.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_ext.settings import EngineSettings

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


def compilation_config(s: EngineSettings, device: str) -> dict | None:
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
        "mode": 3,  # CompilationMode.VLLM_COMPILE
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "cudagraph_capture_sizes": capture_sizes(max_size),
    }


@dataclass(frozen=True)
class DrafterModes:
    first_pass: str  # piecewise | full | none
    draft_step: str
    reasons: tuple[str, ...] = ()


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


def predict_drafter_modes(  # noqa: C901  (mirrors vLLM's dispatch rules)
    *,
    runner: str,
    cudagraph_mode: str | None,
    max_capture_size: int | None,
    k: int,
    batch: int,
    drafter_compiled: bool | None,
    spec_enforce_eager: bool = False,
) -> DrafterModes:
    """What the drafter will run as in steady decode at ``batch`` requests."""
    reasons: list[str] = []
    decode_mode, mixed_mode = _split(cudagraph_mode or "NONE")
    cap = max_capture_size or 0
    first_tokens, step_tokens = first_pass_tokens(batch, k), batch

    def fits(tokens: int, phase: str) -> bool:
        if tokens > cap:
            reasons.append(f"{phase}: {tokens} tokens > max_cudagraph_capture_size {cap}")
            return False
        return True

    if cudagraph_mode is None or cudagraph_mode.upper() == "NONE":
        return DrafterModes("none", "none", ("cudagraph_mode is NONE",))

    if runner == "v1":
        if spec_enforce_eager:
            return DrafterModes("none", "none", ("speculative_config.enforce_eager",))
        if mixed_mode not in ("PIECEWISE", "FULL"):
            return DrafterModes("none", "none", (f"{cudagraph_mode}: no piecewise part",))
        if mixed_mode == "FULL":
            reasons.append("FULL target mode: no piecewise wrappers in the drafter")
            return DrafterModes("none", "none", tuple(reasons))
        if drafter_compiled is False:
            return DrafterModes("none", "none", ("drafter not torch-compiled",))
        first = "piecewise" if fits(first_tokens, "first_pass") else "none"
        step = "piecewise" if fits(step_tokens, "draft_step") else "none"
        return DrafterModes(first, step, tuple(reasons))

    # Model Runner V2
    if decode_mode == "FULL" and fits(first_tokens, "first_pass"):
        first = "full"
    elif mixed_mode == "PIECEWISE" and drafter_compiled is not False and first_tokens <= cap:
        first = "piecewise"
    else:
        first = "none"
        if mixed_mode == "PIECEWISE" and drafter_compiled is False:
            reasons.append("first_pass: drafter not torch-compiled")
    if k <= 1:
        step = "none"
    elif decode_mode == "FULL" and fits(step_tokens, "draft_step"):
        step = "full"
    else:
        step = "none"
        if decode_mode != "FULL":
            reasons.append(f"draft_step: V2 decode steps are FULL-only, mode {cudagraph_mode}")
    return DrafterModes(first, step, tuple(reasons))
