"""Every figure renders from a small results file with axis labels, clean tick labels, error bars (or bands) where
numbers carry an interval, legends outside the axes, no overlapping or clipped text, a y = 1 line on every speedup
axis, published bars kept apart from measured ones with their device and precision named, and identical bytes
(stamped with the results' provenance) when rendered twice (PNG and PDF)."""

import re

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from cost_data import REFERENCE  # noqa: E402
from lab.harness import costmodel as cm  # noqa: E402
from lab.harness import figure_style as fs  # noqa: E402
from lab.harness.batched import BATCH_COLUMNS, step_width_quantiles, summarize_batches  # noqa: E402
from lab.harness.bench import ROW_COLUMNS  # noqa: E402
from lab.studies import calibration as cal  # noqa: E402
from lab.studies import corpus_bench as cb  # noqa: E402
from lab.studies import experiments as ex  # noqa: E402
from lab.studies import figures as fg  # noqa: E402
from lab.studies import figures_batch as fb  # noqa: E402
from lab.studies import figures_cost as fc  # noqa: E402
from lab.studies import figures_run as fr  # noqa: E402
from lab.studies import gpu_model as gm  # noqa: E402
from lab.studies import spec_bench as sb  # noqa: E402
from lab.studies import validation as vd  # noqa: E402

ARTEFACT = re.compile(r"\d\.\d*(0000\d|9999\d)|\d\.\d{6,}")
PRECISION = re.compile(r"\b(fp16|fp32|bf16|int8|int4)\b")
PROVENANCE = {"git_commit": "abc", "git_dirty": False, "device": "test CPU (2 threads)",
              "params": {"weights_sha256": "f00", "dtype": "torch.float32"}}


