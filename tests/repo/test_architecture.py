"""The package's shape: the core (lade) never imports the research wing (lab/), no module of either imports itself
through a cycle, the lab's three layers import one way and dispatch by no name string, the core runs in an
environment holding only torch and transformers, and the decoder ships as a transformers custom_generate folder."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
import torch
from packaging.markers import default_environment
from packaging.requirements import Requirement

import lade
from tiny_models import random_prompt, tiny_model

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "lade"
LAB = REPO / "lab"
LAB_LAYERS = ("harness", "studies", "pipeline")  # each imports only the layers before it (and itself)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: str = "lade") -> set[str]:
    """`root`'s modules imported anywhere in the file (top level, inside functions, under TYPE_CHECKING), relative
    imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == root}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != root:
                continue
            found.add(target)
            for alias in node.names:  # `from . import x` may name a submodule
                candidate = f"{target}.{alias.name}"
                if (REPO / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                        (REPO / Path(*candidate.split("."))).is_dir():
                    found.add(candidate)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    return {module_name(path): imports_of(path, package.name) for path in package.rglob("*.py")}


def absolute_imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add((node.module or "").split(".")[0])
    return found


def test_core_never_imports_the_lab():
    """The lab (lab/) imports the core; the core must stay importable without the lab, which is not in the wheel."""
    offenders = sorted(module_name(path) for path in PACKAGE.rglob("*.py") if "lab" in absolute_imports(path))
    assert not offenders
    assert not (PACKAGE / "lab").exists(), "the research wing lives at the repository root (lab/), not in lade/"


def test_core_tests_never_import_the_lab():
    """tests/core checks the decoder alone (`pytest tests/core` is the suite of a core change): the lab's tests
    live in tests/lab."""
    core_tests = [*(REPO / "tests" / "core").glob("*.py")]
    assert core_tests
    assert not sorted(path.name for path in core_tests if "lab" in absolute_imports(path))


def import_cycles(package: Path) -> list[list[str]]:
    """Depth-first search over module imports (a package's __init__ counts as the package)."""
    modules = {module_name(path) for path in package.rglob("*.py")}
    graph = {module: {t for t in targets if t in modules} - {module}
             for module, targets in import_graph(package).items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target] if target in stack else [module, target])
            elif target not in state:
                visit(target, stack + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


@pytest.mark.parametrize("package", [PACKAGE, LAB], ids=["lade", "lab"])
def test_no_import_cycles(package):
    """No module reaches itself through imports, deferred ones (inside functions) included."""
    assert not import_cycles(package)


def test_lab_layers_import_one_way():
    """lab.harness <- lab.studies <- lab.pipeline: the harness imports neither studies nor pipeline, and the studies
    never import the pipeline (its registry imports them), so a study can be read, tested and reused alone."""
    offenders = []
    for module, targets in import_graph(LAB).items():
        layer = module.split(".")[1] if module.count(".") else None
        if layer is None:
            continue
        assert layer in LAB_LAYERS, f"{module}: lab modules live in one of {LAB_LAYERS}"
        above = LAB_LAYERS[LAB_LAYERS.index(layer) + 1:]
        offenders += [(module, t) for t in targets if t.split(".")[1:2] and t.split(".")[1] in above]
    assert not offenders


def _module_names(tree: ast.AST, package: str) -> set[str]:
    """Names a file binds to modules: `import x [as y]`, and `from p import m [as y]` where m is a module file."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = (node.module or "") if not node.level else ".".join(
                package.split(".")[: len(package.split(".")) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                if (REPO / Path(*f"{base}.{alias.name}".split("."))).with_suffix(".py").exists():
                    names.add(alias.asname or alias.name)
    return names


# modules whose classes lab looks up by the names their own registries give (the architecture sweep builds each model
# class transformers' auto mappings name): transformers' data, not a lab function chosen by a string
THIRD_PARTY_REGISTRIES = {"transformers"}


def test_lab_dispatches_by_no_name_string():
    """Nothing in lab/ looks a function up by a name held in data (`getattr(module, name)`, `import_module(name)`):
    registries hold the objects themselves, so a rename breaks at import time and a reader can follow the call."""
    offenders = []
    for path in LAB.rglob("*.py"):
        tree = ast.parse(path.read_text())
        modules = _module_names(tree, module_name(path).rpartition(".")[0])
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            dynamic = not isinstance(node.args[0], ast.Constant)
            if name == "getattr" and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id in modules - THIRD_PARTY_REGISTRIES \
                    and not isinstance(node.args[1], ast.Constant):
                offenders.append(f"{module_name(path)}:{node.lineno} getattr({node.args[0].id}, ...)")
            elif name in ("import_module", "__import__") and dynamic:
                offenders.append(f"{module_name(path)}:{node.lineno} {name}(...)")
    assert not offenders


def notebook_lab_imports(path: Path) -> set[str]:
    """The lab modules a notebook's code cells import (`from lab.pkg import mod as x` counts as lab.pkg.mod)."""
    source = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "lab"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lab":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if (REPO / Path(*sub.split("."))).with_suffix(".py").exists() else node.module)
    return found


@pytest.mark.parametrize("notebook", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebook_imports_its_study_and_at_most_three_more(notebook):
    """A notebook tells one study: it imports that study's module and at most three other lab modules, so what it
    shows lives in one place (lab.studies.<study>) and the plumbing below it in a few."""
    imported = notebook_lab_imports(notebook)
    studies = {m for m in imported if m.startswith("lab.studies.")}
    assert len(studies) == 1 and len(imported) <= 4, sorted(imported)


def test_modules_stay_small():
    """A module past ~400 lines is asking to be split, in the core and in the lab alike."""
    files = [*PACKAGE.rglob("*.py"), *LAB.rglob("*.py")]
    long = {module_name(p): n for p in files if (n := len(p.read_text().splitlines())) > 400}
    assert not long


def _distribution_closure(roots: tuple[str, ...]) -> set[str]:
    """The installed distributions `roots` need (their requirements without extras, markers evaluated here)."""
    environment = default_environment()
    seen, pending = set(), list(roots)
    while pending:
        name = pending.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({**environment, "extra": ""}):
                pending.append(requirement.name)
    return seen


def _link_distributions(names: set[str], site: Path) -> None:
    """Symlink each distribution's top-level packages, modules and metadata from this environment into `site`."""
    site.mkdir(parents=True)
    for dist in metadata.distributions():
        if re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower() not in names:
            continue
        root = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            source = root / top
            if source.exists() and not (site / top).exists() and top not in ("..", "bin"):
                (site / top).symlink_to(source)


@pytest.fixture(scope="module")
def core_python(tmp_path_factory) -> Path:
    """A virtual environment holding torch, transformers (and what they need) and lade installed with --no-deps:
    built once from this environment's installed files (symlinks, a few seconds)."""
    root = tmp_path_factory.mktemp("core-env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    _link_distributions(_distribution_closure(("torch", "transformers")), root / "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(root / "lade"), str(REPO)], check=True, capture_output=True)
    site_packages = next((root / "venv" / "lib").glob("python*/site-packages"))
    (site_packages / "core.pth").write_text(f"{root / 'lade'}\n{root / 'site'}\n")
    return root / "venv" / "bin" / "python"


CORE_SCRIPT = textwrap.dedent("""
    import importlib.util, sys, torch
    for name in ("datasets", "pandas", "seaborn", "matplotlib", "gguf", "scipy"):
        assert importlib.util.find_spec(name) is None, name + " is installed in the core environment"
    import lade
    assert lade.__file__.startswith(sys.argv[1]), lade.__file__  # the installed copy, not the source tree
    from tiny_models import random_prompt, tiny_model
    model = tiny_model("llama")
    kw = dict(max_new_tokens=16, eos_token_id=None, pad_token_id=0)
    ids = random_prompt(1)
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **kw)
    config = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4)
    assert torch.equal(lade.generate(model, ids, config, do_sample=False, **kw), plain)
    batch, mask = lade.left_pad([random_prompt(2)[0], random_prompt(3, length=9)[0]], 0)
    plain = model.generate(batch, attention_mask=mask, do_sample=False, **kw)
    assert torch.equal(lade.generate(model, batch, config, attention_mask=mask, do_sample=False, **kw), plain)
    seeded = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, sampling_seed=1)
    sampled = lade.generate(model, ids, seeded, do_sample=True, **kw)
    assert sampled.shape == (1, ids.shape[1] + 16)
    assert importlib.util.find_spec("lab.harness") is None, "the research wing was installed with lade"
    print("CORE OK")
""")


def test_core_decodes_with_only_torch_and_transformers(core_python, tmp_path):
    """`pip install --no-deps` of lade beside torch and transformers: greedy, batched and sampled decoding work, and
    the research wing (lab) is not installed with it."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO / "tests"), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "HOME": str(tmp_path)}
    run = subprocess.run([str(core_python), "-c", CORE_SCRIPT, str(core_python.parents[2])], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "CORE OK" in run.stdout, run.stdout[-2000:] + run.stderr[-3000:]


def test_custom_generate_folder_from_a_local_path():
    """model.generate(custom_generate=<this repository>, trust_remote_code=True, lookahead_config=...) runs lade
    (custom_generate/generate.py), output equal to plain greedy, stats through return_stats."""
    model = tiny_model("qwen2")
    ids = random_prompt(4)
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24, eos_token_id=None)
    out, stats = model.generate(ids, custom_generate=str(REPO), trust_remote_code=True,
                                lookahead_config=lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
                                return_stats=True, **kw)
    assert torch.equal(out, model.generate(ids, **kw))
    assert stats.steps < 24
