"""Experiment specs: one papermill parameters file per published setup (data/experiments/*.yaml).

A spec is a flat YAML of notebook parameters (what `papermill -f` takes) plus four keys of its own:
- `notebooks`: the notebooks it runs (file names without .ipynb);
- `about`: what it reproduces (title, figures, source, hardware, notes), shown by --plan and the README;
- `hardware`: the data/gpus.csv row (or "cpu") that --plan's time estimate prices steps on;
- `per_notebook`: {notebook: {parameter: value}} for parameters that differ between its notebooks.
Its `models` parameter lists ModelEntry dicts; a notebook whose spec names several models runs each in turn
(the speedup notebooks 01, 02, 07; the others take one model and say so).

`./run_all.sh --params SPEC` resolves the spec for each notebook (its own parameters only, the command line's
--model/--device/--dtype/--quick applied; lab.pipeline.plan) into build/notebooks/NAME.params.yaml and runs the notebook
with `papermill -f` that file. `python -m lab.pipeline.specs SPEC...` checks spec files.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from lab.harness.costmodel import Shape
from lab.harness.methods import parse_config
from lab.harness.models import DTYPES, EMBEDDED_ALIASES, EMBEDDED_NAME, Weights, locate_weights
from lab.harness.paths import DATA_DIR, REPO, cache_dir
from lab.harness.prompts import (
    FROZEN_SETS,
    HUB_SETS,
    PROMPT_FORMATS,
    SPEC_BENCH_CATEGORIES,
    SPEC_BENCH_TASKS,
    split_set_name,
)
from lab.pipeline.manifest import multi_model_notebooks

SPEC_DIR = DATA_DIR / "experiments"
DEFAULT_SPEC = SPEC_DIR / "embedded-cpu.yaml"
NOTEBOOK_DIR = REPO / "notebooks"
RESERVED = ("about", "hardware", "notebooks", "per_notebook")
MULTI_MODEL_NOTEBOOKS = multi_model_notebooks()  # the others measure one model (lab.pipeline.manifest)
DATASET_PARAMETERS = ("prompt_set", "prompt_sets", "datasets", "categories")  # parameters whose values name prompt sets


class SpecError(ValueError):
    """A spec (or a notebook's model parameters) that cannot run as written; the message says what to change."""


def parse_size(size: str | None) -> float | None:
    """'7B' -> 7e9, '135M' -> 1.35e8, None -> None."""
    if size is None:
        return None
    text = str(size).strip().upper()
    scale = {"M": 1e6, "B": 1e9}.get(text[-1:])
    try:
        return float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        raise SpecError(f"model size {size!r}: write it like '7B' or '135M'") from None


def check_config(text: str) -> str:
    """A lookahead config 'N,W,G' or 'N,W,G,C,M' (methods.parse_config's rule), returned unchanged."""
    try:
        parse_config(str(text))
    except ValueError as err:
        raise SpecError(str(err)) from None
    return str(text)


def check_dataset(name: str) -> str:
    """A prompt set name load_prompts knows ('spec_bench:TASK' included), returned unchanged."""
    base, category = split_set_name(str(name))
    if base not in FROZEN_SETS and base not in HUB_SETS:
        raise SpecError(f"unknown dataset {name!r}; known: {FROZEN_SETS + tuple(HUB_SETS)} "
                        f"(Spec-Bench by task: 'spec_bench:TASK', TASK in {tuple(SPEC_BENCH_TASKS)})")
    if category is not None and (base != "spec_bench" or
                                 (category not in SPEC_BENCH_TASKS and category not in SPEC_BENCH_CATEGORIES)):
        raise SpecError(f"dataset {name!r}: only spec_bench has categories, one of {tuple(SPEC_BENCH_TASKS)} "
                        f"or {SPEC_BENCH_CATEGORIES}")
    return str(name)


@dataclass(frozen=True)
class ModelEntry:
    """One model of a spec. Fields left None take the notebook's own parameter (configs, prompt_format)."""

    name: str  # label in results and figures, e.g. "Llama-2-7b-chat"
    path: str  # "embedded", a local folder, or a Hub id (also looked for as <LADE_MODELS>/<last part of the id>)
    size: str | None = None  # e.g. "7B": published rows and the --plan estimate when config.json is not at hand
    configs: tuple[str, ...] | None = None  # lookahead configs "N,W,G" for this model (blog: 7B 5,15,15, ...)
    prompt_format: str | None = None  # chat / raw / auto / reference (lab.harness.prompts.PROMPT_FORMATS)
    datasets: tuple[str, ...] | None = None  # the notebook datasets this model runs (None: all)
    notebooks: tuple[str, ...] | None = None  # the spec notebooks this model runs in (None: all)
    device_map: str | None = None  # e.g. "auto": spread over several GPUs instead of `device`

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "models") -> "ModelEntry":
        if not isinstance(raw, dict) or not {"name", "path"} <= set(raw):
            raise SpecError(f"{where}: each model is a mapping with at least 'name' and 'path', got {raw!r}")
        unknown = set(raw) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise SpecError(f"{where}: model {raw['name']!r} has unknown keys {sorted(unknown)}; "
                            f"allowed: {list(cls.__dataclass_fields__)}")
        values = dict(raw)
        for key in ("configs", "datasets", "notebooks"):
            if values.get(key) is not None:
                values[key] = tuple(values[key]) if isinstance(values[key], (list, tuple)) else (values[key],)
        entry = cls(**values)
        parse_size(entry.size)
        for config in entry.configs or ():
            check_config(config)
        for dataset in entry.datasets or ():
            check_dataset(dataset)
        if entry.prompt_format is not None and entry.prompt_format not in PROMPT_FORMATS:
            raise SpecError(f"{where}: model {entry.name!r}: prompt_format {entry.prompt_format!r} is not one of "
                            f"{PROMPT_FORMATS}")
        return entry

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items() if v is not None}

    def runs_in(self, notebook: str) -> bool:
        return self.notebooks is None or notebook in self.notebooks

    def runs_on(self, dataset: str) -> bool:
        return self.datasets is None or dataset in self.datasets

    def weights(self) -> Weights:
        return locate_weights(self.path)


