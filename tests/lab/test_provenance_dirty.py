"""Provenance's git_dirty: a change to the code counts, the runs' own outputs (results, figures) do not."""

import subprocess

from lab.harness import provenance as pv


def test_run_outputs_do_not_make_a_result_dirty(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    for folder in ("data/results", "figures", "lade"):
        (repo / folder).mkdir(parents=True)
    for path in ("data/results/a.jsonl", "figures/a.png", "lade/x.py"):
        (repo / path).write_text("0")

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(pv, "REPO", repo)
    assert pv.provenance()["git_dirty"] is False
    (repo / "data/results/a.jsonl").write_text("1")
    (repo / "figures/a.png").write_text("1")
    assert pv.provenance()["git_dirty"] is False
    (repo / "lade/x.py").write_text("1")
    assert pv.provenance()["git_dirty"] is True