def _bench_rows(methods: dict[str, str], prompts: int = 6, seed: int = 0) -> pd.DataFrame:
    """Benchmark rows (ROW_COLUMNS) of `methods` (name -> config) on mt_bench prompts, greedy included."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(prompts):
        greedy_wall = 5.0 + rng.uniform(0, 1)
        for i, (name, config) in enumerate({"greedy": "", **methods}.items()):
            wall = greedy_wall * (1 if name == "greedy" else rng.uniform(0.6, 1.4))
            calls = 64 if name == "greedy" else int(rng.integers(30, 50))
            rows.append({"prompt_set": "mt_bench", "prompt_id": str(81 + p), "method": name, "config": config,
                         "prompt_tokens": 60, "new_tokens": 64, "wall_s": wall, "tokens_per_s": 64 / wall,
                         "forward_calls": calls, "compression": 64 / calls, "step_tokens": 1.0 if i == 0 else 20.0,
                         "single_token_steps": 1.0 if i == 0 else 0.0, "forward_s": wall * 0.97,
                         "host_share": 0.03, "matches_greedy": True, "speedup": greedy_wall / wall})
    table = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    table.attrs["provenance"] = PROVENANCE  # as load_results gives it
    return table


def _batch_rows(sizes=(1, 2, 4, 8), prompts: int = 8, seed: int = 0) -> pd.DataFrame:
    """Batched-throughput rows (BATCH_COLUMNS) of greedy and lade-auto on two sets: many batches at small sizes, one
    at the largest (its single batch drawn as a dot)."""
    rng = np.random.default_rng(seed)
    rows = []
    for name in ("mt_bench", "humaneval"):
        for size in sizes:
            for k in range(prompts // size):
                plain = 2.0 * size ** 0.3 + rng.uniform(0, 0.2)
                for method in ("greedy", "lade-auto"):
                    lade = method != "greedy"
                    wall = plain * (rng.uniform(0.7, 1.5) if lade else 1)
                    widths = [size * (int(rng.integers(1, 8)) if lade else 1) for _ in range(20)]
                    rows.append({"model": "m", "dtype": "float32", "prompt_set": name, "batch_size": size, "batch": k,
                                 "prompt_ids": "", "rows": size, "method": method, "config": "merged" if lade else "",
                                 "first": (k % 2 == 0) == lade, "new_tokens": 32 * size, "wall_s": wall,
                                 "tokens_per_s": 32 * size / wall, "forward_calls": 21 if lade else 32,
                                 "row_steps": size * (21 if lade else 32),
                                 "compression": 32 / 21 if lade else 1.0, "row_compression": [1.5] * size,
                                 "step_widths": widths, "step_tokens": float(np.mean(widths)),
                                 "row_width": float(np.mean(widths)) / size, "plain_steps": 0.2 if lade else 1.0,
                                 "draft_nodes": 3.0 if lade else 0.0, "undrafted_row_steps": 0.2 if lade else 1.0,
                                 "rows_identical": size, "matches_greedy": True, "speedup": plain / wall})
    table = pd.DataFrame(rows, columns=list(BATCH_COLUMNS))
    table.attrs["provenance"] = PROVENANCE
    return table


@pytest.fixture(scope="module")
def cost_inputs():
    obs = cal.observations(cal.load_published())
    lookup = cal.compression_lookup(REFERENCE)
    loo = cal.leave_one_out(obs, lookup)
    fit = cal.fit(obs, lookup)
    sigma = cal.class_sigma(loo, cal.transfer_error(obs, lookup, "RTX 3090"), list(cm.gpus()))
    return obs, loo, fit, sigma


def _figures(cost_inputs):
    """name -> (factory, whether its numbers carry intervals)."""
    obs, loo, fit, sigma = cost_inputs
    bench = _bench_rows({"lade(4,5,5)": "4,5,5", "lade(5,15,15)": "5,15,15", "pld(10)": ""})
    outlier = bench.index[bench["method"] == "pld(10)"][0]  # one prompt far faster than the rest (its dot must show)
    bench.loc[outlier, "wall_s"] /= 8
    bench.loc[outlier, "speedup"] *= 8
    summary = ex.speedup_summary(bench)
    labels = ex.ablation_methods(5)
    ablation = _bench_rows({m.name: m.config_label() for m in labels.values()})
    scaling = _bench_rows({f"lade({n},{w},{w})": f"{n},{w},{w}" for n in (3, 5) for w in (1, 2, 4)})
    few = scaling[scaling["prompt_id"].astype(int) < 84]  # 3 prompts: dots, no intervals
    sampling = pd.DataFrame([{"prompt_set": "humaneval", "prompt_id": str(p), "temperature": t, "method": m,
                              "new_tokens": 32, "wall_s": 2.0 + 0.1 * p + (0.3 * t if m == "lade" else 0),
                              "tokens_per_s": 0.0, "forward_calls": 32 if m == "plain" else 20 + p,
                              "compression": 0.0, "speedup": 1.0}
                             for t in (0.3, 0.7, 1.0) for p in range(6) for m in ("plain", "lade")])
    dist = pd.DataFrame([{"sampler": s, "sample": i, "position": pos, "token": (i + pos) % 4,
                          "text": str((i + pos) % 4)}
                         for s in ("plain", "plain (independent seeds)", "lade") for i in range(8) for pos in range(3)])
    ranks = pd.DataFrame({"label": ["1 rank", "2 ranks", "reference"], "ranks": [1, 2, 1],
                          "compression": [1.4, 1.5, 1.5], "step_tokens_per_rank": [12.0, 7.0, 20.0]})
    measured = pd.DataFrame({"q": [1, 4, 16, 64], "seconds": [0.05, 0.07, 0.09, 0.17]})
    measured["relative"] = measured["seconds"] / 0.05
    curves = gm.latency_curves(fit, sigma, ["Llama-2-7B"], [1, 2, 8, 32, 128, 512])
    grid = gm.predict_grid(fit, sigma, REFERENCE, loo, ["Llama-2-7B", "Llama-2-13B"])
    validation = pd.DataFrame({"results_file": ["a.jsonl"] * 3, "prompt_set": ["mt_bench"] * 3,
                               "method": ["x", "y", "z"], "config": ["4,5,5", "5,7,7", "8,0,2,16,2"], "prompts": 3,
                               "speedup": [0.7, 0.9, 1.1], "speedup_low": [0.6, 0.8, 0.95],
                               "speedup_high": [0.8, 1.0, 1.3], "predicted_speedup": [0.75, 0.85, 1.05]})
    validation["error"] = validation["predicted_speedup"] / validation["speedup"] - 1
    spec = pd.concat([_bench_rows({"lade-auto": "auto"}, seed=k).assign(prompt_set=f"spec_bench:{task}")
                      for k, task in enumerate(("translation", "qa"))], ignore_index=True)
    spec["model"] = "m"
    spec.attrs["provenance"] = PROVENANCE
    corpus = pd.concat([_bench_rows({"lade-auto": "auto", "lade-auto+corpus(10)": "auto"}, prompts=2, seed=k)
                        .assign(prompt_set=f"spec_bench:{task}", workload="spec_bench")
                        for k, task in enumerate(("translation", "qa"))]
                       + [_bench_rows({"lade-auto": "auto"}, seed=5).assign(prompt_set="two_turns",
                                                                             workload="two_turns")], ignore_index=True)
    corpus["corpus_requests"] = corpus["method"].map({"greedy": -1, "lade-auto": 0, "lade-auto+corpus(10)": 10})
    corpus["model"] = "m"
    corpus.attrs["provenance"] = PROVENANCE
    batches = _batch_rows()
    batch_curve = gm.predict_batches(fit, sigma, grid, [1, 2, 4, 8, 16])
    return {
        "batch_throughput": (lambda: fb.batch_throughput_plot(summarize_batches(batches), batches,
                                                              step_width_quantiles(batches), "lade-auto", "t"), True),
        "batch_prediction": (lambda: fb.batch_prediction_plot(batch_curve, "Llama-2-7B", "chat", "t"), True),
        "speedup_bars": (lambda: fg.speedup_bars(bench, summary, ex.published_speedups("MT-Bench", "Llama-2"),
                                                 fg.title("t", "embedded", "MT-Bench", "cpu")), True),
        "speedup_by_model": (lambda: fg.speedup_by_model(
            pd.concat([summary.assign(model=m) for m in ("Llama-2-7b-chat", "other")], ignore_index=True),
            ex.published_speedups("MT-Bench", "Llama-2"), "t"), True),
        "spec_bench": (lambda: sb.spec_bench_plot(sb.task_summary(spec), sb.published_leaderboard(), sb.TASK_LABELS,
                                                  "t", rows=spec), True),
        "corpus": (lambda: fr.corpus_plot(cb.corpus_summary(corpus), "t", rows=corpus), True),
        "scaling": (lambda: fg.scaling_plot(ex.scaling_table(scaling, 135_000_000), "t"), True),
        "scaling_few": (lambda: fg.scaling_plot(ex.scaling_table(few, 135_000_000), "t", rows=few), False),
        "ranks": (lambda: fg.ranks_plot(ranks, "t"), False),
        "sampling": (lambda: fg.sampling_plot(sampling, "t"), True),
        "distribution": (lambda: fg.distribution_plot(dist, ex.total_variation(dist), "t"), False),
        "ablation": (lambda: fg.ablation_plot(ex.ablation_table(ablation, labels), list(labels), "t"), True),
        "latency": (lambda: fc.latency_plot(curves, measured, gm.published_step_costs(loo), "Llama-2-7B", "cpu", "t"),
                    True),
        "heatmap": (lambda: fc.gpu_speedup_heatmap(grid, gm.best_configs(grid), "chat", "t"), True),
        "rtx3090": (lambda: fc.rtx3090_plot(gm.gpu_case(loo, "RTX 3090", sigma["RTX 3090"]), "t"), True),
        "calibration": (lambda: fc.calibration_plot(loo, "t"), True),
        "cpu_validation": (lambda: fc.cpu_validation_plot(validation, vd.median_abs_error(validation), "t"), True),
    }


def _has_intervals(fig) -> bool:
    """Error bars, a shaded band, or interval text (heatmap cells: 'low-high')."""
    for ax in fig.axes:
        if any(isinstance(c, matplotlib.container.ErrorbarContainer) for c in ax.containers):
            return True
        if any(isinstance(c, matplotlib.collections.PolyCollection) for c in ax.collections):
            return True
        if any(re.search(r"\d\.\d\d-\d\.\d\d", t.get_text()) for t in ax.texts):
            return True
    return False


def _points_outside(ax) -> list[tuple[float, float]]:
    """Marker points (single prompts, measured values) that the axes limits cut off."""
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    outside = []
    for line in ax.get_lines():
        if line.get_marker() in (None, "None", "", " "):
            continue
        for x, y in zip(np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)):
            if np.isfinite(x) and np.isfinite(y) and not (x0 <= x <= x1 and y0 <= y <= y1):
                outside.append((float(x), float(y)))
    return outside


def _drawn_texts(fig) -> list:
    """Every text the figure draws: titles, labels, legends, annotations and the tick labels inside the view."""
    hidden = {id(t) for ax in fig.axes if not ax.get_visible() for t in ax.findobj(matplotlib.text.Text)}
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            span = (high - low) * 1e-6
            hidden |= {id(label) for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                       if not low - span <= tick.get_loc() <= high + span for label in (tick.label1, tick.label2)}
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()
            and id(t) not in hidden and (t.axes is None or t.axes.get_visible())]


def text_problems(fig) -> list[str]:
    """Texts that overlap each other (by more than a sliver), leave the figure, or are clipped by their axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t, t.get_window_extent(renderer)) for t in _drawn_texts(fig)]
    problems = []
    for i, (a, box_a) in enumerate(boxes):
        if not fig.bbox.contains(box_a.x0 + 1, box_a.y0 + 1) or not fig.bbox.contains(box_a.x1 - 1, box_a.y1 - 1):
            problems.append(f"outside the figure: {a.get_text()!r}")
        if a.get_clip_on() and a.axes is not None and a.get_clip_box() is not None \
                and matplotlib.transforms.Bbox.intersection(box_a, a.axes.bbox) != box_a:
            problems.append(f"clipped by its axes: {a.get_text()!r}")
        for b, box_b in boxes[i + 1:]:
            inter = matplotlib.transforms.Bbox.intersection(box_a, box_b)
            if inter is None:
                continue
            smaller = min(box_a.width * box_a.height, box_b.width * box_b.height) or 1.0
            rotated = a.get_rotation() % 180 or b.get_rotation() % 180  # axis-aligned boxes of slanted text overlap
            if inter.width * inter.height / smaller > (0.3 if rotated else 0.05):
                problems.append(f"overlap: {a.get_text()!r} / {b.get_text()!r}")
    return problems


