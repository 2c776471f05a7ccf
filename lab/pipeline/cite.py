"""The citation of the exact environment a results file came from, and the release's CITATION.cff written from it.

    python -m lab.pipeline.cite RESULTS_FILE                      # BibTeX and plain text for that file's environment
    python -m lab.pipeline.cite --update-citation RESULTS_FILE    # CITATION.cff's date, commit and environment

A results file's environment is what its provenance sidecar (`<file>.provenance.json`, lab.harness.provenance)
recorded: the lade version, git commit and dirty flag, the lock file and its sha256, Python, torch, transformers and
the device. The software's title and authors come from CITATION.cff, its version from `lade.__version__`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

import lade
from lab.harness.paths import REPO

CITATION = REPO / "CITATION.cff"
ENVIRONMENT_MARK = "  # >>> the frozen environment"  # CITATION.cff from this line on is written by update_citation
URLS = {"Python": "https://www.python.org", "PyTorch": "https://pytorch.org",
        "transformers": "https://github.com/huggingface/transformers"}


def read_provenance(results: str | Path) -> dict[str, Any]:
    """The provenance record of a results file (its `<file>.provenance.json`, or that sidecar itself); a clear error
    when there is none."""
    path = Path(results)
    sidecar = path if path.name.endswith(".provenance.json") else Path(f"{path}.provenance.json")
    if not sidecar.exists():
        raise FileNotFoundError(f"{path} has no provenance sidecar {sidecar.name}: cite a results file that a lab "
                                f"run wrote (data/results/...)")
    record = json.loads(sidecar.read_text())
    return record.get("provenance", record)


def environment(prov: dict[str, Any]) -> dict[str, Any]:
    """The fields that name a run's environment, from a provenance record (None where it recorded nothing)."""
    packages = prov.get("packages") or {}
    return {"lade": packages.get("lade"), "commit": prov.get("git_commit"), "dirty": prov.get("git_dirty"),
            "lock_file": prov.get("lock_file"), "lock_sha256": prov.get("lock_sha256"), "python": prov.get("python"),
            "torch": packages.get("torch"), "transformers": packages.get("transformers"),
            "device": prov.get("device"), "date": (prov.get("timestamp") or "")[:10] or None,
            "command": prov.get("command")}


def _software() -> dict[str, Any]:
    cff = yaml.safe_load(CITATION.read_text())
    return {"title": cff["title"], "author": " and ".join(a.get("name") or f"{a['family-names']}, {a['given-names']}"
                                                          for a in cff["authors"])}


def plain(env: dict[str, Any], results: str) -> str:
    """One paragraph naming the software release and the exact environment `results` came from."""
    software = _software()
    commit = env["commit"] or "unknown commit"
    dirty = " with uncommitted changes (dirty tree)" if env["dirty"] else ("" if env["dirty"] is False else
                                                                           " (cleanliness not recorded)")
    return (f"{software['author']}. {software['title']}, version {env['lade'] or 'not recorded'} "
            f"(Python package lade-decoding), commit {commit}{dirty}. Results {results} were produced on "
            f"{env['date'] or 'an unrecorded date'} in the environment {env['lock_file']} "
            f"(sha256 {env['lock_sha256']}): Python {env['python']}, torch {env['torch']}, transformers "
            f"{env['transformers']}, on {env['device']}.")


def bibtex(env: dict[str, Any], results: str) -> str:
    """A @software entry for the release and environment `results` came from."""
    software = _software()
    key = "lade_decoding" + (f"_{env['commit'][:7]}" if env["commit"] else "")
    note = (f"Python package lade-decoding; commit {env['commit'] or 'unknown'}{' (dirty)' if env['dirty'] else ''}; "
            f"environment {env['lock_file']} sha256 {env['lock_sha256']}, Python {env['python']}, torch "
            f"{env['torch']}, transformers {env['transformers']}; device {env['device']}; results {results}")
    fields = {"author": f"{{{software['author']}}}", "title": software["title"],
              "version": env["lade"] or "not recorded", "year": (env["date"] or "")[:4] or "unknown", "note": note}
    body = ",\n".join(f"  {name:<7} = {{{value}}}" for name, value in fields.items())
    return f"@software{{{key},\n{body}\n}}"