def display_name(path: str) -> str:
    """A label for a model path: the embedded model's name, else the folder or Hub id's last part."""
    return EMBEDDED_NAME if path.lower() in EMBEDDED_ALIASES else Path(path.rstrip("/")).name or path


def config_params(path: str) -> float | None:
    """Parameter count of a local config.json's shape (costmodel.Shape.params), None if unknown."""
    weights = locate_weights(path)
    folder = cache_dir() / "models" / EMBEDDED_NAME if path.lower() in EMBEDDED_ALIASES else Path(weights.source)
    file = folder / "config.json"
    shape = Shape.from_config(json.loads(file.read_text())) if file.is_file() else None
    return shape.params if shape else None


def override_model(entries: list[ModelEntry], model: str) -> ModelEntry:
    """The entry that `model` (a path or Hub id given on the command line) stands for, with its path replaced: the
    entry of the same name or folder name, else the one nearest in size (config.json), else the only entry."""
    if not entries:
        raise SpecError("the spec names no models to override")
    key = display_name(model).lower()
    named = [e for e in entries if key in (e.name.lower(), display_name(e.path).lower())]
    params, sized = config_params(model), [e for e in entries if e.size]
    if named:
        chosen = named[0]
    elif params and sized:
        chosen = min(sized, key=lambda e: abs(math.log(parse_size(e.size) / params)))
    elif len(entries) == 1:
        chosen = entries[0]
    else:
        raise SpecError(f"--model {model}: cannot tell which of the spec's models it replaces "
                        f"({[e.name for e in entries]}); name its folder like one of them, or edit the spec")
    return replace(chosen, name=display_name(model), path=model)


def model_entries(model: str, models: list[dict], configs: list[str], prompt_format: str,
                  notebook: str | None = None) -> list[ModelEntry]:
    """The models a notebook runs, each with its configs and prompt format filled in.

    models: the spec's entries (dicts); empty: one entry for `model` with the notebook's `configs` and
    `prompt_format`. With entries, a `model` other than "embedded" picks and replaces one (override_model).
    notebook: keep only the entries that run in it.
    """
    if models:
        entries = [ModelEntry.from_dict(m) for m in models]
        entries = [e for e in entries if notebook is None or e.runs_in(notebook)]
        if model.lower() not in EMBEDDED_ALIASES:
            entries = [override_model(entries, model)]
    else:
        entries = [ModelEntry(display_name(model), model)]
    if not entries:
        raise SpecError(f"no model of the spec runs in notebook {notebook!r}: list it in a model's `notebooks`")
    return [replace(e, configs=tuple(check_config(c) for c in (e.configs or configs)),
                    prompt_format=e.prompt_format or prompt_format) for e in entries]


