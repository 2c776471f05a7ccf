"""Experiment specs (data/experiments/*.yaml), their resolution per notebook, and `./run_all.sh --plan`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from lab.harness.bench import REPEATS
from lab.harness.models import locate_weights
from lab.harness.workload import Work
from lab.pipeline.plan import estimate_seconds, hardware_row, missing_weights_message, notebook_work, resolve
from lab.pipeline.specs import (
    DEFAULT_SPEC,
    MULTI_MODEL_NOTEBOOKS,
    SPEC_DIR,
    ModelEntry,
    SpecError,
    known_notebooks,
    load_spec,
    model_entries,
    notebook_parameters,
    override_model,
    single_entry,
)

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted(SPEC_DIR.glob("*.yaml"))
REQUIRED_SPECS = {"blog-a100-llama2-mtbench.yaml", "blog-a100-codellama.yaml", "paper-sampling-cnndm.yaml",
                  "feature-request-rtx3090.yaml", "embedded-cpu.yaml"}
LLAMA_7B_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                   "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
                   "num_key_value_heads": 32, "vocab_size": 32016}


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_spec_parses_and_names_only_known_things(path):
    """load_spec checks notebooks, parameters, datasets, models; each spec also says what it reproduces and prices
    its estimate on a known device, and every notebook it names gets a model."""
    spec = load_spec(path)
    assert set(spec.notebooks) <= set(known_notebooks())
    assert spec.about.get("title") and spec.about.get("reproduces") and spec.about.get("hardware")
    hardware_row(spec.hardware)
    resolved = resolve(spec)
    assert list(resolved.params) == list(spec.notebooks)
    for nb, params in resolved.params.items():
        assert set(params) - {"models"} <= set(notebook_parameters(nb)), nb
        entries = model_entries("embedded", params["models"], [], "auto", nb)
        assert entries and all(e.prompt_format for e in entries)
        assert notebook_work(nb, notebook_parameters(nb) | params, entries[0])


def test_the_published_setups_have_specs():
    assert {p.name for p in SPECS} >= REQUIRED_SPECS
    assert DEFAULT_SPEC.name == "embedded-cpu.yaml"


def test_default_spec_is_the_notebooks_defaults():
    """The default run is a spec like the others: it runs every notebook on the embedded model in fp32 on the CPU and
    sets nothing else, so each notebook's parameters cell is what runs (and what a notebook opened by hand runs)."""
    resolved = resolve(load_spec(DEFAULT_SPEC))
    assert list(resolved.params) == known_notebooks()
    for nb, params in resolved.params.items():
        defaults = notebook_parameters(nb)
        assert {k: v for k, v in params.items() if k != "models"} == {"device": "cpu", "dtype": "float32"}
        assert (defaults["device"], defaults["dtype"], defaults["model"]) == ("cpu", "float32", "embedded")
        assert [m["path"] for m in params["models"]] == ["embedded"]


def test_blog_specs_carry_the_blogs_configurations_and_prompt_formats():
    """Configs per size come from the spec (blog: 7B 5,15,15; 13B 5,10,10; 34B 5,7,7), base CodeLlama gets raw
    prompts on HumanEval, CodeLlama-Instruct its chat template on GSM8K."""
    entries = {e.name: e for e in load_spec(SPEC_DIR / "blog-a100-codellama.yaml").entries()}
    assert entries["CodeLlama-7b"].configs == ("5,15,15",)
    assert entries["CodeLlama-13b"].configs == ("5,10,10",) and entries["CodeLlama-34b"].configs == ("5,7,7",)
    assert {e.prompt_format for e in entries.values() if e.datasets == ("humaneval",)} == {"raw"}
    assert {e.prompt_format for e in entries.values() if e.datasets == ("gsm8k",)} == {"chat"}
    llama = load_spec(SPEC_DIR / "blog-a100-llama2-mtbench.yaml")
    per_nb = resolve(llama).params
    assert [m["name"] for m in per_nb["01_mt_bench_speedup"]["models"]] == [
        "Llama-2-7b-chat", "Llama-2-13b-chat", "Llama-2-70b-chat"]
    assert [m["name"] for m in per_nb["03_scaling_law"]["models"]] == ["Llama-2-7b-chat"]
    assert per_nb["03_scaling_law"]["ngram_sizes"] == [5, 7, 11] and "ngram_sizes" not in per_nb["06_ablation"]
    sampling = resolve(load_spec(SPEC_DIR / "paper-sampling-cnndm.yaml")).params["05_sampling"]
    assert sampling["temperatures"] == [1.0] and sampling["prompt_set"] == "spec_bench:summarization"


