"""Engine settings: CLI flags and ``SPECGW_*`` environment variables, one dataclass."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

REPO_ROOT = Path(__file__).resolve().parent.parent
# The bundled pair lives in the source tree (models/); images point here explicitly.
BUNDLED_DIR = Path(os.environ.get("SPECGW_BUNDLED_DIR",
                                  REPO_ROOT / "models" / "tiny-code-llama"))
BUNDLED_TARGET = str(BUNDLED_DIR / "target")
BUNDLED_DRAFT = str(BUNDLED_DIR / "eagle3")

SpecMethod = Literal["eagle", "eagle3", "mtp", "none"]
Runner = Literal["auto", "v1", "v2"]


@dataclass
class EngineSettings:
    model: str = BUNDLED_TARGET
    draft_model: str | None = BUNDLED_DRAFT
    method: SpecMethod = "eagle3"
    num_speculative_tokens: int = 3
    served_model_name: str | None = None
    max_num_seqs: int = 16
    max_model_len: int = 2048
    runner: Runner = "auto"  # Model Runner V1/V2; "auto" keeps vLLM's choice
    draft_enforce_eager: bool = False  # speculative_config.enforce_eager (V1 only)
    enforce_eager: bool = False  # whole engine eager (no compile, no graphs)
    max_capture_size: int | None = None  # default: cover max_num_seqs*(k+1)
    kv_cache_gib: float = 1.0  # CPU KV cache (the VM's NUMA report breaks the default)
    dtype: str = "auto"
    seed: int = 0
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    extra_engine_args: dict = field(default_factory=dict)

    @property
    def model_name(self) -> str:
        if self.served_model_name:
            return self.served_model_name
        if self.model == BUNDLED_TARGET:
            return "tiny-code-llama"
        return self.model

    @property
    def speculative(self) -> bool:
        return self.method != "none" and self.num_speculative_tokens > 0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> EngineSettings:
        """``SPECGW_<FIELD>`` env vars, then explicit (non-None) overrides."""
        env = os.environ if env is None else env
        values: dict = {}
        for f in fields(cls):
            raw = env.get(f"SPECGW_{f.name.upper()}")
            if raw is None or f.name == "extra_engine_args":
                continue
            values[f.name] = _coerce(f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        s = cls(**values)
        s.validate()
        return s

    def validate(self) -> None:
        if self.method not in ("eagle", "eagle3", "mtp", "none"):
            raise ValueError(f"method must be eagle|eagle3|mtp|none, got {self.method!r}")
        if self.runner not in ("auto", "v1", "v2"):
            raise ValueError(f"runner must be auto|v1|v2, got {self.runner!r}")
        if self.speculative and self.method != "mtp" and not self.draft_model:
            raise ValueError(f"method {self.method} needs --draft-model")
        if self.num_speculative_tokens < 0 or self.max_num_seqs < 1:
            raise ValueError("num_speculative_tokens must be >= 0 and max_num_seqs >= 1")
        for label, path in (("model", self.model), ("draft model", self.draft_model)):
            if path and _looks_local(path) and not Path(path).is_dir():
                raise FileNotFoundError(f"{label} path {path!r} does not exist")


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or Path(path).exists()


def _coerce(type_hint: object, raw: str):
    t = str(type_hint)
    if "bool" in t:
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if "float" in t:
        return float(raw)
    if "int" in t and "None" not in t:
        return int(raw)
    if "int" in t:
        return None if raw == "" else int(raw)
    return raw or None