def single_entry(entries: list[ModelEntry], notebook: str) -> ModelEntry:
    """The one model of a notebook that measures one model (03-06): several are refused with what to change."""
    if len(entries) != 1:
        raise SpecError(f"notebook {notebook} measures one model, the spec gives {[e.name for e in entries]}: "
                        f"restrict the others with `notebooks: [...]` in their entries (multi-model notebooks: "
                        f"{MULTI_MODEL_NOTEBOOKS})")
    return entries[0]


# ---- notebooks and their parameters -------------------------------------------------------------------------------

def known_notebooks() -> list[str]:
    return sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb"))


def check_notebook(name: Any, where: str = "notebook") -> str:
    """A notebook name as specs write it: the file stem of one of the notebooks in notebooks/ (names become paths
    under notebooks/ and build/, so nothing else, e.g. a path, is taken), returned unchanged."""
    if not isinstance(name, str) or name not in known_notebooks():
        raise SpecError(f"{where}: unknown notebook {name!r}; known: {known_notebooks()} (file names in notebooks/ "
                        "without .ipynb)")
    return name


@cache
def notebook_parameters(notebook: str) -> dict[str, Any]:
    """The literal defaults of a notebook's tagged `parameters` cell: {name: value}."""
    path = NOTEBOOK_DIR / f"{check_notebook(notebook)}.ipynb"
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    tree = ast.parse("".join(cells[0]["source"]))
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}


@dataclass(frozen=True)
class Spec:
    path: Path
    params: dict[str, Any]  # parameters for every notebook of the spec (the flat part of the YAML)
    notebooks: tuple[str, ...]
    per_notebook: dict[str, dict[str, Any]] = field(default_factory=dict)
    about: dict[str, Any] = field(default_factory=dict)
    hardware: str = "cpu"

    @property
    def name(self) -> str:
        return self.path.name

    def entries(self) -> list[ModelEntry]:
        """Every model the spec names (an empty `models`: one embedded entry, the notebooks' default)."""
        raw = self.params.get("models") or [{"name": display_name(self.params.get("model", "embedded")),
                                             "path": self.params.get("model", "embedded")}]
        return [ModelEntry.from_dict(m, f"{self.name}: models") for m in raw]

    def notebook_params(self, notebook: str) -> dict[str, Any]:
        """The spec's parameters that `notebook` declares, its per_notebook ones on top."""
        declared = notebook_parameters(notebook)
        return {k: v for k, v in self.params.items() if k in declared} | self.per_notebook.get(notebook, {})


# what the notebooks place models on (lab.pipeline.plan checks this machine has it)
DEVICE_TYPES = ("cpu", "cuda", "mps")


def check_device(device: Any, where: str = "device") -> str:
    """A torch device string the notebooks take ('cpu', 'cuda', 'cuda:1', 'mps'), returned unchanged."""
    import torch

    try:
        kind = torch.device(device).type if isinstance(device, str) else None
    except RuntimeError:
        kind = None
    if kind not in DEVICE_TYPES:
        raise SpecError(f"{where} {device!r}: use one of {DEVICE_TYPES}, a GPU by index as 'cuda:1'")
    return device


def _type_name(default: Any) -> str:
    return "true or false" if isinstance(default, bool) else {int: "an integer", float: "a number", str: "a string",
                                                              list: "a list", dict: "a mapping"}[type(default)]


def _fits(value: Any, default: Any) -> str | None:
    """None if `value` can stand where a notebook has the literal `default`, else what it should be. Integers are
    counts, sizes, seeds or thread counts: never negative, and at least 1 where the default is (prompts, tokens,
    beams, repeats, ...); a list's items follow its default's items."""
    if default is None:
        return None
    if isinstance(default, bool) or isinstance(value, bool):
        return None if type(value) is type(default) else _type_name(default)
    if isinstance(default, float) and isinstance(value, (int, float)):
        return None
    if not isinstance(value, type(default)):
        return _type_name(default)
    if isinstance(default, int) and value < min(default, 1):
        return f"an integer >= {min(default, 1)}"
    if isinstance(default, list) and default:
        lowest = min(default) if all(type(d) is int for d in default) else None
        for item in value:
            wrong = _fits(item, lowest if lowest is not None else default[0])
            if wrong:
                return f"a list whose items are each {wrong}"
    return None


def check_types(values: dict[str, Any], notebooks: tuple[str, ...]) -> None:
    """Each of `values` fits the literal default of some notebook of `notebooks` that declares it (`_fits`); a
    SpecError names the key, the value and what it takes."""
    for key, value in values.items():
        options = {nb: notebook_parameters(nb)[key] for nb in notebooks if key in notebook_parameters(nb)}
        problems = [_fits(value, default) for default in options.values()]
        if options and all(problems):
            nb, default = next(iter(options.items()))
            raise SpecError(f"{key}: {value!r} is not {' or '.join(dict.fromkeys(problems))} "
                            f"({nb}'s default: {default!r})")


