#!/usr/bin/env bash
# Regenerate the figures of an experiment spec: set-up (scripts/setup.sh), then execute each notebook the spec names
# with papermill. Executed copies, logs and each notebook's resolved parameters go to build/notebooks/ (git-ignored);
# the notebooks write figures to figures/; the default run's executed copies replace notebooks/ (lab.pipeline.publish). Notebooks run with notebooks/ as working directory and the kernel "lade".
#   ./run_all.sh [--params SPEC] [--plan] [--quick] [--model NAME_OR_PATH] [--device cpu|cuda]
#                [--dtype float32|float16|bfloat16] [--only NAME[,NAME...]]
#   --params  an experiment spec, data/experiments/*.yaml (default: embedded-cpu.yaml, the default run); each notebook
#             gets its parameters from it (build/notebooks/NAME.params.yaml, passed with papermill -f), and
#             --model/--device/--dtype/--quick override them
#   --plan    print every notebook x model x dataset x method x dtype x device the spec would run, the weights it
#             needs and whether they are here, and the estimated time; run nothing (exit 3 if weights are missing)
# Exit: 0 done, 1 a notebook failed, 2 bad option or spec, 3 missing weights, 4 another run holds this checkout,
# 130/143 interrupted (SIGINT/SIGTERM). LADE_SKIP_SETUP=1 skips set-up; LADE_VENV: the environment (default .venv).
set -euo pipefail
cd "$(dirname "$0")"
export LADE_CACHE="${LADE_CACHE:-$PWD/.cache}"  # models and latency profiles in the checkout (lade's default: ~/.cache/lade)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the lab wing for the kernels (set-up's .pth does it too)

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
command_line="./run_all.sh$(printf ' %q' "$@")"
spec=data/experiments/embedded-cpu.yaml plan=0 options=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --params|--model|--device|--dtype|--only)
            if [[ $# -lt 2 || -z "$2" || "$2" == --* ]]; then
                echo "run_all.sh: $1 needs a value" >&2; usage 2 >&2
            fi
            if [[ $1 == --params ]]; then spec="$2"; else options+=("$1" "$2"); fi
            shift 2 ;;
        --plan) plan=1; shift ;;
        --quick) options+=(--quick); shift ;;
        -h|--help) usage ;;
        *) echo "unknown option: $1" >&2; usage 2 >&2 ;;
    esac
done
venv="${LADE_VENV:-.venv}"

if [[ $plan == 1 ]]; then  # writes nothing: may run beside a run
    [[ "${LADE_SKIP_SETUP:-0}" == 1 ]] || scripts/setup.sh --no-model
    exec "$venv/bin/python" -m lab.pipeline.plan show "$spec" "${options[@]}"
fi

# one run per checkout: the parameter files, the staged outputs and the published notebooks are this checkout's
# (the lock is held by this shell's file descriptor 9 and released when the run ends, however it ends)
mkdir -p build
exec 9>>build/run_all.lock
take_lock() {  # flock(1) of util-linux, else the same flock(2) through Python (macOS)
    if command -v flock >/dev/null; then flock -n 9
    else "${LADE_PYTHON:-python3}" -c 'import fcntl; fcntl.flock(9, fcntl.LOCK_EX | fcntl.LOCK_NB)' 2>/dev/null; fi
}
if ! take_lock; then
    echo "run_all.sh: another run holds this checkout ($(cat build/run_all.lock)); wait for it to end, stop it" \
         "(kill -INT <pid>), or run in another checkout (git worktree add)" >&2
    exit 4
fi
printf 'pid %d, %s, spec %s, started %s' "$$" "$command_line" "$spec" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    > build/run_all.lock

# Ctrl-C (SIGINT) or SIGTERM: stop the notebook now (papermill, and its kernel), publish nothing, exit 130/143
child=""
descendants() { local pid; for pid in $(pgrep -P "$1" 2>/dev/null); do echo "$pid"; descendants "$pid"; done; }
interrupted() {
    trap - INT TERM
    if [[ -n $child ]]; then
        local pids=("$child" $(descendants "$child")) _  # papermill, its kernel and whatever the kernel started
        kill -TERM "${pids[@]}" 2>/dev/null || true
        for _ in {1..50}; do kill -0 "$child" 2>/dev/null || break; sleep 0.1; done  # 5 s to end on its own
        kill -KILL "${pids[@]}" 2>/dev/null || true  # then at once: a kernel shutting down slowly publishes nothing
        wait "$child" 2>/dev/null || true
    fi
    echo "" >&2
    echo "run_all: interrupted ($1); nothing published: this run's outputs stay in build/run/" >&2
    exit "$2"
}
trap 'interrupted SIGINT 130' INT
trap 'interrupted SIGTERM 143' TERM

