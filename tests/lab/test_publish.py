"""lab.pipeline.publish: an executed notebook is committed without what changes from run to run, stamped with its
results'
commit."""

import json

import pandas as pd
import pytest

from lab.harness.results import save_results
from lab.pipeline import publish


def _executed(repo: str) -> dict:
    timing = {"start_time": "2026-01-01T00:00:00", "end_time": "2026-01-01T00:00:01", "duration": 1.0}
    return {"metadata": {"kernelspec": {"name": "lade"}, "papermill": {"input_path": f"{repo}/notebooks/x.ipynb"}},
            "cells": [
                {"cell_type": "markdown", "metadata": {}, "source": ["# title"]},
                {"cell_type": "code", "execution_count": 1, "source": ["print(1)"],
                 "metadata": {"tags": ["parameters"], "papermill": timing, "execution": {"iopub.status.idle": "t"}},
                 "outputs": [{"output_type": "stream", "name": "stderr", "text": ["\r", "bench: 10%| 1/10 [00:05<]"]},
                             {"output_type": "stream", "name": "stderr", "text": ["a warning\n"]},
                             {"output_type": "stream", "name": "stdout", "text": [f"saved: {repo}/figures/a.png\n"]},
                             {"output_type": "stream", "name": "stdout",
                              "text": [f"saved: {repo}/build/run/figures/b.png {repo}/build/run/results/b.csv\n"]}]},
            ]}


def test_clean_drops_timings_paths_and_progress_bars_and_keeps_the_rest():
    """What a reader needs stays (outputs, warnings, tags); what differs between two runs of the same code on the
    same results goes (papermill and kernel timestamps, the checkout's path, progress bars, the staged folders
    run_all.sh ran it on), so a re-run that changes nothing leaves the committed notebook unchanged."""
    out = publish.clean(_executed("/home/me/lade"), "/home/me/lade")
    assert "papermill" not in out["metadata"] and out["metadata"]["kernelspec"] == {"name": "lade"}
    cell = out["cells"][1]
    assert cell["metadata"] == {"tags": ["parameters"]} and cell["execution_count"] == 1
    assert [o["text"] for o in cell["outputs"]] == [["a warning\n"], ["saved: figures/a.png\n"],
                                                   ["saved: figures/b.png data/results/b.csv\n"]]


def test_publish_stamps_the_results_commit(tmp_path, monkeypatch):
    """The stamp is the commit of the results the notebook wrote (the test of the committed notebooks compares it
    with the committed results); results of two commits behind one notebook are refused."""
    results, executed, target = tmp_path / "results", tmp_path / "build", tmp_path / "notebooks"
    for folder in (results, executed, target):
        folder.mkdir()
    monkeypatch.setenv("LADE_RESULTS_DIR", str(results))
    frame = pd.DataFrame({"a": [1]})
    frame.attrs["provenance"] = {"git_commit": "abc123", "git_dirty": False}
    save_results(frame, results / "ablation.jsonl")
    (executed / "06_ablation.ipynb").write_text(json.dumps(_executed(str(tmp_path))))
    publish.publish(executed, ["06_ablation"], target, tmp_path)
    stamp = json.loads((target / "06_ablation.ipynb").read_text())["metadata"][publish.STAMP]
    assert stamp == {"results_commit": "abc123", "results_dirty": False}
    frame.attrs["provenance"] = {"git_commit": "def456", "git_dirty": False}
    save_results(frame, results / "sampling.jsonl")
    save_results(frame.assign(b=1), results / "sampling_distribution.csv")
    frame.attrs["provenance"] = {"git_commit": "abc123", "git_dirty": False}
    save_results(frame.assign(b=1), results / "sampling_distribution.csv")  # notebook 05's other file: another commit
    save_results(frame.assign(c=1), results / "sampling_check.jsonl")
    (executed / "05_sampling.ipynb").write_text(json.dumps(_executed(str(tmp_path))))
    with pytest.raises(ValueError, match="different commits"):
        publish.publish(executed, ["05_sampling"], target, tmp_path)