def _check_values(spec_name: str, where: str, values: dict[str, Any], notebooks: tuple[str, ...]) -> None:
    try:
        check_types(values, notebooks)
        if "device" in values:
            check_device(values["device"])
        if values.get("prompt_format", "auto") not in PROMPT_FORMATS:
            raise SpecError(f"prompt_format {values['prompt_format']!r} is not one of {PROMPT_FORMATS}")
    except SpecError as err:
        raise SpecError(f"{spec_name}: {where + ' ' if where else ''}{err}") from None
    for key in DATASET_PARAMETERS:
        if key in values:
            names = values[key] if isinstance(values[key], list) else [values[key]]
            base = "spec_bench:" if key == "categories" else ""
            for name in names:
                try:
                    check_dataset(base + str(name))
                except SpecError as err:
                    raise SpecError(f"{spec_name}: {where} parameter {key}: {err}") from None
    for key in ("dtype",):
        if key in values and values[key] not in DTYPES:
            raise SpecError(f"{spec_name}: {where} dtype {values[key]!r} is not one of {sorted(DTYPES)}")
    for config in values.get("configs", []) + ([values["config"]] if "config" in values else []):
        check_config(config)


def load_spec(path: str | Path) -> Spec:
    """Read and check a spec: known notebooks, parameters each of them declares, known datasets, valid models."""
    path = Path(path)
    if not path.is_file():
        # a bare name (`embedded-cpu.yaml`) is looked for in SPEC_DIR; a path that does not exist is an error
        alt = SPEC_DIR / path.name
        if path.parent != Path(".") or not alt.is_file():
            have = sorted(p.name for p in SPEC_DIR.glob("*.yaml"))
            raise SpecError(f"no spec file {path}; specs in {SPEC_DIR.relative_to(REPO)}: {have}")
        path = alt
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise SpecError(f"{path.name}: a spec is a mapping of parameter names to values")
    if not isinstance(raw.get("notebooks") or [], list):
        raise SpecError(f"{path.name}: notebooks is a list of notebook names, got {raw['notebooks']!r}")
    notebooks = tuple(check_notebook(nb, f"{path.name}: notebooks") for nb in raw.get("notebooks") or known_notebooks())
    per_notebook = raw.get("per_notebook") or {}
    if not isinstance(per_notebook, dict):
        raise SpecError(f"{path.name}: per_notebook maps notebook names to parameters, got {per_notebook!r}")
    params = {k: v for k, v in raw.items() if k not in RESERVED}
    declared = {p for nb in notebooks for p in notebook_parameters(nb)}
    unknown = sorted(set(params) - declared)
    if unknown:
        raise SpecError(f"{path.name}: parameters {unknown} are declared by none of its notebooks {list(notebooks)}")
    for nb, values in per_notebook.items():
        if nb not in notebooks:
            raise SpecError(f"{path.name}: per_notebook names {nb!r}, which is not in its notebooks {list(notebooks)}")
        stray = sorted(set(values) - set(notebook_parameters(nb)))
        if stray:
            raise SpecError(f"{path.name}: per_notebook {nb}: {stray} are not parameters of that notebook")
        _check_values(path.name, f"per_notebook {nb}:", values, (nb,))
    _check_values(path.name, "", params, notebooks)
    spec = Spec(path, params, notebooks, per_notebook, raw.get("about") or {}, str(raw.get("hardware", "cpu")))
    entries = spec.entries()
    for entry in entries:
        for nb in entry.notebooks or ():
            if nb not in notebooks:
                raise SpecError(f"{path.name}: model {entry.name!r} names notebook {nb!r}, "
                                f"not one of {list(notebooks)}")
    for nb in notebooks:
        if nb not in MULTI_MODEL_NOTEBOOKS and len([e for e in entries if e.runs_in(nb)]) > 1:
            single_entry([e for e in entries if e.runs_in(nb)], nb)
    return spec


if __name__ == "__main__":  # python -m lab.pipeline.specs data/experiments/*.yaml
    if not sys.argv[1:]:
        sys.exit("usage: python -m lab.pipeline.specs SPEC.yaml [SPEC.yaml ...]")
    for spec_path in sys.argv[1:]:
        print(f"{load_spec(spec_path).name}: ok")
