"""A run's outputs, staged until the run ends, so that an interrupted run publishes nothing.

run_all.sh points LADE_RESULTS_DIR and LADE_FIGURES_DIR at STAGE/results and STAGE/figures (STAGE: build/run):
`begin` copies the real results folder there (the notebooks read earlier results: recompute=False, notebook 09
reads 04's) and starts an empty figures folder; after each notebook, `notebook` notes the files it wrote (new, or
changed in size or modification time) and whether it succeeded; `finish`, once every notebook has ended, copies the
files of the notebooks that succeeded into the real folders (each replaced whole, never half-written). A run stopped
before `finish` (Ctrl-C, SIGTERM) leaves its outputs in STAGE only, which the next run clears.

    python -m lab.pipeline.staging begin STAGE RESULTS FIGURES
    python -m lab.pipeline.staging notebook STAGE NAME ok|failed
    python -m lab.pipeline.staging finish STAGE
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

KINDS = ("results", "figures")  # STAGE/<kind> stands for the real folder of that kind
RUN_STAGE = "build/run"  # run_all.sh's STAGE, in the checkout
DEFAULT_FOLDERS = {"results": "data/results", "figures": "figures"}  # the real folders of a default run


def unstaged(text: str, repo: str) -> str:
    """`text` (e.g. a notebook's output) with the staged folders' paths under `repo` named as the real folders of a
    default run."""
    for kind, folder in DEFAULT_FOLDERS.items():
        text = text.replace(f"{repo.rstrip('/')}/{RUN_STAGE}/{kind}/", f"{repo.rstrip('/')}/{folder}/")
    return text
STATE = "staging.json"  # in STAGE: the real folders, the last snapshot, the files kept and dropped per notebook


def snapshot(stage: Path) -> dict[str, list[int]]:
    """'<kind>/<path>' -> [size, mtime_ns] of every file under STAGE/results and STAGE/figures."""
    files = {}
    for kind in KINDS:
        for path in sorted((stage / kind).rglob("*")):
            if path.is_file():
                info = path.stat()
                files[str(path.relative_to(stage))] = [info.st_size, info.st_mtime_ns]
    return files


def _load(stage: Path) -> dict:
    return json.loads((stage / STATE).read_text())


def _save(stage: Path, state: dict) -> None:
    (stage / STATE).write_text(json.dumps(state, indent=1))


def begin(stage: Path, results: Path, figures: Path) -> None:
    """A fresh STAGE: a copy of `results` (if any) and an empty figures folder."""
    for kind in KINDS:
        shutil.rmtree(stage / kind, ignore_errors=True)
    stage.mkdir(parents=True, exist_ok=True)
    if results.is_dir():
        shutil.copytree(results, stage / "results")
    for kind in KINDS:
        (stage / kind).mkdir(exist_ok=True)
    _save(stage, {"targets": {"results": str(results.resolve()), "figures": str(figures.resolve())},
                  "snapshot": snapshot(stage), "kept": {}, "dropped": {}})


def notebook(stage: Path, name: str, ok: bool) -> list[str]:
    """Note the files `name` wrote since the last snapshot, as kept (it succeeded) or dropped; returns them."""
    state, now = _load(stage), snapshot(stage)
    written = sorted(f for f, stamp in now.items() if state["snapshot"].get(f) != stamp)
    state["kept" if ok else "dropped"][name] = written
    state["snapshot"] = now
    _save(stage, state)
    return written


def finish(stage: Path) -> list[Path]:
    """Copy the files of the notebooks that succeeded into the real folders; returns where they went."""
    state = _load(stage)
    dropped = {f for files in state["dropped"].values() for f in files}
    written = []
    for file in sorted({f for files in state["kept"].values() for f in files} - dropped):
        kind, rest = file.split("/", 1)
        target = Path(state["targets"][kind]) / rest
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.staged")
        shutil.copy2(stage / file, partial)
        os.replace(partial, target)  # a reader sees the old file or the new one, never part of it
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.pipeline.staging", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["begin", "notebook", "finish"])
    parser.add_argument("stage", type=Path)
    parser.add_argument("args", nargs="*")
    args = parser.parse_args(argv)
    if args.command == "begin":
        results, figures = map(Path, args.args)
        begin(args.stage, results, figures)
    elif args.command == "notebook":
        name, status = args.args
        notebook(args.stage, name, status == "ok")
    else:
        written = finish(args.stage)
        state = _load(args.stage)
        print(f"run_all: {len(written)} results and figure file(s) written to {state['targets']['results']} and "
              f"{state['targets']['figures']}")
        if state["dropped"]:
            print(f"run_all: the files of failed notebook(s) {sorted(state['dropped'])} stay in {args.stage}",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
