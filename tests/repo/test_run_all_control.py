"""./run_all.sh cannot run the wrong thing: one run per checkout (a second is refused, naming the first), Ctrl-C and
SIGTERM stop a run at once and publish nothing from it, a run that ends copies what its notebooks wrote into the
results and figures folders with the command and notebook in each results file's provenance, and bad command lines
are refused before any work.

The runs use a sandbox checkout (a copy of lab/ and run_all.sh; the repo's notebooks, data and lade linked in) whose
spec runs one small notebook that writes a results file, then a heartbeat file every 0.1 s for `seconds`, then a
figure: the heartbeat shows whether its kernel still runs after the interrupt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = "zz_sleep"
CELLS = [
    ("parameters", 'quick = False\nmodel = "embedded"\nmodels = []\ndevice = "cpu"\ndtype = "float32"\nseconds = 0.0'),
    ("", "import os, time\n"
         "import pandas as pd\n"
         "from lab.harness.paths import figures_dir, results_dir\n"
         "from lab.harness.provenance import provenance\n"
         "from lab.harness.results import save_results\n"
         "rows = pd.DataFrame({'x': [1]})\n"
         "rows.attrs['provenance'] = provenance(seconds=seconds)\n"
         "save_results(rows, results_dir(quick) / 'sleep.jsonl')\n"
         "end = time.time() + seconds\n"
         "while time.time() < end:\n"
         "    (results_dir(quick) / 'heartbeat.txt').write_text(str(time.time()))\n"
         "    time.sleep(0.1)\n"
         "(figures_dir(quick) / 'zz_sleep.png').write_bytes(b'png')"),
]


def _notebook() -> dict:
    cells = [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {"tags": [tag] if tag else []},
              "outputs": [], "source": source} for i, (tag, source) in enumerate(CELLS)]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "lade", "display_name": "lade", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture
def sandbox(tmp_path) -> Path:
    """A checkout to run run_all.sh in: its own lab/ (so its results and figures folders are its own), the repo's
    notebooks plus zz_sleep, and data/experiments/sleep.yaml (120 s) and brief.yaml (0 s) running zz_sleep on a model
    folder that is present."""
    pytest.importorskip("papermill")
    from jupyter_client.kernelspec import KernelSpecManager

    if "lade" not in KernelSpecManager().find_kernel_specs():
        pytest.skip(f"Jupyter kernel 'lade' is not registered for {sys.executable} (./run_all.sh registers it)")
    box = tmp_path / "checkout"
    shutil.copytree(REPO / "lab", box / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "run_all.sh", box / "run_all.sh")
    (box / "lade").symlink_to(REPO / "lade")
    (box / "notebooks").mkdir()
    for path in (REPO / "notebooks").glob("*.ipynb"):
        (box / "notebooks" / path.name).symlink_to(path)
    (box / "notebooks" / f"{NOTEBOOK}.ipynb").write_text(json.dumps(_notebook()))
    (box / "data" / "results").mkdir(parents=True)
    for name in ("prompts", "published", "gpus.csv"):
        (box / "data" / name).symlink_to(REPO / "data" / name)
    shutil.copytree(REPO / "data" / "experiments", box / "data" / "experiments")
    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    spec = {"about": {"title": "t", "reproduces": "r", "hardware": "h"}, "notebooks": [NOTEBOOK],
            "models": [{"name": "tiny", "path": str(model)}]}
    for name, seconds in (("sleep", 120.0), ("brief", 0.0)):
        (box / "data" / "experiments" / f"{name}.yaml").write_text(yaml.safe_dump(spec | {"seconds": seconds}))
    return box


def _env(box: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LADE_RESULTS_DIR", "LADE_FIGURES_DIR", "LADE_COMMAND")}
    return env | {"LADE_SKIP_SETUP": "1", "LADE_VENV": sys.prefix, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                  "PYTHONPATH": os.pathsep.join([str(box), os.environ.get("PYTHONPATH", "")])}


def start(box: Path, *args: str) -> subprocess.Popen:
    """run_all.sh in its own process group, in the background, with SIGINT and SIGTERM at their defaults as a terminal
    runs it (a signal this test process ignores, as a library loaded earlier in the suite may make it, would be ignored
    by the run too: a shell cannot trap a signal ignored when it starts)."""
    return subprocess.Popen([str(box / "run_all.sh"), *args], cwd=box, env=_env(box), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_default_signals)


def _default_signals() -> None:
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def run(box: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(box / "run_all.sh"), *args], cwd=box, env=_env(box), capture_output=True, text=True,
                          timeout=timeout)


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 120) -> None:
    end = time.time() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"run ended (rc {process.returncode}) before {path.name}:\n{process.communicate()}")
        assert time.time() < end, f"{path} not written in {timeout} s"
        time.sleep(0.2)


def stopped_at_once(process: subprocess.Popen, box: Path, timeout: float = 30) -> tuple[str, str]:
    """The run ended within `timeout` s, and its kernel with it: the heartbeat stopped; then nothing of its session
    holds its output. (Alone it ends within a few seconds; 30 leaves room for a 2-core machine busy with another job,
    where 10 s was once exceeded.) A failure lists what of the run's session was still there."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"run_all.sh still running {timeout} s after the signal:\n{_session(process)}") from None
    heartbeat = box / "build" / "run" / "results" / "quick" / "heartbeat.txt"
    before = heartbeat.read_text()
    time.sleep(1.5)  # a kernel left running would write it again within 0.1 s
    assert heartbeat.read_text() == before, "the notebook's kernel kept running after the run stopped"
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        held = _session(process)
        raise AssertionError(f"run_all.sh ended, but its session still holds its output:\n{held}") from None


