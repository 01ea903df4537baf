"""vLLM general plugin (entry point ``vllm.general_plugins``): vLLM calls
:func:`register` in every process it starts, before the model is built, which is the one
moment the probes and the drafter repair can be installed ahead of the first forward."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("engine_ext.plugin")
_DONE = False


def register() -> None:
    global _DONE
    if _DONE:
        return
    _DONE = True
    from engine_ext.internals import table_for

    table = table_for()
    from engine_ext import sampler_fixes
    from engine_ext.engine import detect_device

    # Bug fixes, not probes: on whatever SPECGW_PROBES says.
    sampler_fixes.install(table, detect_device())
    if os.environ.get("SPECGW_PROBES", "1") == "0":
        log.info("specgw probes disabled by SPECGW_PROBES=0")
    else:
        from engine_ext.internals.install import install

        ledger = install(table)
        missing = [k for k, ok in ledger.installed.items() if not ok]
        log.info("specgw probes installed: %d ok, %d missing %s",
                 sum(ledger.installed.values()), len(missing), missing or "")
    if os.environ.get("SPECGW_COMPILED_DRAFTERS", "1") != "0":
        # Checks every drafter class when vLLM resolves it, so a class registered by a
        # plugin loaded after this one is covered too.
        from engine_ext.compiled_drafters import install as install_compiled_drafters

        install_compiled_drafters(table)
