#!/usr/bin/env bash
# Time the two checks CI runs, ./run_tests.sh then ./run_all.sh --quick, one after the other with set-up done first,
# and record them in data/results/check_times.csv (lab.pipeline.run_times), which the README's timing block is generated from
# (lab.pipeline.readme). Run it at a clean commit on an otherwise idle machine; nothing is recorded if either check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export LADE_CACHE="${LADE_CACHE:-$PWD/.cache}"
scripts/setup.sh
mkdir -p build/checks
start=$SECONDS
./run_tests.sh > build/checks/tests.log 2>&1 || { tail -20 build/checks/tests.log; exit 1; }
tests=$((SECONDS - start)) start=$SECONDS
LADE_SKIP_SETUP=1 ./run_all.sh --quick > build/checks/quick.log 2>&1 || { tail -20 build/checks/quick.log; exit 1; }
quick=$((SECONDS - start))
.venv/bin/python -m lab.pipeline.run_times checks --tests "$tests" --tests-log build/checks/tests.log --quick "$quick"
.venv/bin/python -m lab.pipeline.readme
