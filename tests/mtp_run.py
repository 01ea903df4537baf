"""Run the in-process engine once and print, as JSON, the greedy outputs, the recorded
draft tokens and the drafter's class (subprocess helper of test_compiled_drafters.py:
one engine per process, so each run gets its own plugins and environment).

    python tests/mtp_run.py MODEL                              # MTP head inside MODEL
    python tests/mtp_run.py MODEL --method eagle3 --draft-model DIR [--runner v1|v2]
"""

from __future__ import annotations

import argparse
import asyncio
import json


async def main(args: argparse.Namespace) -> None:
    from vllm import SamplingParams

    from engine_ext.engine import SpecEngine
    from engine_ext.settings import EngineSettings

    s = EngineSettings(model=args.model, draft_model=args.draft_model, method=args.method,
                       num_speculative_tokens=2, max_num_seqs=4, max_model_len=256,
                       dtype="float32", runner=args.runner,
                       extra_engine_args={"skip_tokenizer_init": True})
    eng = SpecEngine(s, poll_interval_s=3600)
    await eng.start()
    outs = []
    for i, prompt in enumerate(([5, 17, 33, 9], [100, 200, 300], [7] * 12)):
        sp = SamplingParams(max_tokens=args.max_tokens, temperature=0, ignore_eos=True,
                            detokenize=False)
        final = None
        async for final in eng.engine.generate({"prompt_token_ids": prompt}, sp,  # noqa: B007
                                               request_id=f"r{i}"):
            pass  # cumulative output kind (the default): the last output holds all tokens
        outs.append(list(final.outputs[0].token_ids))
    drafts = (await eng.collective_rpc("specgw_recorded_drafts"))[0]["drafts"]
    plan = eng.self_check["ranks"][0]
    keys = ("runner", "drafter_model_class", "drafter_compiled", "compilation_mode",
            "spec_enforce_eager", "drafter_dispatcher",
            "drafter_compiled_by_specgw", "drafter_compile_unsafe")
    print("RESULT " + json.dumps({"outputs": outs, "drafts": drafts,
                                  **{k: plan.get(k) for k in keys}}))
    await eng.shutdown()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--method", default="mtp")
    p.add_argument("--draft-model", default=None)
    p.add_argument("--runner", default="auto")
    p.add_argument("--max-tokens", type=int, default=16)
    asyncio.run(main(p.parse_args()))
