"""The pinned environment files agree with each other, with pyproject.toml and with this venv."""

import json
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import tomllib
import yaml

REPO = Path(__file__).resolve().parents[2]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(line: str) -> tuple[str, str]:
    name, _, pinned = line.partition("==")
    assert pinned, f"not an exact pin: {line!r}"
    return canonical(name), pinned.strip()


def requirement_lines(name: str = "requirements.lock") -> list[str]:
    """The 'name==version' lines of a hash-pinned lock (hash continuation lines and pip options left out)."""
    return [line.split(" \\")[0].strip() for line in (REPO / name).read_text().splitlines()
            if line.strip() and not line.startswith(("#", "-", " "))]


def lock_pins(name: str = "requirements.lock") -> tuple[dict[str, str], dict[str, str]]:
    """(direct pins, all pins) of a lock; the direct block runs from '# direct' to the next comment block."""
    direct, pins, block = {}, {}, None
    for line in (REPO / name).read_text().splitlines():
        if line.startswith("# "):
            block = "direct" if line.strip() == "# direct" else ("other" if block else None)
        elif line.strip() and not line.startswith(("-", " ")):
            pin, pinned = parse_pin(line.split(" \\")[0])
            pins[pin] = pinned
            if block == "direct":
                direct[pin] = pinned
    return direct, pins


def conda_env() -> dict:
    return yaml.safe_load((REPO / "environment.yml").read_text())


def conda_pip_pins() -> dict[str, str]:
    pip_section = next(d["pip"] for d in conda_env()["dependencies"] if isinstance(d, dict))
    return dict(parse_pin(line) for line in pip_section if not line.startswith("-"))


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_environment_yml_pins_exactly_the_locks_packages():
    """environment.yml pins every package of the lock (not only the direct ones) at the same version, or a conda
    user and a pip user would run different code."""
    direct, pins = lock_pins()
    assert direct, "requirements.lock has no '# direct' block"
    assert conda_pip_pins() == pins


@pytest.mark.parametrize("name", ["requirements.lock", "requirements-gpu.lock", "requirements-flash-attn.lock",
                                  "requirements-compat.lock"])
def test_locks_have_exact_pins_each_with_hashes(name):
    """`pip install --require-hashes -r LOCK` needs every requirement pinned with == and a sha256; a duplicated name
    would make pip fail or pick silently."""
    text = (REPO / name).read_text()
    names = [parse_pin(line)[0] for line in requirement_lines(name)]
    assert names and len(names) == len(set(names))
    blocks = re.split(r"\n(?=[A-Za-z])", text.split("\n\n", 1)[1])
    for block in blocks:
        if block.strip() and not block.startswith("#"):
            assert "--hash=sha256:" in block, block.splitlines()[0]


def test_gpu_lock_is_the_cpu_lock_with_cuda_torch():
    """Same versions everywhere; torch is PyPI's (CUDA) build of the CPU lock's version, plus its CUDA runtime."""
    _, cpu = lock_pins()
    _, gpu = lock_pins("requirements-gpu.lock")
    assert cpu["torch"] == gpu["torch"] + "+cpu"
    assert {k: v for k, v in gpu.items() if k in cpu and k != "torch"} == {k: v for k, v in cpu.items() if k != "torch"}
    extra = set(gpu) - set(cpu)
    assert any(name.startswith("nvidia-") for name in extra) and "triton" in extra
    _, flash = lock_pins("requirements-flash-attn.lock")
    assert set(flash) == {"flash-attn", "einops"} and "bitsandbytes" in gpu


def test_compat_lock_is_the_cpu_lock_with_the_lowest_transformers():
    """CI's check of the lowest transformers pyproject allows (scripts/compat_ends.sh) runs requirements.lock's
    versions of everything else, transformers at the range's lower end."""
    _, cpu = lock_pins()
    _, low = lock_pins("requirements-compat.lock")
    dependency = next(d for d in pyproject()["project"]["dependencies"] if d.startswith("transformers"))
    assert f">={low['transformers']}," in dependency
    assert {k: v for k, v in low.items() if k != "transformers"} == {k: cpu[k] for k in low if k != "transformers"}
    assert {"torch", "pytest"} <= set(low)


