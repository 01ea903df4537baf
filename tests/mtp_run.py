"""Run the in-process engine on a GLM-4-MoE + MTP checkpoint and print, as JSON, the
greedy outputs, the recorded draft tokens and the drafter's class (subprocess helper of
test_compiled_drafters.py; one engine per process)."""

from __future__ import annotations

import asyncio
import json
import sys


async def main(model: str) -> None:
    from vllm import SamplingParams

    from engine_ext.engine import SpecEngine
    from engine_ext.settings import EngineSettings

    s = EngineSettings(model=model, draft_model=None, method="mtp", num_speculative_tokens=2,
                       max_num_seqs=4, max_model_len=256, dtype="float32",
                       extra_engine_args={"skip_tokenizer_init": True})
    eng = SpecEngine(s, poll_interval_s=3600)
    await eng.start()
    outs = []
    for i, prompt in enumerate(([5, 17, 33, 9], [100, 200, 300], [7] * 12)):
        sp = SamplingParams(max_tokens=16, temperature=0, ignore_eos=True, detokenize=False)
        final = None
        async for final in eng.engine.generate({"prompt_token_ids": prompt}, sp,  # noqa: B007
                                               request_id=f"r{i}"):
            pass  # cumulative output kind (the default): the last output holds all tokens
        outs.append(list(final.outputs[0].token_ids))
    drafts = (await eng.collective_rpc("specgw_recorded_drafts"))[0]
    plan = eng.self_check["ranks"][0]
    print("RESULT " + json.dumps({"outputs": outs, "drafts": drafts,
                                  "drafter_model_class": plan["drafter_model_class"],
                                  "drafter_compiled": plan["drafter_compiled"],
                                  "compilation_mode": plan["compilation_mode"]}))
    await eng.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