def unity_problems(fig) -> list[str]:
    """A speedup axis without a visible 1x line above its bars."""
    problems = []
    for ax in [a for a in fig.axes if a.get_visible()]:
        for horizontal, label in ((True, ax.get_ylabel()), (False, ax.get_xlabel())):
            if "speedup" not in label.lower():
                continue
            lines = [line for line in ax.get_lines() if line.get_gid() == fs.UNITY and line.get_visible()
                     and set(np.asarray(line.get_ydata() if horizontal else line.get_xdata(), float)) == {1.0}]
            top = max((p.get_zorder() for p in ax.patches), default=0)
            if not any(line.get_zorder() > top for line in lines):
                problems.append(f"no y = 1 line on {label!r}")
    return problems


def _is_measured(patch) -> bool:
    return matplotlib.colors.to_hex(patch.get_facecolor(), keep_alpha=False) == fs.MEASURED.lower()


def mixing_problems(fig) -> list[str]:
    """Published (hatched) and measured bars on one axis need a separator between them and group headers naming
    each group's device and precision."""
    problems = []
    for ax in fig.axes:
        bars = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)]
        published = [p for p in bars if p.get_hatch()]
        measured = [p for p in bars if not p.get_hatch() and _is_measured(p)]
        if not published or not measured:
            continue
        gap = (max(p.get_x() + p.get_width() for p in published), min(p.get_x() for p in measured))
        rules = [line for line in ax.get_lines() if line.get_gid() == "separator"
                 and gap[0] <= np.asarray(line.get_xdata(), float)[0] <= gap[1]]
        headers = [t.get_text() for t in ax.texts if t.get_gid() == fs.GROUP_HEADER]
        if not rules:
            problems.append(f"{ax.get_ylabel()!r}: published and measured bars without a separator")
        if len(headers) < 2 or not all(PRECISION.search(h) for h in headers):
            problems.append(f"{ax.get_ylabel()!r}: group headers must name device and precision, got {headers}")
    return problems


