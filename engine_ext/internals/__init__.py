"""Everything that touches vLLM internals, one module per vLLM version range."""

from __future__ import annotations

from engine_ext.internals.table import InternalsTable

SUPPORTED = ">=0.26,<0.33"


class UnsupportedVLLMVersion(RuntimeError):
    pass


def vllm_version() -> str:
    import vllm

    return vllm.__version__


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split("+")[0].split(".")
    return int(parts[0]), int(parts[1])


def table_for(version: str | None = None) -> InternalsTable:
    version = version or vllm_version()
    mm = _major_minor(version)
    if mm == (0, 26):
        from engine_ext.internals.vllm_0_26 import TABLE
    elif (0, 27) <= mm <= (0, 32):
        from engine_ext.internals.vllm_0_27_0_32 import TABLE
    else:
        raise UnsupportedVLLMVersion(
            f"vLLM {version} is outside {SUPPORTED}: the probed internals are unverified "
            "there. Add engine_ext/internals/vllm_<range>.py after checking them."
        )
    return TABLE
