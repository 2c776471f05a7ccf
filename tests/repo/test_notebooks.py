"""Every committed notebook is clean and stamped with the run that wrote the committed results, and re-plots under
papermill from those results (recompute=False: no model runs) into non-empty PNG + PDF figures; the results match
their schema. Executing every notebook (recompute=True, quick mode) is CI's `./run_all.sh --quick`; that re-plotting
the same results gives byte-identical figures is tests/lab/test_figures.py.

Results are copied to, and figures written to, a temporary folder (LADE_RESULTS_DIR / LADE_FIGURES_DIR), never the
repo's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

papermill = pytest.importorskip("papermill")

from lab.harness.paths import REPO  # noqa: E402
from lab.harness.results import load_results  # noqa: E402
from lab.pipeline.manifest import NOTEBOOKS as MANIFEST  # noqa: E402
from lab.pipeline.manifest import RESULT_SCHEMAS  # noqa: E402
from lab.pipeline.publish import STAMP, results_commit  # noqa: E402
from lab.pipeline.specs import DEFAULT_SPEC, load_spec  # noqa: E402

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
FIGURES = {name: nb.figures for name, nb in MANIFEST.items()}  # notebook -> figures it must write
RESULTS = {name: list(nb.results) for name, nb in MANIFEST.items()}  # notebook -> results files it must write
DEFAULT_RUN = load_spec(DEFAULT_SPEC).notebooks  # notebooks committed with their outputs


def test_every_notebook_is_covered_and_clean():
    """The manifest (lab.pipeline.manifest) names every notebook; a committed notebook carries a tagged parameters cell
    of
    literals that papermill can override (quick, the model or a spec's models, device, dtype, attention, prompt
    format, recompute), no logic in its cells, and the outputs of the default run that wrote the committed results
    (lab.pipeline.publish: stamped with their commit, no timestamps, paths or progress bars); a notebook outside the
    default
    run may have no outputs instead."""
    assert sorted(p.stem for p in NOTEBOOKS) == sorted(FIGURES) == sorted(RESULTS)
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        code = [c for c in cells if c["cell_type"] == "code"]
        assert "parameters" in code[0]["metadata"].get("tags", []), path.name
        params = "".join(code[0]["source"])
        for name in ("quick = False", "model = ", "models = []", "device = ", "dtype = ", "attn_implementation = ",
                     "prompt_format = ", "recompute = True"):
            assert name in params, f"{path.name}: parameters cell lacks {name!r}"
        notebook = json.loads(path.read_text())
        stamp = notebook["metadata"].get(STAMP)
        assert stamp is not None or path.stem not in DEFAULT_RUN, f"{path.name}: committed without its outputs"
        if stamp is not None:
            assert stamp == {"results_commit": results_commit(path.stem)[0], "results_dirty": False}, path.name
            assert "papermill" not in notebook["metadata"] and str(REPO) not in path.read_text(), path.name
        for cell in code:
            if stamp is None:
                assert not cell.get("outputs") and cell.get("execution_count") is None, f"{path.name} has outputs"
            source = "".join(cell["source"])
            assert "\ndef " not in f"\n{source}" and "\nclass " not in f"\n{source}", f"{path.name}: logic in a cell"


@pytest.fixture(scope="module")
def replotted(tmp_path_factory):
    """Every notebook re-plotted from a copy of the committed results (recompute=False: no model runs), two at a
    time on one torch thread each; figures go to a temporary folder. Executing the notebooks (recompute=True) is
    CI's quick run, `./run_all.sh --quick`, which runs right after this suite."""
    out = tmp_path_factory.mktemp("notebooks")
    shutil.copytree(REPO / "data" / "results", out / "results", ignore=shutil.ignore_patterns("quick", "manual"))
    kernel = _kernel()
    env = dict(os.environ, LADE_RESULTS_DIR=str(out / "results"), LADE_FIGURES_DIR=str(out / "figures"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(_execute, path, out / path.name, kernel, env) for path in NOTEBOOKS]:
            future.result()
    return out


SUFFIXES = (".png", ".pdf")


def _execute(path: Path, output: Path, kernel: str, env: dict[str, str]) -> None:
    """papermill in its own process (as run_all.sh runs it), so two notebooks can run at once."""
    parameters = {"recompute": False, "threads": 1}
    done = subprocess.run([sys.executable, "-m", "papermill", str(path), str(output), "-k", kernel, "--cwd",
                           str(REPO / "notebooks"), "-y", yaml.safe_dump(parameters), "--no-progress-bar"],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise AssertionError(f"{path.name} failed (papermill exit {done.returncode}):\n{done.stderr[-4000:]}")


def _kernel() -> str:
    """The project's kernel `lade` if registered, else a kernel for this interpreter."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if "lade" in specs:
        return "lade"
    pytest.skip(f"Jupyter kernel 'lade' is not registered for {sys.executable} (./run_all.sh registers it)")


def stderr_outputs(notebook: Path) -> list[str]:
    """The text of every stderr stream an executed notebook shows (warnings, progress bars)."""
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(o["text"]) for c in cells for o in c.get("outputs", []) if o.get("name") == "stderr"]


def test_a_notebook_run_by_papermill_shows_no_stderr_and_whole_tables(tmp_path):
    """The lab's progress bars and imports write nothing to stderr under papermill (no bars, no tqdm warning about
    missing widgets), and after the notebooks' set-up (figures.setup_style) a wide table is shown whole: every
    column, unwrapped."""
    source = ("import pandas as pd\n"
              "from lab.studies import experiments, figures as fg\n"
              "from lab.harness.timing import progress_bar\n"
              "fg.setup_style()\n"
              "for _ in progress_bar(range(3), desc='bench'):\n"
              "    pass\n"
              "pd.DataFrame({f'a_long_column_name_{i}': [1 / 3, 2 / 3] for i in range(24)})")
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {}, "outputs": [],
                           "source": source}],
                "metadata": {"kernelspec": {"name": "lade", "display_name": "lade", "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "small.ipynb").write_text(json.dumps(notebook))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "papermill", str(tmp_path / "small.ipynb"),
                           str(tmp_path / "out.ipynb"), "-k", _kernel(), "--cwd", str(REPO / "notebooks"),
                           "--no-progress-bar"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert stderr_outputs(tmp_path / "out.ipynb") == []
    [output] = json.loads((tmp_path / "out.ipynb").read_text())["cells"][0]["outputs"]
    table = "".join(output["data"]["text/plain"])
    assert "..." not in table and "\\" not in table and len(table.splitlines()) == 3  # header and two rows
    assert "a_long_column_name_23" in table and "0.333" in table and "0.3333" not in table


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_replots_from_its_committed_results(replotted, name):
    """Its figures are written, non-empty, from the committed results, which re-plotting leaves as they were; those
    results match their schema and carry provenance; the executed notebook shows nothing on stderr."""
    assert stderr_outputs(replotted / f"{name}.ipynb") == [], name
    for figure in FIGURES[name]:
        for suffix in SUFFIXES:
            path = replotted / "figures" / f"{figure}{suffix}"
            assert path.exists() and path.stat().st_size > 1000, f"{path.name} missing or empty"
    for result in RESULTS[name]:
        committed = REPO / "data" / "results" / result
        assert (replotted / "results" / result).read_bytes() == committed.read_bytes(), f"re-plotting wrote {result}"
        df = load_results(committed)
        assert len(df) > 0, result
        missing = set(RESULT_SCHEMAS[result]) - set(df.columns)
        assert not missing, f"{result} lacks columns {missing}"
        prov = df.attrs.get("provenance", {})
        assert prov.get("packages", {}).get("torch") and prov.get("device"), f"{result}: no provenance"
        assert prov.get("lock_sha256"), f"{result}: the environment's lock digest is not recorded"