def _write_spec(tmp_path, **content) -> Path:
    base = {"about": {"title": "t", "reproduces": "r", "hardware": "h"}, "notebooks": ["01_mt_bench_speedup"],
            "models": [{"name": "m", "path": "embedded"}]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(base | content))
    return path


@pytest.mark.parametrize("content, message", [
    ({"notebooks": ["09_nope"]}, "unknown notebook '09_nope'"),
    ({"notebooks": "01_mt_bench_speedup"}, "notebooks is a list of notebook names"),
    ({"per_notebook": ["01_mt_bench_speedup"]}, "per_notebook maps notebook names"),
    ({"temperatures": [1.0]}, r"parameters \['temperatures'\] are declared by none of its notebooks"),
    ({"datasets": ["humaneval", "mmlu"], "notebooks": ["02_humaneval_speedup"]}, "unknown dataset 'mmlu'"),
    ({"categories": ["poetry"], "notebooks": ["07_spec_bench"]}, "spec_bench:poetry"),
    ({"configs": ["5,15"]}, "N,W,G.*'5,15'"),
    ({"dtype": "float8"}, "dtype 'float8'"),
    ({"models": [{"name": "m", "path": "x", "window": 3}]}, r"unknown keys \['window'\]"),
    ({"models": [{"name": "m", "path": "x", "prompt_format": "markdown"}]}, "prompt_format 'markdown'"),
    ({"per_notebook": {"05_sampling": {"n_prompts": 1}}}, "not in its notebooks"),
    ({"per_notebook": {"01_mt_bench_speedup": {"temperatures": [1]}}}, "not parameters of that notebook"),
    ({"notebooks": ["06_ablation"], "models": [{"name": "a", "path": "x"}, {"name": "b", "path": "y"}]},
     "measures one model"),
    ({"n_prompts": "ten"}, "n_prompts: 'ten' is not an integer \\(01_mt_bench_speedup's default: 8\\)"),
    ({"n_prompts": -3}, "n_prompts: -3 is not an integer >= 1"),
    ({"n_prompts": 2.5}, "n_prompts: 2.5 is not an integer"),
    ({"quick": "yes"}, "quick: 'yes' is not true or false"),
    ({"prompt_format": "chatt"}, "prompt_format 'chatt' is not one of \\('auto', 'chat'"),
    ({"device": "gpu"}, "device 'gpu': use one of \\('cpu', 'cuda', 'mps'\\)"),
    ({"notebooks": ["05_sampling"], "temperatures": [1.0, "hot"]}, "is not a list whose items are each a number"),
    ({"notebooks": ["09_batches"], "batch_sizes": [0, 2]}, "is not a list whose items are each an integer >= 1"),
    ({"notebooks": ["01_mt_bench_speedup", "02_humaneval_speedup"], "headline_prompts": "all"},
     "is not an integer or a mapping"),
    ({"per_notebook": {"01_mt_bench_speedup": {"max_new_tokens": "128"}}},
     "per_notebook 01_mt_bench_speedup: max_new_tokens: '128' is not an integer"),
])
def test_bad_specs_are_refused_with_what_to_change(tmp_path, content, message):
    with pytest.raises(SpecError, match=message):
        load_spec(_write_spec(tmp_path, **content))


