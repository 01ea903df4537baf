"""``python -m specgw_seed_bug``: check, without an engine or a GPU, that this vLLM's
EAGLE-3 Llama drafter can be served uncompiled (prints one JSON line; exit 1 if not)."""

from __future__ import annotations

import json
import sys


def main() -> int:
    import vllm
    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper as Wrapper
    from vllm.model_executor.models import llama_eagle3

    from specgw_seed_bug import eagle3_llama_archs
    from specgw_seed_bug.eagle3 import SeedBugEagle3LlamaForCausalLM, SeedBugLlamaModel

    ok = (issubclass(llama_eagle3.LlamaModel, Wrapper)
          and not issubclass(SeedBugLlamaModel, Wrapper)
          and SeedBugLlamaModel.forward is llama_eagle3.LlamaModel.forward
          and issubclass(SeedBugEagle3LlamaForCausalLM, llama_eagle3.Eagle3LlamaForCausalLM))
    print(json.dumps({"vllm": vllm.__version__, "archs": eagle3_llama_archs(),
                      "vllm_inner_compiled": issubclass(llama_eagle3.LlamaModel, Wrapper),
                      "seed_bug_inner_compiled": issubclass(SeedBugLlamaModel, Wrapper),
                      "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