def test_the_figure_checks_catch_what_they_check():
    """A deliberately bad figure (overlapping labels, a speedup axis without its 1x line, published and measured
    bars mixed without a separator or headers) must fail each check; otherwise a passing check proves nothing."""
    fig, ax = matplotlib.pyplot.subplots()
    ax.bar([0, 1], [1.5, 0.8], **fs.PUBLISHED_BAR)
    ax.bar([2, 3], [1.1, 0.9], **fs.MEASURED_BAR)
    ax.set_ylabel("speedup over greedy (x)")
    ax.text(0.5, 1.2, "a long note on the first bar")
    ax.text(0.6, 1.2, "another long note on top of it")
    assert any("overlap" in p for p in text_problems(fig))
    assert unity_problems(fig) and mixing_problems(fig)
    fs.unity(ax)
    fs.separator(ax, 1.5)
    fs.group_header(ax, 0.5, "published: A100, fp16")
    fs.group_header(ax, 2.5, "measured here: CPU, fp32")
    assert not unity_problems(fig) and not mixing_problems(fig)
    matplotlib.pyplot.close(fig)


def test_save_requires_provenance_and_stamps_it(tmp_path, monkeypatch):
    """A figure must say which run it draws: `save` has no default for provenance, refuses a record without a
    commit, and writes the commit and weights digest into the PNG and PDF metadata."""
    monkeypatch.setenv("LADE_FIGURES_DIR", str(tmp_path))
    fig, ax = matplotlib.pyplot.subplots()
    ax.plot([0, 1], [0, 1])
    with pytest.raises(TypeError):
        fg.save(fig, "x", False)  # noqa  (the missing argument is the point)
    with pytest.raises(ValueError, match="provenance"):
        fg.save(fig, "x", False, {})
    png, pdf = fg.save(fig, "x", False, {**PROVENANCE, "git_dirty": True})
    from PIL import Image
    assert Image.open(png).info["Description"] == "git abc (dirty); weights sha256 f00"
    assert re.search(rb"git abc \\?\(dirty\\?\); weights sha256 f00", pdf.read_bytes())  # PDF escapes parentheses
    fig.suptitle("heading\nmodel: m")
    fg.save(fig, "x", False, {**PROVENANCE, "git_dirty": True})
    shown = [t.get_text() for t in fig.texts if t.get_gid() == fs.STAMP and t.get_visible()]
    assert shown == ["heading\nmodel: m\nresults: commit abc, dirty tree"]  # on the figure, where a reader sees it
    fg.save(fig, "x", False, {**PROVENANCE, "git_commit": "0123456789abcdef"})  # saving again replaces the stamp
    shown = [t.get_text() for t in fig.texts if t.get_gid() == fs.STAMP]
    assert shown == ["heading\nmodel: m\nresults: commit 0123456"]
    matplotlib.pyplot.close(fig)


