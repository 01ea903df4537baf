#!/usr/bin/env bash
# The test command (README and .ci/run): set up, make sure Prometheus is there for the
# monitoring tests, run pytest against real servers on 127.0.0.1. The 25 slowest tests
# are listed at the end: the suite is held to 30 minutes on CI's 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
command -v prometheus >/dev/null 2>&1 || bash scripts/install_prometheus.sh
exec .venv/bin/python -m pytest -q -ra --durations=25 "$@"
