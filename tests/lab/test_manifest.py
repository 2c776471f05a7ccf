"""The study registry (lab.pipeline.manifest) is complete and consistent: every notebook of notebooks/ has one
study whose parameters, estimator, results and dependencies exist, so --plan, the results schemas and the notebook
tests (which all read it) cannot drift from the notebooks."""

from lab.pipeline.manifest import NOTEBOOKS, RESULT_SCHEMAS, depends_on, multi_model_notebooks, run_order
from lab.pipeline.specs import MULTI_MODEL_NOTEBOOKS, known_notebooks, notebook_parameters


def test_every_notebook_has_one_entry():
    """The manifest and notebooks/ name the same notebooks, so no notebook runs unplanned or untested."""
    assert sorted(NOTEBOOKS) == known_notebooks()
    assert all(name == nb.name for name, nb in NOTEBOOKS.items())


def test_each_entry_names_what_exists():
    """The estimator is a function of the study's module, the parameters it reads are in the notebook's parameters
    cell, every results file lists its columns, and results files and figures each belong to one notebook."""
    results, figures = [], []
    for nb in NOTEBOOKS.values():
        assert callable(nb.estimate) and nb.estimate.__module__.startswith("lab.studies."), nb.name
        assert set(nb.parameters) <= set(notebook_parameters(nb.name)), nb.name
        assert all(columns and all(isinstance(c, str) for c in columns) for columns in nb.results.values()), nb.name
        results += nb.results
        figures += nb.figures
    assert len(results) == len(set(results)) and len(figures) == len(set(figures))
    assert set(RESULT_SCHEMAS) == set(results)


def test_dependencies_come_first():
    """A notebook reads only results another notebook writes, and runs after it (run_order keeps the given order
    otherwise)."""
    assert depends_on("04_flops_vs_throughput") == ("01_mt_bench_speedup", "02_humaneval_speedup", "03_scaling_law")
    assert depends_on("09_batches") == ("04_flops_vs_throughput",)  # the calibration its GPU prediction prices with
    for name in NOTEBOOKS:
        assert name not in depends_on(name)
    order = run_order(["04_flops_vs_throughput", "06_ablation", "01_mt_bench_speedup"])
    assert order == ["01_mt_bench_speedup", "04_flops_vs_throughput", "06_ablation"]


def test_multi_model_flag_is_the_specs():
    """lab.pipeline.specs refuses several models only in the notebooks the manifest marks single-model."""
    assert multi_model_notebooks() == MULTI_MODEL_NOTEBOOKS
    assert set(MULTI_MODEL_NOTEBOOKS) == {"01_mt_bench_speedup", "02_humaneval_speedup", "07_spec_bench",
                                          "08_beam_search"}
