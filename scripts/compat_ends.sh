#!/usr/bin/env bash
# Both ends of pyproject's transformers range: tests/compat_check.py (lade == plain generate through every private
# transformers API lade.compat reaches) under the highest (requirements.lock's, .venv) and the lowest (a venv from
# requirements-compat.lock, scripts/compat_lock.py), which also runs a greedy and sampling equivalence slice (the
# whole suite runs under the highest). .ci/run runs this after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" LADE_CACHE="${LADE_CACHE:-$PWD/.cache}"
low=build/compat-low
stamp="$(sha256sum requirements-compat.lock | cut -d' ' -f1)"
if [[ "$(cat "$low/.compat-lock" 2>/dev/null)" != "$stamp" ]]; then  # a venv of this very lock, else made anew
    rm -rf "$low"
    .venv/bin/python -m venv "$low"
    # the CPU build of torch from the indexes pip is configured with, else from PyTorch's own (as scripts/setup.sh)
    "$low/bin/python" -m pip install -q --require-hashes -r requirements-compat.lock ||
        "$low/bin/python" -m pip install -q --require-hashes -r requirements-compat.lock \
            --extra-index-url https://download.pytorch.org/whl/cpu
    echo "$stamp" > "$low/.compat-lock"
fi
PYTHONPATH="$PWD:$PWD/tests" .venv/bin/python tests/compat_check.py
PYTHONPATH="$PWD:$PWD/tests" "$low/bin/python" tests/compat_check.py
PYTHONPATH="$PWD" "$low/bin/python" -m pytest -q -x -p no:cacheprovider tests/core/test_exactness.py \
    tests/core/test_sampling.py \
    -k "test_greedy_equals_plain_greedy or fixed_seed or sampling_limit_equals_greedy or equals_reference_on_arch"