def citation(results: str | Path) -> str:
    """What `python -m lab.pipeline.cite RESULTS_FILE` prints: the environment's fields, BibTeX, plain text."""
    env = environment(read_provenance(results))
    shown = str(results)
    fields = "\n".join(f"  {name}: {value}" for name, value in env.items())
    return f"Environment of {shown}:\n{fields}\n\nBibTeX:\n{bibtex(env, shown)}\n\nPlain text:\n{plain(env, shown)}\n"


def _release_problem(env: dict[str, Any]) -> str | None:
    if not env["commit"]:
        return "it records no git commit"
    if env["dirty"] is not False:
        return "it was written from a dirty (or unknown) tree: rerun it from a clean commit"
    if env["lade"] not in (None, lade.__version__):
        return f"it was written by lade {env['lade']}, this release is {lade.__version__}"
    if not (env["lock_sha256"] and env["python"] and env["torch"] and env["transformers"]):
        return "its provenance lacks the lock digest, Python, torch or transformers"
    return None


def environment_block(env: dict[str, Any], results: str) -> str:
    """CITATION.cff's generated tail: the environment as references (Python, torch, transformers at their versions)
    and the lock's digest as an identifier."""
    def quoted(value: Any) -> str:
        return json.dumps(str(value))

    lines = [f"{ENVIRONMENT_MARK} of the release's results, from {results}",
             "  # (written by `python -m lab.pipeline.cite --update-citation RESULTS_FILE`, as are date-released, "
             "commit)"]
    for title, version in (("Python", env["python"]), ("PyTorch", env["torch"]),
                           ("transformers", env["transformers"])):
        lines += ["  - type: software", f"    title: {quoted(title)}", f"    version: {quoted(version)}",
                  f"    notes: {quoted('the frozen environment of the release results (' + env['lock_file'] + ')')}",
                  f"    url: {quoted(URLS[title])}"]
    lines += ["identifiers:", "  - type: other", f"    value: {quoted('sha256:' + env['lock_sha256'])}",
              "    description: " + quoted(
                  f"sha256 of {env['lock_file']}, the hash-pinned environment of the release's results (Python "
                  f"{env['python']}; install: scripts/setup.sh, or pip install --require-hashes -r "
                  f"{env['lock_file']})")]
    return "\n".join(lines) + "\n"


def update_citation(results: str | Path, path: Path = CITATION) -> dict[str, Any]:
    """Write CITATION.cff's date-released, commit and environment block from a results file's provenance; refuse a
    results file that cannot name a release (no commit, a dirty tree, another lade version, no environment)."""
    env = environment(read_provenance(results))
    shown = Path(results).resolve()
    shown = str(shown.relative_to(REPO)) if shown.is_relative_to(REPO) else str(results)
    if problem := _release_problem(env):
        raise ValueError(f"{shown} cannot name the release in CITATION.cff: {problem}")
    text = path.read_text()
    if ENVIRONMENT_MARK not in text:
        raise ValueError(f"{path.name} has no line starting {ENVIRONMENT_MARK.strip()!r} under references")
    text = text[:text.index(ENVIRONMENT_MARK)] + environment_block(env, shown)
    text = re.sub(r"(?m)^date-released: .*$", f'date-released: "{env["date"]}"', text)
    commit = f'commit: "{env["commit"]}"  # the commit of the release\'s results'
    text = re.sub(r"(?m)^commit: .*$", commit, text) if re.search(r"(?m)^commit: ", text) else \
        re.sub(r"(?m)^(date-released: .*)$", rf"\1\n{commit}", text)
    path.write_text(text)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.pipeline.cite", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="a results file (data/results/...) with its .provenance.json beside it")
    parser.add_argument("--update-citation", action="store_true",
                        help="write CITATION.cff's date-released, commit and environment from this file instead")
    args = parser.parse_args(argv)
    try:
        if args.update_citation:
            env = update_citation(args.results)
            print(f"CITATION.cff: commit {env['commit']}, date {env['date']}, {env['lock_file']} {env['lock_sha256']}")
        else:
            print(citation(args.results), end="")
    except (FileNotFoundError, ValueError) as error:
        print(f"lab.pipeline.cite: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
