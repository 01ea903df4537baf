#!/usr/bin/env bash
# Prometheus (server + promtool) from Debian's packages, for the monitoring tests.
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a system service on :9090 where systemd runs; tests use their own.
$SUDO systemctl stop prometheus 2>/dev/null || true
command -v prometheus promtool