def test_figures_render_cleanly_and_identically(cost_inputs, tmp_path, monkeypatch):
    fg.setup_style()
    for name, (factory, intervals) in _figures(cost_inputs).items():
        saved = []
        for attempt in ("a", "b"):  # the same results plotted twice, as a recompute=False run re-plots them
            monkeypatch.setenv("LADE_FIGURES_DIR", str(tmp_path / attempt))
            fig = factory()
            saved.append([p.read_bytes() for p in fg.save(fig, name, False, PROVENANCE)])
            if attempt == "b":
                matplotlib.pyplot.close(fig)
                continue
            fig.canvas.draw()  # the saved figure, checked
            stamps = [t.get_text().split("\n")[-1] for t in _drawn_texts(fig) if t.get_gid() == fs.STAMP]
            axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
            for ax in axes:
                assert ax.get_xlabel() or ax.get_ylabel() or ax.get_title(), f"{name}: an axes without labels"
            fg.clean_ticks(fig)
            fig.canvas.draw()
            ticks = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
            assert not [t for t in ticks if ARTEFACT.search(t)], f"{name}: float artefacts in {ticks}"
            assert not intervals or _has_intervals(fig), f"{name}: no error bars or bands"
            for ax in axes:
                assert not _points_outside(ax), f"{name}: data points outside the axes limits {_points_outside(ax)}"
            assert not text_problems(fig), f"{name}: {text_problems(fig)}"
            assert not unity_problems(fig), f"{name}: {unity_problems(fig)}"
            assert not mixing_problems(fig), f"{name}: {mixing_problems(fig)}"
            renderer = fig.canvas.get_renderer()
            for legend in fig.legends:
                box = legend.get_window_extent(renderer)
                assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in axes), f"{name}: legend on axes"
            matplotlib.pyplot.close(fig)
        assert stamps == [fs.commit_label(PROVENANCE)], f"{name}: the results commit is not shown: {stamps}"
        assert saved[0][0] == saved[1][0], f"{name}: PNG bytes differ"
        assert saved[0][1] == saved[1][1], f"{name}: PDF bytes differ"
        assert b"weights sha256 f00" in saved[0][1]