[[ "${LADE_SKIP_SETUP:-0}" == 1 ]] || scripts/setup.sh --no-model

# the spec resolved per notebook; stops here (exit 2 or 3, with the reason) on a bad spec or missing weights
mkdir -p build/notebooks
rm -f build/notebooks/*.params.yaml
listing="$("$venv/bin/python" -m lab.pipeline.plan prepare "$spec" --out build/notebooks "${options[@]}")"
mapfile -t notebooks <<< "$listing"

# the notebooks write into build/run/ (lab.pipeline.staging); what the notebooks that succeeded wrote is copied to the
# results and figures folders once every notebook has ended
results_out="${LADE_RESULTS_DIR:-$PWD/data/results}" figures_out="${LADE_FIGURES_DIR:-$PWD/figures}"
"$venv/bin/python" -m lab.pipeline.staging begin build/run "$results_out" "$figures_out"
export LADE_COMMAND="$command_line"  # each results file's provenance records the command and the notebook

failed=() total=$SECONDS
: > build/notebooks/run_times.tsv  # notebook<TAB>seconds, as each ends (lab.pipeline.run_times records a default run's)
for i in "${!notebooks[@]}"; do
    name="${notebooks[$i]}" start=$SECONDS
    printf '[%d/%d] %s ... ' "$((i + 1))" "${#notebooks[@]}" "$name"
    LADE_RESULTS_DIR="$PWD/build/run/results" LADE_FIGURES_DIR="$PWD/build/run/figures" \
        LADE_NOTEBOOK="notebooks/$name.ipynb" \
        "$venv/bin/papermill" "notebooks/$name.ipynb" "build/notebooks/$name.ipynb" -k lade --cwd notebooks \
            -f "build/notebooks/$name.params.yaml" >"build/notebooks/$name.log" 2>&1 &
    child=$!
    status=0
    wait "$child" || status=$?
    child=""
    if [[ $status == 0 ]]; then
        echo "ok ($((SECONDS - start)) s)"
        printf '%s\t%d\n' "$name" "$((SECONDS - start))" >> build/notebooks/run_times.tsv
        "$venv/bin/python" -m lab.pipeline.staging notebook build/run "$name" ok
    else
        echo "FAILED ($((SECONDS - start)) s); last lines of build/notebooks/$name.log:"
        tail -15 "build/notebooks/$name.log" | sed 's/^/    /'
        failed+=("$name")
        "$venv/bin/python" -m lab.pipeline.staging notebook build/run "$name" failed
    fi
done
trap '' INT TERM  # from here on the run finishes what it publishes
"$venv/bin/python" -m lab.pipeline.staging finish build/run

echo "run_all: ${#notebooks[@]} notebook(s) of $(basename "$spec") in $((SECONDS - total)) s; figures in figures/"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "run_all: FAILED notebook(s): ${failed[*]}" >&2
    exit 1
fi
# a full run into data/results/ refreshes the README's results table from what it wrote (lab.pipeline.readme); the default run
# (no --params, --model, --device, --dtype) also commits its executed notebooks, outputs kept (lab.pipeline.publish), and, run
# whole (no --only), its measured time per notebook and end to end, set-up included (lab.pipeline.run_times: the README's line)
if [[ " ${options[*]} " != *" --quick "* && -z "${LADE_RESULTS_DIR:-}" ]]; then
    default=0
    if [[ $spec == data/experiments/embedded-cpu.yaml && " ${options[*]} " != *" --model "* &&
          " ${options[*]} " != *" --device "* && " ${options[*]} " != *" --dtype "* ]]; then
        default=1
    fi
    if [[ $default == 1 && " ${options[*]} " != *" --only "* ]]; then
        "$venv/bin/python" -m lab.pipeline.run_times default build/notebooks/run_times.tsv --total "$SECONDS" --spec "$spec"
    fi
    "$venv/bin/python" -m lab.pipeline.readme
    if [[ $default == 1 ]]; then
        "$venv/bin/python" -m lab.pipeline.publish build/notebooks "${notebooks[@]}"
        echo "run_all: executed notebooks written to notebooks/ (outputs of this run)"
    fi
fi
