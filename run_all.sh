#!/usr/bin/env bash
# Regenerate every figure: set-up (scripts/setup.sh), then execute each notebooks/*.ipynb with papermill.
# Executed copies and logs go to build/notebooks/ (git-ignored); the notebooks write figures to figures/.
# Notebooks run with notebooks/ as working directory and the Jupyter kernel "lade" (this .venv).
#   ./run_all.sh [--quick] [--model NAME_OR_PATH] [--device cpu|cuda] [--dtype float32|float16|bfloat16]
#                [--only NAME[,NAME...]]
set -euo pipefail
cd "$(dirname "$0")"

usage() { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
params=() only="" model=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) params+=(-p quick True); shift ;;
        --model) model="$2"; params+=(-p model "$2"); shift 2 ;;
        --device) params+=(-p device "$2"); shift 2 ;;
        --dtype) params+=(-p dtype "$2"); shift 2 ;;
        --only) only="$2"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "unknown option: $1" >&2; usage 2 ;;
    esac
done

case "${model,,}" in
    ""|embedded|smollm2) scripts/setup.sh ;;
    *) scripts/setup.sh --no-model ;;
esac

shopt -s nullglob
notebooks=()
for nb in notebooks/*.ipynb; do
    name="$(basename "$nb" .ipynb)"
    if [[ -z "$only" || ",$only," == *",$name,"* || ",$only," == *",$name.ipynb,"* ]]; then
        notebooks+=("$nb")
    fi
done
if [[ ${#notebooks[@]} == 0 ]]; then
    if [[ -n "$only" ]]; then echo "no notebook matches --only $only" >&2; exit 2; fi
    echo "run_all: no notebooks exist yet (notebooks/*.ipynb); nothing to execute"
    exit 0
fi

mkdir -p build/notebooks figures
failed=() total=$SECONDS
for i in "${!notebooks[@]}"; do
    nb="${notebooks[$i]}" name="$(basename "${notebooks[$i]}" .ipynb)" start=$SECONDS
    printf '[%d/%d] %s ... ' "$((i + 1))" "${#notebooks[@]}" "$name"
    if .venv/bin/papermill "$nb" "build/notebooks/$name.ipynb" -k lade --cwd notebooks "${params[@]}" \
            >"build/notebooks/$name.log" 2>&1; then
        echo "ok ($((SECONDS - start)) s)"
    else
        echo "FAILED ($((SECONDS - start)) s); last lines of build/notebooks/$name.log:"
        tail -15 "build/notebooks/$name.log" | sed 's/^/    /'
        failed+=("$name")
    fi
done

echo "run_all: ${#notebooks[@]} notebook(s) in $((SECONDS - total)) s; figures in figures/"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "run_all: FAILED notebook(s): ${failed[*]}" >&2
    exit 1
fi
