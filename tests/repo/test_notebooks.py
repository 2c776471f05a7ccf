"""Every notebook executes under papermill in quick mode, writes non-empty PNG + PDF figures and results that
match their schema, and re-plots from those saved results with recompute=False (no model run) into byte-identical
figure files.

Results and figures go to a temporary folder (LADE_RESULTS_DIR / LADE_FIGURES_DIR), never to the repo's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

papermill = pytest.importorskip("papermill")

from lab.experiments import RESULT_SCHEMAS  # noqa: E402
from lab.manifest import NOTEBOOKS as MANIFEST  # noqa: E402
from lab.manifest import depends_on, run_order  # noqa: E402
from lab.paths import REPO  # noqa: E402
from lab.publish import STAMP, results_commit  # noqa: E402
from lab.results import load_results  # noqa: E402
from lab.specs import DEFAULT_SPEC, load_spec  # noqa: E402

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
FIGURES = {name: nb.figures for name, nb in MANIFEST.items()}  # notebook -> figures it must write
RESULTS = {name: list(nb.results) for name, nb in MANIFEST.items()}  # notebook -> results files it must write
DEPENDS_ON = {name: list(depends_on(name)) for name in MANIFEST if depends_on(name)}  # run after these
DEFAULT_RUN = load_spec(DEFAULT_SPEC).notebooks  # notebooks committed with their outputs
# beyond quick mode, to keep the suite short (CI's `./run_all.sh --quick` runs every Spec-Bench task)
SMALLER = {"07_spec_bench": {"categories": ["mt_bench", "math_reasoning"]}}
SLOWEST = ("03_scaling_law", "04_flops_vs_throughput")  # in quick mode: started first, so both workers end together


def test_every_notebook_is_covered_and_clean():
    """The manifest (lab.manifest) names every notebook; a committed notebook carries a tagged parameters cell of
    literals that papermill can override (quick, the model or a spec's models, device, dtype, attention, prompt
    format, recompute), no logic in its cells, and the outputs of the default run that wrote the committed results
    (lab.publish: stamped with their commit, no timestamps, paths or progress bars); a notebook outside the default
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
def executed(tmp_path_factory):
    """Run every notebook in quick mode (recompute=True), stamp its figures, then run it again re-plotting only
    (recompute=False); two notebooks at a time (each on one torch thread), the longest (SLOWEST) first, and a notebook
    that reads others' results (04) once their first runs are done."""
    out = tmp_path_factory.mktemp("notebooks")
    kernel = _kernel()
    env = dict(os.environ, LADE_RESULTS_DIR=str(out / "results"), LADE_FIGURES_DIR=str(out / "figures"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    by_name = {path.stem: path for path in NOTEBOOKS}
    names = run_order(sorted(by_name, key=lambda name: (name not in SLOWEST, name)))  # each after those it reads
    first_run_over = {name: threading.Event() for name in names}
    stamps = {}

    def run_twice(name: str) -> None:
        for needed in DEPENDS_ON.get(name, ()):  # submitted earlier, so running or done: never a deadlock
            first_run_over[needed].wait()
        try:
            _execute(by_name[name], out / f"{name}.ipynb", kernel, env)
        finally:
            first_run_over[name].set()
        stamps[name] = {f: {suffix: _stamp(out / "figures" / "quick" / f"{f}{suffix}") for suffix in SUFFIXES}
                        for f in FIGURES[name]}
        _execute(by_name[name], out / f"{name}.replot.ipynb", kernel, env, recompute=False)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for future in [pool.submit(run_twice, name) for name in names]:
            future.result()
    return out, stamps


SUFFIXES = (".png", ".pdf")


def _execute(path: Path, output: Path, kernel: str, env: dict[str, str], **parameters) -> None:
    """papermill in its own process (as run_all.sh runs it), so two notebooks can run at once."""
    parameters = {"quick": True, "threads": 1, **SMALLER.get(path.stem, {}), **parameters}
    done = subprocess.run([sys.executable, "-m", "papermill", str(path), str(output), "-k", kernel, "--cwd",
                           str(REPO / "notebooks"), "-y", yaml.safe_dump(parameters), "--no-progress-bar"],
                          env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise AssertionError(f"{path.name} failed (papermill exit {done.returncode}):\n{done.stderr[-4000:]}")


def _stamp(path: Path) -> tuple[int, bytes]:
    return path.stat().st_mtime_ns, path.read_bytes()


def _kernel() -> str:
    """The project's kernel `lade` if registered, else a kernel for this interpreter."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if "lade" in specs:
        return "lade"
    pytest.skip(f"Jupyter kernel 'lade' is not registered for {sys.executable} (./run_all.sh registers it)")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FIGURES))
def test_notebook_outputs(executed, name):
    out, stamps = executed
    for figure in FIGURES[name]:
        for suffix in SUFFIXES:
            path = out / "figures" / "quick" / f"{figure}{suffix}"
            assert path.exists() and path.stat().st_size > 1000, f"{path.name} missing or empty"
            first_time, first_bytes = stamps[name][figure][suffix]
            assert path.stat().st_mtime_ns > first_time, f"{path.name} was not re-plotted with recompute=False"
            assert path.read_bytes() == first_bytes, f"{path.name}: re-plotting the same results changed its bytes"
    for result in RESULTS[name]:
        path = out / "results" / "quick" / result
        df = load_results(path)
        assert len(df) > 0, result
        missing = set(RESULT_SCHEMAS[result]) - set(df.columns)
        assert not missing, f"{result} lacks columns {missing}"
        prov = df.attrs.get("provenance", {})
        assert prov.get("packages", {}).get("torch") and prov.get("device"), f"{result}: no provenance"
        assert prov.get("lock_sha256"), f"{result}: the environment's lock digest is not recorded"