def test_citation_is_complete():
    """CITATION.cff cites the software itself (an entity as author, the package version, a release date, the
    licence) and lists the paper, the four prompt sets and the embedded model under `references`, each with a URL."""
    import lade

    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and "preferred-citation" not in cff
    assert cff["version"] == lade.__version__ and "version" in pyproject()["project"]["dynamic"]
    assert cff["license"] == "Apache-2.0" and str(cff["date-released"]) and cff["authors"][0]["name"]
    titles = " | ".join(r["title"] for r in cff["references"])
    for cited in ("Break the Sequential Dependency", "MT-Bench", "Trained on Code", "Math Word Problems",
                  "Speculative Decoding", "SmolLM2-135M-Instruct"):
        assert cited in titles, cited
    assert all(r["url"].startswith("https://") for r in cff["references"])
    paper = cff["references"][0]
    assert any(i["value"] == "arXiv:2402.02057" for i in paper["identifiers"]) and paper["year"] == 2024


def test_a_foreign_lade_distribution_is_refused():
    """The PyPI name `lade` belongs to the reference implementation, which installs the same `lade` folder: an
    installed `lade` that is not this project must be named with the fix; none, or this project under its former
    name, must pass. The lookup is passed in, so no environment is changed."""
    import importlib.metadata

    import lade

    def installed(summary):
        return lambda name: {"Name": name, "Summary": summary}

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    assert pyproject()["project"]["name"] == "lade-decoding"
    assert "pip uninstall lade" in lade.foreign_lade(installed("Lookahead Decoding Implementation"))
    assert lade.foreign_lade(missing) is None
    assert lade.foreign_lade(installed(pyproject()["project"]["description"])) is None


def test_conda_python_matches_this_interpreter_series():
    """The lock was made with CPython 3.11 wheels; the conda env pins the exact 3.11 release the results recorded."""
    (python,) = [d for d in conda_env()["dependencies"] if isinstance(d, str) and d.startswith("python=")]
    assert python.startswith("python=3.11.") and python.count(".") == 2
    recorded = {json.loads(p.read_text()).get("provenance", {}).get("python")
                for p in (REPO / "data" / "results").glob("*.provenance.json")} - {None}
    assert recorded <= {python.removeprefix("python=")}, recorded
    assert f'PYTHON = "{python.removeprefix("python=")}"' in (REPO / "scripts" / "lock.py").read_text()  # its writer
    assert sys.version_info[:2] >= tuple(int(x) for x in pyproject()["project"]["requires-python"][2:].split("."))


# gptqmodel 7.6.0 (lade[awq]) pins numpy 2.2.6 and pulls torchao; the locked environment keeps numpy 2.4.6,
# so AWQ is an opt-in extra outside the lock (its tests skip without it).
UNLOCKED_EXTRAS = {"awq"}


def test_pyproject_dependencies_are_locked_consistently():
    """Every dependency, extra but the opt-in ones, and dependency group (the lab, tests, notebooks) is pinned in the
    lock, at its pyproject pin if any."""
    _, pins = lock_pins()
    project = pyproject()["project"]
    groups = [r for group in pyproject()["dependency-groups"].values() for r in group if isinstance(r, str)]
    requirements = project["dependencies"] + groups + [r for name, extra in project["optional-dependencies"].items()
                                                       if name not in UNLOCKED_EXTRAS for r in extra]
    for requirement in requirements:
        name = canonical(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0])
        if name == canonical(project["name"]):  # an extra naming another extra of this project itself
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
    assert installed.split("+")[0] == pins[canonical(name)].split("+")[0]
