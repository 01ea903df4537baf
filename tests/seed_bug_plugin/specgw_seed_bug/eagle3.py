"""The EAGLE-3 Llama drafter as vLLM shipped it before PR #25109: the same math, but the
inner ``LlamaModel`` class is not decorated with ``@support_torch_compile``.

``@support_torch_compile`` mutates the class it decorates in place (it appends
``TorchCompileWithNoGuardsWrapper`` to ``__bases__``, wraps ``__init__`` around the
original, which it keeps in its closure as ``old_init``, and adds ``__call__`` and
``save_aot_compiled_function``). :func:`undecorated` rebuilds the class without those
changes, so instances are genuinely uncompiled (no ``do_not_compile`` flag, no wrapper
base): ``nn.Module.__call__`` runs ``forward`` eagerly whatever the dispatcher decided.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

from vllm.compilation.decorators import IGNORE_COMPILE_KEY
from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper
from vllm.model_executor.models import llama_eagle3

# What the decorator adds to the class namespace (vllm/compilation/decorators.py).
_DECORATOR_ATTRS = ("__init__", "__call__", "save_aot_compiled_function", IGNORE_COMPILE_KEY)


def _rebind(fn: Any, old: type, new: type, module_globals: dict | None = None) -> Any:
    """``fn`` with its zero-argument ``super()`` cell pointing at ``new`` instead of
    ``old`` (and, optionally, other module globals)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    cells = fn.__closure__
    if cells is not None and "__class__" in fn.__code__.co_freevars:
        cells = tuple(types.CellType(new) if name == "__class__" and c.cell_contents is old
                      else c for name, c in zip(fn.__code__.co_freevars, cells, strict=True))
    elif module_globals is None:
        return fn
    out = types.FunctionType(fn.__code__, module_globals or fn.__globals__, fn.__name__,
                             fn.__defaults__, cells)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__, out.__doc__ = fn.__qualname__, fn.__doc__
    out.__dict__.update(fn.__dict__)
    return out


def undecorated(cls: type, name: str) -> type:
    """A copy of ``cls`` as it was before ``@support_torch_compile`` decorated it."""
    if TorchCompileWithNoGuardsWrapper not in cls.__bases__:
        raise TypeError(f"{cls.__qualname__} is not decorated with @support_torch_compile")
    old_init = inspect.getclosurevars(cls.__init__).nonlocals["old_init"]
    ns = {k: v for k, v in vars(cls).items()
          if k not in (*_DECORATOR_ATTRS, "__dict__", "__weakref__")}
    ns.update(__init__=old_init, __module__=__name__, __qualname__=name)
    bases = tuple(b for b in cls.__bases__ if b is not TorchCompileWithNoGuardsWrapper)
    new = type(name, bases, ns)
    for k, v in list(vars(new).items()):
        if isinstance(v, types.FunctionType):
            setattr(new, k, _rebind(v, cls, new))
    return new


SeedBugLlamaModel = undecorated(llama_eagle3.LlamaModel, "SeedBugLlamaModel")

# vLLM's top-level class builds ``self.model = LlamaModel(...)`` by module-global name;
# the subclass runs the very same __init__ code with that one name swapped. Staying a
# subclass matters: vLLM asserts ``isinstance(model, Eagle3LlamaForCausalLM)``.
_Base = llama_eagle3.Eagle3LlamaForCausalLM
_init_globals = {**_Base.__init__.__globals__, "LlamaModel": SeedBugLlamaModel}


class SeedBugEagle3LlamaForCausalLM(_Base):
    __init__ = _rebind(_Base.__init__, _Base, _Base, _init_globals)