def test_a_spec_is_a_file_or_the_bare_name_of_one_in_data_experiments(tmp_path):
    """A bare name is looked for in data/experiments/; a path that does not exist is refused, never replaced by the
    spec of the same name there."""
    assert load_spec("embedded-cpu.yaml").path == DEFAULT_SPEC
    for missing in (tmp_path / "embedded-cpu.yaml", Path("nowhere/embedded-cpu.yaml"), Path("nope.yaml")):
        with pytest.raises(SpecError, match=f"no spec file {missing}; specs in data/experiments"):
            load_spec(missing)


@pytest.mark.parametrize("name", ["../notebooks/01_mt_bench_speedup", "./01_mt_bench_speedup",
                                  str(REPO / "notebooks" / "01_mt_bench_speedup"), "../../etc/passwd", "", 1])
def test_notebook_names_are_plain_names_of_existing_notebooks(tmp_path, name):
    """A notebook name becomes notebooks/NAME.ipynb and build/notebooks/NAME.params.yaml: a path, even one that
    resolves to a real notebook, would read and write outside those folders, so only the file stem of a notebook in
    notebooks/ is taken, wherever a spec names notebooks."""
    with pytest.raises(SpecError, match="unknown notebook"):
        notebook_parameters(name)
    with pytest.raises(SpecError, match="unknown notebook"):
        load_spec(_write_spec(tmp_path, notebooks=[name]))
    with pytest.raises(SpecError, match="not in its notebooks"):
        load_spec(_write_spec(tmp_path, per_notebook={name: {"n_prompts": 1}}))
    with pytest.raises(SpecError, match="names notebook"):
        load_spec(_write_spec(tmp_path, models=[{"name": "m", "path": "embedded", "notebooks": [name]}]))


def test_model_override_picks_the_matching_entry(tmp_path):
    """--model replaces the entry of the same folder name, else the one nearest in size (config.json), else the only
    one; the replaced entry keeps its configs and prompt format."""
    entries = load_spec(SPEC_DIR / "blog-a100-codellama.yaml").entries()
    named = override_model(entries, str(tmp_path / "CodeLlama-13b-hf"))
    assert (named.name, named.configs, named.prompt_format) == ("CodeLlama-13b-hf", ("5,10,10",), "raw")
    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_7B_CONFIG))
    assert override_model(entries, str(folder)).configs == ("5,15,15",)  # ~6.7B parameters: the 7B entry
    with pytest.raises(SpecError, match="cannot tell which"):
        override_model(entries, "someone/other-model")
    only = override_model([ModelEntry("SmolLM2-135M-Instruct", "embedded", "135M")], str(folder))
    assert (only.name, only.path) == ("my-llama", str(folder))


def test_model_entries_without_a_spec_use_the_notebook_parameters():
    [entry] = model_entries("embedded", [], ["4,5,5"], "auto", "01_mt_bench_speedup")
    assert (entry.name, entry.configs, entry.prompt_format) == ("SmolLM2-135M-Instruct", ("4,5,5",), "auto")
    spec = [{"name": "a", "path": "embedded", "configs": ["5,7,7"], "notebooks": ["01_mt_bench_speedup"]},
            {"name": "b", "path": "embedded", "prompt_format": "raw"}]
    assert [e.name for e in model_entries("embedded", spec, ["4,5,5"], "chat", "02_humaneval_speedup")] == ["b"]
    a, b = model_entries("embedded", spec, ["4,5,5"], "chat", "01_mt_bench_speedup")
    assert (a.configs, a.prompt_format, b.configs, b.prompt_format) == (("5,7,7",), "chat", ("4,5,5",), "raw")
    with pytest.raises(SpecError, match="measures one model"):
        single_entry([a, b], "06_ablation")
    assert "06_ablation" not in MULTI_MODEL_NOTEBOOKS


