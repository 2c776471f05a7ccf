"""Executed notebooks, committed: after a full default run, each executed copy (build/notebooks/NAME.ipynb) replaces
its source in notebooks/, outputs kept, with what changes from run to run without changing what it shows removed
(papermill's and the kernel's timestamps and durations, its input and output paths, progress bars, the checkout's
absolute path; the staged folders it ran on, lab.pipeline.staging, named as the real ones), and stamped with the
commit of the results it shows, so a reader opening it in Jupyter sees the run that produced the committed results
and a test can check that they belong together.

    python -m lab.pipeline.publish build/notebooks NAME [NAME ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lab.harness.paths import REPO, results_dir
from lab.harness.results import load_results
from lab.pipeline.manifest import NOTEBOOKS
from lab.pipeline.staging import unstaged

STAMP = "lade"  # notebook metadata key of the stamp: {"results_commit": ..., "results_dirty": ...}


def results_commit(name: str) -> tuple[str, bool]:
    """(git commit, dirty tree) of the results files notebook `name` wrote; a ValueError when they disagree."""
    stamps = set()
    for file in NOTEBOOKS[name].results:
        prov = load_results(results_dir() / file).attrs.get("provenance", {})
        stamps.add((prov.get("git_commit") or "unknown", bool(prov.get("git_dirty"))))
    if len(stamps) != 1:
        raise ValueError(f"{name}: its results files come from different commits or trees: {sorted(stamps)}")
    return stamps.pop()


def clean(notebook: dict[str, Any], repo: str) -> dict[str, Any]:
    """`notebook` (nbformat JSON) without timestamps, durations, paths of this machine or progress bars."""
    notebook["metadata"].pop("papermill", None)
    for cell in notebook["cells"]:
        for key in ("papermill", "execution"):
            cell["metadata"].pop(key, None)
        outputs = []
        for output in cell.get("outputs", []):
            text = output.get("text")
            if output.get("name") == "stderr" and "\r" in "".join(text or ""):
                continue  # a progress bar (tqdm): its rates and times differ on every run
            text = unstaged(json.dumps(output), repo)  # run_all.sh ran it on staged folders (lab.pipeline.staging)
            outputs.append(json.loads(text.replace(repo.rstrip("/") + "/", "")))
        if "outputs" in cell:
            cell["outputs"] = outputs
    return notebook


def publish(executed_dir: Path, names: list[str], target_dir: Path = REPO / "notebooks", repo: Path = REPO) -> None:
    """Each executed notebook of `names` cleaned, stamped with its results' commit, written over its source."""
    for name in names:
        notebook = clean(json.loads((executed_dir / f"{name}.ipynb").read_text()), str(repo))
        commit, dirty = results_commit(name)
        notebook["metadata"][STAMP] = {"results_commit": commit, "results_dirty": dirty}
        (target_dir / f"{name}.ipynb").write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.pipeline.publish", description=__doc__.split("\n")[0])
    parser.add_argument("executed_dir", type=Path)
    parser.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    publish(args.executed_dir, args.names)


if __name__ == "__main__":
    main()