def test_every_figure_function_is_drawn_and_stamped(cost_inputs):
    """Each plotting function of the figure modules is among the figures the test above draws, saves and checks
    for the results commit, so a new figure cannot skip the stamp unnoticed."""
    import inspect

    sources = "\n".join(inspect.getsource(factory) for factory, _ in _figures(cost_inputs).values())
    drawn = set(re.findall(r"\.(\w+)\(", sources))
    modules = (fg, fr, fb, fc)
    functions = {name for module in modules for name, f in vars(module).items()
                 if inspect.isfunction(f) and f.__module__ == module.__name__ and not name.startswith("_")
                 and "plt.Figure" in str(inspect.signature(f).return_annotation)}
    assert functions and not functions - drawn, f"figure functions not drawn by the figure test: {functions - drawn}"


def test_titles_name_the_model():
    assert "model: SmolLM2-135M-Instruct |" in fg.title("x", "embedded", "d", "cpu")
    assert fg.model_label("/models/Llama-2-7b-chat-hf", "torch.float16") == "Llama-2-7b-chat-hf, fp16"
    assert fg._number(0.30000000000000004) == "0.3" and fg._number(1e-7) == "1e-07"


def test_prompt_counts_name_the_headline_methods_that_ran_more():
    assert fg.prompt_counts({"n_prompts": {"humaneval": 5}}, "humaneval") == "5 prompts"
    assert fg.prompt_counts({"n_prompts": 4, "headline": [], "headline_prompts": None}, "x") == "4 prompts"
    params = {"n_prompts": {"humaneval": 5, "gsm8k": 3}, "headline": ["lade-auto"],
              "headline_prompts": {"humaneval": 45, "gsm8k": 3}}
    assert fg.prompt_counts(params, "humaneval") == "5 prompts (greedy and lade-auto: 45)"
    assert fg.prompt_counts(params, "gsm8k") == "3 prompts"


def test_count_range_states_counts_per_set_as_their_range():
    assert fg.count_range(2) == "2"
    assert fg.count_range({"a": 2, "b": 5, "c": 2}) == "2-5"
    assert fg.count_range({"a": 3, "b": 3}) == "3"
