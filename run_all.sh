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
# LADE_SKIP_SETUP=1 skips set-up (for callers that ran it, e.g. the tests); LADE_VENV: the environment (default .venv).
set -euo pipefail
cd "$(dirname "$0")"
export LADE_CACHE="${LADE_CACHE:-$PWD/.cache}"  # models and latency profiles in the checkout (lade's default: ~/.cache/lade)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the lab wing for the kernels (set-up's .pth does it too)

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
spec=data/experiments/embedded-cpu.yaml plan=0 options=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --params) spec="$2"; shift 2 ;;
        --plan) plan=1; shift ;;
        --quick) options+=(--quick); shift ;;
        --model|--device|--dtype|--only) options+=("$1" "$2"); shift 2 ;;
        -h|--help) usage ;;
        *) echo "unknown option: $1" >&2; usage 2 ;;
    esac
done
venv="${LADE_VENV:-.venv}"
[[ "${LADE_SKIP_SETUP:-0}" == 1 ]] || scripts/setup.sh --no-model

if [[ $plan == 1 ]]; then
    exec "$venv/bin/python" -m lab.pipeline.plan show "$spec" "${options[@]}"
fi

# the spec resolved per notebook; stops here (exit 2 or 3, with the reason) on a bad spec or missing weights
mkdir -p build/notebooks figures
rm -f build/notebooks/*.params.yaml
listing="$("$venv/bin/python" -m lab.pipeline.plan prepare "$spec" --out build/notebooks "${options[@]}")"
mapfile -t notebooks <<< "$listing"

failed=() total=$SECONDS
: > build/notebooks/run_times.tsv  # notebook<TAB>seconds, as each ends (lab.pipeline.run_times records a default run's)
for i in "${!notebooks[@]}"; do
    name="${notebooks[$i]}" start=$SECONDS
    printf '[%d/%d] %s ... ' "$((i + 1))" "${#notebooks[@]}" "$name"
    if "$venv/bin/papermill" "notebooks/$name.ipynb" "build/notebooks/$name.ipynb" -k lade --cwd notebooks \
            -f "build/notebooks/$name.params.yaml" >"build/notebooks/$name.log" 2>&1; then
        echo "ok ($((SECONDS - start)) s)"
        printf '%s\t%d\n' "$name" "$((SECONDS - start))" >> build/notebooks/run_times.tsv
    else
        echo "FAILED ($((SECONDS - start)) s); last lines of build/notebooks/$name.log:"
        tail -15 "build/notebooks/$name.log" | sed 's/^/    /'
        failed+=("$name")
    fi
done

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
