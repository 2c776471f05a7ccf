#!/usr/bin/env bash
# The test command. Does all set-up first (scripts/setup.sh: .venv from requirements.lock, embedded
# model), then runs pytest offline. Extra arguments go to pytest, e.g. ./run_tests.sh -k data -x
set -euo pipefail
cd "$(dirname "$0")"
export LADE_CACHE="${LADE_CACHE:-$PWD/.cache}"  # models and latency profiles in the checkout (lade's default: ~/.cache/lade)
scripts/setup.sh
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
exec .venv/bin/python -m pytest -q "$@"
