"""CITATION.cff names a release: the package's version, and (once written from a results file by
`python -m lab.pipeline.cite --update-citation`) a commit in this repository's history and the frozen environment
that results file recorded. `python -m lab.pipeline.cite RESULTS_FILE` prints a results file's environment."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import lade
from lab.pipeline import cite

REPO = Path(__file__).resolve().parents[2]
CFF = yaml.safe_load((REPO / "CITATION.cff").read_text())


def references(cff: dict) -> dict[str, str]:
    return {r["title"]: r.get("version") for r in cff["references"]}


def test_citation_version_is_the_package_version():
    """One version: lade.__version__, which pyproject.toml reads (setuptools dynamic) and CITATION.cff repeats."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lade.__version__"}
    assert "version" not in project["project"] and CFF["version"] == lade.__version__
    assert f"version = {{{lade.__version__}}}," in (REPO / "README.md").read_text()  # its BibTeX


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)


def test_citation_commit_and_environment_match_the_results_they_name():
    """A commit in CITATION.cff exists in this checkout's history and is the commit of the results file its environment
    block names, whose lock digest, Python, torch and transformers the citation repeats."""
    if not CFF.get("commit"):
        pytest.skip("CITATION.cff names no commit yet")
    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    assert git("merge-base", "--is-ancestor", CFF["commit"], "HEAD").returncode == 0, \
        f"commit {CFF['commit']} is not in this checkout's history"
    named = re.search(r"# >>> the frozen environment .*, from (\S+)", (REPO / "CITATION.cff").read_text())
    assert named, "CITATION.cff's environment block does not name its results file"
    env = cite.environment(cite.read_provenance(REPO / named.group(1)))
    assert (env["commit"], env["dirty"], env["date"]) == (CFF["commit"], False, str(CFF["date-released"]))
    assert env["lade"] in (None, lade.__version__)  # None: written before provenance recorded the lade version
    assert references(CFF) | {"Python": env["python"], "PyTorch": env["torch"],
                               "transformers": env["transformers"]} == references(CFF)
    assert CFF["identifiers"][0]["value"] == f"sha256:{env['lock_sha256']}"


def results_file(tmp_path: Path, **prov) -> Path:
    path = tmp_path / "run.jsonl"
    path.write_text('{"x": 1}\n')
    record = {"git_commit": "a" * 40, "git_dirty": False, "lock_file": "requirements.lock", "lock_sha256": "b" * 64,
              "python": "3.11.7", "packages": {"lade": lade.__version__, "torch": "2.13.0+cpu",
                                               "transformers": "5.24.0"},
              "device": "Some CPU (2 threads)", "timestamp": "2027-01-02T03:04:05+00:00", "command": "./run_all.sh"}
    Path(f"{path}.provenance.json").write_text(json.dumps({"provenance": record | prov}))
    return path


def test_update_citation_writes_commit_date_and_environment(tmp_path):
    """The generator rewrites date-released, commit and the environment block from a results file, keeps the rest,
    and the file stays valid YAML whose fields the consistency test reads; a dirty run or another lade is refused."""
    cff = tmp_path / "CITATION.cff"
    cff.write_text((REPO / "CITATION.cff").read_text())
    cite.update_citation(results_file(tmp_path), cff)
    written = yaml.safe_load(cff.read_text())
    assert (written["commit"], str(written["date-released"])) == ("a" * 40, "2027-01-02")
    assert references(written)["Python"] == "3.11.7" and references(written)["PyTorch"] == "2.13.0+cpu"
    assert written["identifiers"][0]["value"] == "sha256:" + "b" * 64
    assert {k: v for k, v in written.items() if k not in ("commit", "date-released", "references", "identifiers")} \
        == {k: v for k, v in CFF.items() if k not in ("commit", "date-released", "references", "identifiers")}
    assert [r["title"] for r in written["references"]] == [r["title"] for r in CFF["references"]]
    with pytest.raises(ValueError, match="dirty"):
        cite.update_citation(results_file(tmp_path, git_dirty=True), cff)
    with pytest.raises(ValueError, match="written by lade 0.0.1"):
        cite.update_citation(results_file(tmp_path, packages={"lade": "0.0.1"}), cff)


def test_cite_prints_the_environment_of_a_results_file(tmp_path, capsys):
    """BibTeX and plain text carry the version, commit, dirty flag, lock digest, Python, torch, transformers and
    device; a file without provenance gets a clear error, not a traceback."""
    assert cite.main([str(results_file(tmp_path, git_dirty=True))]) == 0
    out = capsys.readouterr().out
    assert "@software{lade_decoding_aaaaaaa," in out and "Plain text:" in out and "(dirty)" in out
    for value in (lade.__version__, "a" * 40, "b" * 64, "3.11.7", "2.13.0+cpu", "5.24.0", "Some CPU (2 threads)"):
        assert out.count(value) >= 3, value  # the fields, the BibTeX and the plain text
    missing = tmp_path / "orphan.jsonl"
    missing.write_text("")
    assert cite.main([str(missing)]) == 2
    assert "no provenance sidecar" in capsys.readouterr().err
