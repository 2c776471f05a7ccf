"""Provenance names what wrote a results file: the command (run_all.sh's command line and the notebook it ran, else
the process's own argv) and the version of the lade that ran (lade.__version__, which an editable install's
metadata may lag)."""

import json
import shlex
import subprocess
import sys

import lade
from lab.harness import provenance as pv


def test_provenance_records_the_installed_lade_and_the_command(monkeypatch):
    monkeypatch.delenv("LADE_COMMAND", raising=False)
    monkeypatch.delenv("LADE_NOTEBOOK", raising=False)
    prov = pv.provenance()
    assert prov["packages"]["lade"] == lade.__version__ and prov["packages"]["torch"]
    assert (prov["command"], prov["notebook"]) == (shlex.join(sys.orig_argv), None)
    monkeypatch.setenv("LADE_COMMAND", "./run_all.sh --only 06_ablation")  # as run_all.sh exports them
    monkeypatch.setenv("LADE_NOTEBOOK", "notebooks/06_ablation.ipynb")
    prov = pv.provenance()
    assert (prov["command"], prov["notebook"]) == ("./run_all.sh --only 06_ablation", "notebooks/06_ablation.ipynb")


def test_a_script_records_its_own_command_line(tmp_path):
    """`python -m MODULE ARGS` (how lab's experiment scripts run) is recorded as invoked, arguments included."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pv.REPO)}
    script = "import json, lab.harness.provenance as p; print(json.dumps(p.command()))"
    done = subprocess.run([sys.executable, "-c", script,
                           "--batch-sizes", "2,4"], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=True)
    argv, notebook = json.loads(done.stdout)
    assert argv.startswith(shlex.quote(sys.executable) + " -c ") and argv.endswith(" --batch-sizes 2,4")
    assert notebook is None


def test_lookahead_parallelism_results_have_a_provenance_sidecar(tmp_path, monkeypatch):
    """lab.studies.parallel writes its rows (each carrying the provenance, as notebook 03 reads them) and the same
    record beside them as every results file has it, so lab.pipeline.cite can cite the file."""
    from lab.pipeline import cite
    from lab.studies import parallel

    monkeypatch.setattr(parallel, "_launch", lambda ranks, *args: {"ranks": ranks, "output_digest": "d"})
    out = tmp_path / "distributed_scaling.jsonl"
    rows = parallel.compression_vs_ranks(ranks=(1, 2), out=out)
    assert cite.read_provenance(out) == rows[0]["provenance"]
    assert cite.environment(cite.read_provenance(out))["lade"] == lade.__version__