def _session(process: subprocess.Popen) -> str:
    """The processes of the run's session (it was started as its leader), for a failure message."""
    listing = subprocess.run(["ps", "-o", "pid,ppid,stat,etime,args", "-s", str(process.pid)], capture_output=True,
                             text=True)
    return listing.stdout or listing.stderr


def published_nothing(box: Path) -> None:
    """No results, figures, run times, README or notebooks were written outside build/run."""
    assert not any((box / "data" / "results").rglob("*.*")), list((box / "data" / "results").rglob("*"))
    assert not (box / "figures").exists() or not any((box / "figures").rglob("*.*"))
    assert (box / "build" / "notebooks" / "run_times.tsv").read_text() == ""
    assert not (box / "README.md").exists()


def test_a_second_run_is_refused_a_plan_is_not_and_ctrl_c_stops_the_first_publishing_nothing(sandbox):
    first = start(sandbox, "--params", "data/experiments/sleep.yaml", "--quick")
    try:
        wait_for(sandbox / "build" / "run" / "results" / "quick" / "heartbeat.txt", first)
        second = run(sandbox, "--params", "data/experiments/embedded-cpu.yaml", "--quick", timeout=60)
        assert second.returncode == 4, second.stderr
        assert "another run holds this checkout" in second.stderr
        assert f"pid {first.pid}" in second.stderr and "spec data/experiments/sleep.yaml" in second.stderr
        assert "started 20" in second.stderr and "[1/" not in second.stdout
        plan = run(sandbox, "--plan", "--only", "01_mt_bench_speedup", timeout=120)
        assert plan.returncode == 0, plan.stderr
        assert "estimated total" in plan.stdout
        os.killpg(first.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole foreground process group
        out, err = stopped_at_once(first, sandbox)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 130, out + err
    assert "interrupted (SIGINT)" in err and "nothing published" in err and " ok (" not in out
    published_nothing(sandbox)


def test_sigterm_stops_a_run_publishing_nothing_and_the_next_run_publishes_its_outputs(sandbox):
    first = start(sandbox, "--params", "data/experiments/sleep.yaml", "--quick")
    try:
        wait_for(sandbox / "build" / "run" / "results" / "quick" / "heartbeat.txt", first)
        first.send_signal(signal.SIGTERM)  # to run_all.sh alone, as `kill PID` sends it
        out, err = stopped_at_once(first, sandbox)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 143, out + err
    published_nothing(sandbox)
    # the lock went with the run: the next one runs, and what it wrote is copied out when it ends
    done = run(sandbox, "--params", "data/experiments/brief.yaml", "--quick")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"[1/1] {NOTEBOOK} ... ok" in done.stdout
    assert (sandbox / "figures" / "quick" / "zz_sleep.png").read_bytes() == b"png"
    from lab.harness.results import load_results

    prov = load_results(sandbox / "data" / "results" / "quick" / "sleep.jsonl").attrs["provenance"]
    assert prov["command"] == "./run_all.sh --params data/experiments/brief.yaml --quick"
    assert prov["notebook"] == f"notebooks/{NOTEBOOK}.ipynb"



@pytest.mark.parametrize("args, message", [
    (["--params"], "--params needs a value"),
    (["--only"], "--only needs a value"),
    (["--model", "--quick"], "--model needs a value"),
    (["--device", ""], "--device needs a value"),
    (["--frobnicate"], "unknown option: --frobnicate"),
])
def test_an_option_without_its_value_is_a_usage_error(args, message):
    done = subprocess.run([str(REPO / "run_all.sh"), *args], cwd=REPO, env=_env(REPO), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr and "unbound variable" not in done.stderr
    assert "--params  an experiment spec" in done.stderr  # the usage follows


def test_a_params_path_that_does_not_exist_is_refused():
    """Not replaced by the spec of the same name in data/experiments/ (a bare name is looked for there)."""
    done = subprocess.run([str(REPO / "run_all.sh"), "--plan", "--params", "nowhere/embedded-cpu.yaml"], cwd=REPO,
                          env=_env(REPO), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no spec file nowhere/embedded-cpu.yaml" in done.stderr and "embedded-cpu.yaml" in done.stderr
    assert not done.stdout
