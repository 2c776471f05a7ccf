"""The pinned environment files agree with each other, with pyproject.toml and with this venv."""

import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(line: str) -> tuple[str, str]:
    name, _, pinned = line.partition("==")
    assert pinned, f"not an exact pin: {line!r}"
    return canonical(name), pinned.strip()


def lock_pins() -> tuple[dict[str, str], dict[str, str]]:
    """(direct pins, all pins) of requirements.lock; the direct block ends at its first blank line."""
    direct, pins, block = {}, {}, None
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.startswith("#"):
            block = block or ("direct" if line.strip() == "# direct" else None)
            continue
        if not line.strip():
            block = "transitive" if block else None
            continue
        name, pinned = parse_pin(line)
        pins[name] = pinned
        if block == "direct":
            direct[name] = pinned
    return direct, pins


def conda_env() -> dict:
    return yaml.safe_load((REPO / "environment.yml").read_text())


def conda_pip_pins() -> dict[str, str]:
    pip_section = next(d["pip"] for d in conda_env()["dependencies"] if isinstance(d, dict))
    return dict(parse_pin(line) for line in pip_section)


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_environment_yml_pins_exactly_the_locks_direct_block():
    """Both files must name the same packages at the same versions, or a conda user and a pip user
    would run different code."""
    direct, _ = lock_pins()
    assert direct, "requirements.lock has no '# direct' block"
    assert conda_pip_pins() == direct


def test_lock_has_no_duplicates_and_only_exact_pins():
    """A duplicated name would make pip fail or pick silently."""
    names = [parse_pin(line)[0] for line in (REPO / "requirements.lock").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert len(names) == len(set(names))


def test_conda_python_matches_this_interpreter_series():
    """The lock was made with CPython 3.11 wheels; the conda env must use the same series."""
    assert "python=3.11" in conda_env()["dependencies"]
    assert sys.version_info[:2] >= tuple(int(x) for x in pyproject()["project"]["requires-python"][2:].split("."))


# gptqmodel 7.6.0 (lade[awq]) pins numpy 2.2.6 and pulls torchao; the locked environment keeps numpy 2.4.6,
# so AWQ is an opt-in extra outside the lock (its tests skip without it).
UNLOCKED_EXTRAS = {"awq"}


def test_pyproject_dependencies_are_locked_consistently():
    """Every dependency (and extra but the opt-in ones) is pinned in the lock, at its pyproject pin if any."""
    _, pins = lock_pins()
    project = pyproject()["project"]
    requirements = project["dependencies"] + [r for name, extra in project["optional-dependencies"].items()
                                              if name not in UNLOCKED_EXTRAS for r in extra]
    for requirement in requirements:
        name = canonical(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])
        if name == "lade":  # an extra naming another extra of lade itself
            continue
        assert name in pins, f"{name} (pyproject) missing from requirements.lock"
        if "==" in requirement:
            assert requirement.split("==")[1].strip() == pins[name], requirement


@pytest.mark.parametrize("name", ["torch", "transformers", "datasets", "safetensors", "gguf"])
def test_installed_versions_match_the_lock(name):
    """The venv the tests run in is the locked one (a CUDA build '+cuXXX' of the same torch counts)."""
    _, pins = lock_pins()
    try:
        installed = version(name)
    except PackageNotFoundError:
        pytest.fail(f"{name} not installed: run ./run_tests.sh (installs requirements.lock)")
    assert installed.split("+")[0] == pins[canonical(name)]
