"""Compiled subclasses for drafter classes vLLM ships without @support_torch_compile."""

from __future__ import annotations

import importlib

import pytest

from engine_ext.compiled_drafters import (
    UNCOMPILED_MTP_DRAFTERS,
    compiled_subclass,
    is_compiled_class,
    register_compiled_drafters,
)


@pytest.mark.parametrize("arch", sorted(UNCOMPILED_MTP_DRAFTERS))
def test_compiled_subclass_keeps_the_original_and_adds_compile(arch):
    mod, name = UNCOMPILED_MTP_DRAFTERS[arch]
    base = getattr(importlib.import_module(mod), name)
    assert not is_compiled_class(base), f"vLLM now compiles {name}: drop it from the list"
    cls = compiled_subclass(base)
    assert issubclass(cls, base) and is_compiled_class(cls)
    assert cls.forward is base.forward  # same math; only the compile wrapper is added


def test_registry_points_at_compiled_classes():
    from vllm import ModelRegistry

    registered = register_compiled_drafters()
    assert set(registered) == set(UNCOMPILED_MTP_DRAFTERS)
    for arch in registered:
        cls = ModelRegistry._try_load_model_cls(arch)
        assert cls is not None and is_compiled_class(cls), arch