def test_resolve_applies_the_command_line(tmp_path):
    spec = load_spec(SPEC_DIR / "blog-a100-llama2-mtbench.yaml")
    resolved = resolve(spec, only=["01_mt_bench_speedup"], dtype="bfloat16", device="cpu", quick=True)
    params = resolved.params["01_mt_bench_speedup"]
    assert (params["dtype"], params["device"], params["quick"]) == ("bfloat16", "cpu", True)
    # a 13B folder given with --model: only the notebooks its entry runs in (01), with the 13B config
    resolved = resolve(spec, model=str(tmp_path / "Llama-2-13b-chat-hf"))
    assert list(resolved.params) == ["01_mt_bench_speedup"]
    assert resolved.params["01_mt_bench_speedup"]["models"][0]["configs"] == ["5,10,10"]
    with pytest.raises(SpecError, match="not in spec"):
        resolve(spec, only=["05_sampling"])
    with pytest.raises(SpecError, match="--dtype"):
        resolve(spec, dtype="fp8")


def test_weights_are_found_by_folder_name_under_lade_models(tmp_path, monkeypatch):
    monkeypatch.setenv("LADE_MODELS", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = locate_weights("codellama/CodeLlama-7b-hf")
    assert not missing.present and not missing.obtainable and missing.folder == tmp_path / "CodeLlama-7b-hf"
    (tmp_path / "CodeLlama-7b-hf").mkdir()
    (tmp_path / "CodeLlama-7b-hf" / "config.json").write_text(json.dumps(LLAMA_7B_CONFIG))
    found = locate_weights("codellama/CodeLlama-7b-hf")
    assert found.present and found.source == str(tmp_path / "CodeLlama-7b-hf")
    assert locate_weights("embedded").present
    monkeypatch.delenv("HF_HUB_OFFLINE")  # online: downloaded when the run starts, if the Hub serves it now
    assert locate_weights("someone/not-here", hub_check=lambda _: None).obtainable
    refused = locate_weights("someone/not-here", hub_check=lambda _: "the Hub is not reachable from this machine")
    assert not refused.obtainable and "not downloadable: the Hub is not reachable" in refused.where


def test_missing_weights_message_names_spec_models_and_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("LADE_MODELS", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = missing_weights_message(resolve(load_spec(SPEC_DIR / "paper-sampling-cnndm.yaml")))
    assert "spec paper-sampling-cnndm.yaml" in message and "Llama-2-7b-chat (meta-llama/Llama-2-7b-chat-hf)" in message
    assert f"at {tmp_path / 'Llama-2-7b-chat-hf'}" in message and "LADE_MODELS" in message
    assert missing_weights_message(resolve(load_spec(DEFAULT_SPEC))) is None


def test_plan_counts_the_headline_prompts_and_the_parallelism_prompts():
    """--plan prices what the notebooks run: greedy and lade-auto on the headline prompts, the other methods on
    n_prompts; the parallelism runs of notebook 03 on parallel_prompts per set."""
    [entry] = model_entries("embedded", [], [], "auto", "02_humaneval_speedup")
    p = notebook_parameters("02_humaneval_speedup") | {"n_prompts": 4, "gsm8k_prompts": 2,
                                                       "headline_prompts": {"humaneval": 30, "gsm8k": 9},
                                                       "baselines": ["auto", "pld"]}
    counts = {(w.dataset, w.method): w.prompts for w in notebook_work("02_humaneval_speedup", p, entry)}
    assert counts[("humaneval", "greedy")] == counts[("humaneval", "lade-auto")] == 30
    assert counts[("gsm8k", "greedy")] == counts[("gsm8k", "lade-auto")] == 9
    assert counts[("humaneval", "pld(10)")] == 4 and counts[("gsm8k", "pld(10)")] == 2
    p = notebook_parameters("03_scaling_law") | {"n_prompts": 3, "parallel_prompts": 1}
    ranks = [w for w in notebook_work("03_scaling_law", p, entry) if w.method.endswith("rank(s)")]
    assert ranks and all(w.prompts == 2 for w in ranks)


def test_estimate_prices_work_on_the_hardware():
    """More tokens cost more; the same work is faster on an A100 than on an RTX 3090 and on a CPU; a wide lookahead
    step costs more per step than a one-token step but the run needs fewer steps."""
    greedy, wide = Work("mt_bench", "greedy", None, 10, 256), Work("mt_bench", "lade", (5, 15, 15), 10, 256)
    a100, rtx, cpu = (estimate_seconds([greedy, wide], 6.7e9, "float16", hw) for hw in ("A100 80GB SXM", "RTX 3090",
                                                                                        "cpu"))
    assert a100[1] < rtx[1] < cpu[1] and a100[0] < rtx[0]
    more = estimate_seconds([Work("mt_bench", "greedy", None, 20, 256)], 6.7e9, "float16", "A100 80GB SXM")
    assert more[0] > a100[0]
    with pytest.raises(SpecError, match="data/gpus.csv"):
        hardware_row("TPU v5")


def test_estimate_prices_every_repeat_of_a_benchmark():
    """A block timed 3 times costs 3 times the prompts' prefills and steps (the weights' load counted once), and the
    benchmark notebooks' blocks carry bench.REPEATS."""
    once, thrice = (estimate_seconds([Work("w", "x", None, 1, 0), Work("mt_bench", "greedy", None, 4, 64, repeats=r)],
                                     135e6, "float32", "cpu")[1] for r in (1, 3))
    assert thrice == pytest.approx(3 * once)
    [entry] = model_entries("embedded", [], [], "auto", "01_mt_bench_speedup")
    work = notebook_work("01_mt_bench_speedup", notebook_parameters("01_mt_bench_speedup"), entry)
    assert {w.repeats for w in work} == {REPEATS}


def run_all(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """./run_all.sh in this environment: set-up skipped (the suite's set-up ran), this interpreter's environment."""
    full = dict(os.environ, LADE_SKIP_SETUP="1", LADE_VENV=sys.prefix, HF_HUB_OFFLINE="1",
                PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])) | (env or {})
    return subprocess.run([str(REPO / "run_all.sh"), *args], cwd=REPO, env=full, capture_output=True, text=True,
                          timeout=900)


def test_plan_lists_the_runs_and_stops_on_missing_weights(tmp_path):
    """--plan prints every notebook x model x dataset x method with dtype, device and an estimate, loads no model,
    and exits 3 with one message naming the spec, each missing model and the folder to put it in."""
    done = run_all("--plan", "--params", "data/experiments/blog-a100-codellama.yaml",
                   env={"LADE_MODELS": str(tmp_path)})
    assert done.returncode == 3, done.stderr
    out = done.stdout
    for model in ("CodeLlama-7b", "CodeLlama-13b", "CodeLlama-34b", "CodeLlama-34b-Instruct"):
        assert model in out
    assert "lade(5,15,15)" in out and "lade(5,10,10)" in out and "lade(5,7,7)" in out and "pld(10)" in out
    assert "humaneval" in out and "gsm8k" in out and "float16" in out and "cuda" in out
    assert "estimated total:" in out and "MISSING" in out
    err = done.stderr
    assert err.startswith("spec blog-a100-codellama.yaml: the weights of 6 model(s) are not on this machine")
    assert f"{tmp_path / 'CodeLlama-34b-Instruct-hf'}" in err
    assert "hf download codellama/CodeLlama-34b-Instruct-hf" in err
    # a run (not a plan) stops with the same message before any notebook starts
    stopped = run_all("--params", "data/experiments/blog-a100-codellama.yaml", env={"LADE_MODELS": str(tmp_path)})
    assert stopped.returncode == 3 and "not on this machine" in stopped.stderr and "[1/" not in stopped.stdout


def test_a_model_the_hub_does_not_serve_here_is_refused_before_any_notebook():
    """Online (HF_HUB_OFFLINE unset), a Hub id neither here nor served by the Hub now (no network here; no such
    model where there is one) stops --plan and the run with exit 3, not inside notebook 01."""
    for args in (["--plan"], []):
        done = run_all(*args, "--only", "01_mt_bench_speedup", "--model", "lade-tests/no-such-model-57",
                       env={"HF_HUB_OFFLINE": "0"})
        assert done.returncode == 3, done.stdout + done.stderr
        assert "no-such-model-57 (lade-tests/no-such-model-57)" in done.stderr and "not downloadable" in done.stderr
        assert "[1/" not in done.stdout


def test_a_device_this_torch_cannot_use_is_refused_with_what_to_install():
    """A spec (or --device) on cuda with a CPU build of torch stops --plan and the run with exit 3 and names the
    GPU lock; the message names each device and its notebooks (the check is injectable, so both sides are tested
    on any machine)."""
    from lab.pipeline.plan import device_problem, missing_devices_message

    assert device_problem("cpu") is None
    resolved = resolve(load_spec(DEFAULT_SPEC), only=["05_sampling", "06_ablation"], device="cuda:1")
    message = missing_devices_message(resolved, problem=lambda d: f"no {d} here")
    assert message == "spec embedded-cpu.yaml: device cuda:1 (05_sampling, 06_ablation): no cuda:1 here"
    assert missing_devices_message(resolved, problem=lambda d: None) is None
    if torch.version.cuda is None and torch.version.hip is None:  # this torch is a CPU build
        assert "requirements-gpu.lock" in device_problem("cuda")
        done = run_all("--plan", "--only", "05_sampling", "--device", "cuda")
        assert done.returncode == 3 and "device cuda (05_sampling): this torch" in done.stderr, done.stderr
        assert "requirements-gpu.lock" in done.stderr
    else:
        print(f"torch {torch.__version__} is a GPU build: device_problem('cuda') = {device_problem('cuda')!r}")


def test_badly_typed_spec_values_stop_plan_and_run_with_the_same_message(tmp_path):
    spec = _write_spec(tmp_path, n_prompts="ten")
    for args in (["--plan"], []):
        done = run_all(*args, "--params", str(spec))
        assert done.returncode == 2, done.stdout + done.stderr
        assert "spec.yaml: n_prompts: 'ten' is not an integer" in done.stderr and "[1/" not in done.stdout


def test_plan_with_the_weights_present_exits_zero(tmp_path, monkeypatch, capsys):
    """The same plan (lab.pipeline.plan show, what `run_all.sh --plan` runs; called in-process) with every model's
    weights
    in place."""
    from lab.pipeline.plan import main as plan_main

    for name in ("CodeLlama-7b-hf", "CodeLlama-13b-hf", "CodeLlama-34b-hf", "CodeLlama-7b-Instruct-hf",
                 "CodeLlama-13b-Instruct-hf", "CodeLlama-34b-Instruct-hf"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(LLAMA_7B_CONFIG))
    monkeypatch.setenv("LADE_MODELS", str(tmp_path))
    spec = str(REPO / "data/experiments/blog-a100-codellama.yaml")  # on the CPU: this torch may be a CPU build
    assert plan_main(["show", spec, "--device", "cpu"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "MISSING" not in out and " NO " not in out and "present" in out


def test_the_cpu_is_priced_from_the_committed_greedy_rows(tmp_path):
    """--plan prices a CPU run at the rates the committed results were measured at (a least-squares fit of their fp32
    greedy rows of the embedded model), and at CPU_ROW where there are none."""
    from lab.pipeline.plan import CPU_ROW, FIT_MODEL, cpu_row
    from lab.pipeline.specs import config_params, parse_size

    assert cpu_row(tmp_path) == CPU_ROW
    rows = [{"model": FIT_MODEL, "dtype": "float32", "method": method, "prompt_tokens": p, "new_tokens": n,
             "wall_s": 0.002 * p + 0.1 * n + (5.0 if method != "greedy" else 0.0)}
            for p, n in [(50, 128), (200, 128), (120, 64), (80, 32)] for method in ("greedy", "lade-auto")]
    pd.DataFrame(rows).to_json(tmp_path / "mt_bench.jsonl", orient="records", lines=True)
    params = config_params("embedded") or parse_size("135M")
    row = cpu_row(tmp_path)
    assert row["bandwidth_gbs"] == pytest.approx(params * 4 / 0.1 / 1e9)
    assert row["peak_tflops"] == pytest.approx(2 * params / 0.002 / 1e12)
