"""The GPU cost model (lab.harness.costmodel), its calibration on published measurements (lab.studies.calibration), the
calibrated predictions (lab.studies.gpu_model) and the validation formula on this device (lab.studies.validation)."""

import json

import numpy as np
import pandas as pd
import pytest

from cost_data import REFERENCE
from lab.harness import costmodel as cm
from lab.harness.paths import published
from lab.harness.stats import Z95
from lab.pipeline.specs import config_params
from lab.studies import calibration as cal
from lab.studies import gpu_model as gm
from lab.studies import validation as vd
from lab.studies.validation import HOST_S
from lade.cost import LatencyProfile, step_latency

LOOKUP = cal.compression_lookup(REFERENCE)


@pytest.fixture(scope="module")
def calibration():
    obs = cal.observations(cal.load_published())
    return obs, cal.leave_one_out(obs, LOOKUP)


def test_shapes_give_the_published_parameter_counts():
    """Every shape's parameter count is within 1% of the published one; Llama-2-70B and CodeLlama-34B only with
    grouped-query attention (8 KV heads): with full multi-head attention 70B would have 77.9B parameters."""
    table = pd.read_csv(published("model_shapes"))
    relative = [cm.shape(model).params / count - 1 for model, count in zip(table["model"], table["published_params"])]
    assert (np.abs(relative) < 0.01).all(), table.assign(relative_difference=relative)
    mha = cm.Shape(80, 8192, 64, 64, 28672, 32000)
    assert mha.params / cm.shape("Llama-2-70B").params - 1 > 0.1
    assert cm.shape("Llama-2-70B").kv_dim == 1024 and cm.shape("Llama-2-7B").kv_dim == 4096


def test_latency_on_known_numbers():
    """No overheads, full efficiency: a 1-token step is bandwidth-bound (weights + KV cache over the bandwidth); a
    1000-token step is compute-bound at peak x q / (q + q_half); attention FLOPs and score traffic grow with q."""
    s = cm.Shape(2, 64, 4, 2, 128, 100)
    g = cm.Gpu("toy", peak_tflops=1e-6, bandwidth_gbs=1.0, memory_gb=1.0)  # 1 MFLOP/s, 1 GB/s
    p = cm.LatencyParams(t_step=0.0, t_layer=0.0, bandwidth_eff=1.0, flop_eff=1.0, q_half=1.0, host_s=0.0,
                         eager_attention=False)
    kv = 2 * s.layers * s.kv_dim * 10 * cm.DTYPE_BYTES
    assert cm.latency(s, g, p, 1, 10) == pytest.approx(max((s.matmul_params * 2 + kv) / 1e9,
                                                           cm.step_flops(s, 1, 10) * 2 / 1e6))
    q = 1000
    assert cm.latency(s, g, p, q, 10) == pytest.approx(float(cm.step_flops(s, q, 10)) * (q + 1) / q / 1e6)
    eager = cm.LatencyParams(**{**p.__dict__, "eager_attention": True})
    assert cm.step_bytes(s, 8, 10, True) - cm.step_bytes(s, 8, 10, False) == 2 * 4 * 8 * 18 * cm.SCORE_BYTES
    assert cm.latency(s, g, eager, 4, 10) >= cm.latency(s, g, p, 4, 10)
    with pytest.raises(ValueError, match="at least one token"):
        cm.latency(s, g, p, 0)


def test_speedup_prices_the_step_mix_with_the_core_rule():
    lat = lambda q: 0.02 + 0.001 * q  # noqa: E731
    expected = 1.5 * lat(1) / (step_latency(lat, 9.0, 0.5) + 0.002)
    assert cm.speedup(1.5, lat, 9.0, 0.5, 0.002) == pytest.approx(expected)


def test_published_table_is_sourced_and_checked():
    """Every row names its source, a URL and where in it the number is; calibrated rows have a configuration."""
    table = cal.load_published()
    assert table["source"].str.strip().all() and table["url"].str.startswith("https://").all()
    assert table["location"].str.strip().all()
    used = table[table["calibrate_speedup"]]
    assert used["ngram_size"].notna().all() and used["speedup"].notna().all()
    assert set(used["gpu"]) == {"A100 80GB SXM", "RTX 3090"}


def test_calibration_reproduces_each_point_within_its_reported_error(calibration):
    """The fit on all points puts every published value inside the 95% band the model reports for it
    (+- Z95 x sigma_loo in log, sigma_loo being the leave-one-out error of the point's kind and GPU class)."""
    _, loo = calibration
    inside = np.abs(np.log(loo["predicted"] / loo["published"])) <= Z95 * loo["sigma_loo"]
    assert inside.all(), loo.loc[~inside, ["point", "kind", "published", "predicted", "sigma_loo"]]
    assert loo["sigma_loo"].gt(0).all() and loo["sigma_loo"].lt(0.5).all()


def test_leave_one_out_is_a_refit_without_the_point(calibration):
    """predicted_loo of a point is what a fit on the other points predicts for it (recomputed here for two points),
    and held-out errors are on the whole larger than in-sample ones."""
    obs, loo = calibration
    for point, kind in (("hf-3090-default", "speedup"), ("blog-34b-humaneval", "baseline")):
        i = loo.index[(loo["point"] == point) & (loo["kind"] == kind)][0]
        rest = cal.fit(obs.drop(index=obs.index[i]), LOOKUP)
        assert cal.predict(obs.iloc[[i]], rest, LOOKUP)[0] == pytest.approx(loo.loc[i, "predicted_loo"])
    assert loo["error_loo"].abs().mean() >= loo["error"].abs().mean()
    assert loo["error_loo"].tolist() == pytest.approx((loo["predicted_loo"] / loo["published"] - 1).tolist())


def test_transfer_rule_and_class_uncertainty(calibration):
    """A GPU class without published speedups takes the geometric mean of the fitted flop efficiencies and the
    larger of the transfer and pooled leave-one-out errors as its uncertainty."""
    obs, loo = calibration
    fit = cal.fit(obs, LOOKUP)
    assert fit.params("H100 SXM").flop_eff == pytest.approx(np.exp(np.mean(np.log(list(fit.flop_eff.values())))))
    transfer = cal.transfer_error(obs, LOOKUP, "RTX 3090")
    assert len(transfer) >= 2 and (transfer["gpu"] == "RTX 3090").all()
    sigma = cal.class_sigma(loo, transfer, list(cm.gpus()))
    assert cal.measured_classes(loo) == {"A100 80GB SXM", "RTX 3090"}
    assert sigma["H100 SXM"] == sigma["T4"] >= np.sqrt(np.mean(transfer["log_error_transfer"] ** 2))
    with pytest.raises(ValueError, match="only shared parameters"):
        cal.fit(obs, LOOKUP, fixed={"flop_eff": 0.5})


def test_predictions_grid_and_recommendations(calibration):
    """Every GPU class x model x task x config is predicted with a band around it; cells whose weights do not fit
    are never recommended; a verdict follows the band."""
    obs, loo = calibration
    fit = cal.fit(obs, LOOKUP)
    sigma = cal.class_sigma(loo, cal.transfer_error(obs, LOOKUP, "RTX 3090"), list(cm.gpus()))
    grid = gm.predict_grid(fit, sigma, REFERENCE, loo, ["Llama-2-7B", "Llama-2-70B"])
    assert len(grid) == len(cm.gpus()) * 2 * len(REFERENCE)
    assert (grid["speedup_low"] < grid["speedup"]).all() and (grid["speedup"] < grid["speedup_high"]).all()
    assert not grid[(grid["model"] == "Llama-2-70B") & (grid["gpu"] == "RTX 3090")]["fits_memory"].any()
    best = gm.best_configs(grid)
    assert not ((best["model"] == "Llama-2-70B") & (best["gpu"] == "RTX 3090")).any()
    pays = best["verdict"] == "pays"
    assert (best.loc[pays, "speedup_low"] > 1).all()
    a100 = grid[(grid["gpu"] == "A100 80GB SXM") & (grid["model"] == "Llama-2-7B") & (grid["config"] == "5,15,15")
                & (grid["task"] == "chat")]
    assert a100["published_point"].iloc[0] in {"blog-7b-mtbench", "paper-7b-mtbench", "paper-7b-mtbench-prompt"}
    text = gm.when_it_pays(best, loo, "chat")
    assert "Llama-2-7B" in text and "leave-one-out" in text


def test_full_steps_price_the_warm_pool():
    row = {"N": 5, "W": 15, "G": 15, "step_tokens": 70.0, "single_token_steps": 0.0}
    assert gm.step_mix(row, full_steps=True) == (121.0, 0.0)
    assert gm.step_mix(row, full_steps=False) == (70.0, 0.0)
    pool_only = {"N": 8, "W": 0, "G": 2, "step_tokens": 2.4, "single_token_steps": 0.9}
    assert gm.step_mix(pool_only, full_steps=True) == pytest.approx((0.9 + 0.1 * 15, 0.9))


def _runs(profile: LatencyProfile, host: float) -> pd.DataFrame:
    """Benchmark rows whose wall times follow the validation formula exactly."""
    rows = []
    for i, prompt_tokens in enumerate((40, 90)):
        for method, config, calls, step, single in (("greedy", "", 64, 1.0, 1.0),
                                                    ("lade(4,5,5)", "4,5,5", 40, 20.0, 0.0),
                                                    ("lade-auto", "8,0,2,16,2", 50, 2.5, 0.8)):
            extra = HOST_S if method != "greedy" else 0.0
            fwd = profile(prompt_tokens) + (calls - 1) * step_latency(profile, step, single)
            wall = fwd + (calls - 1) * (host + extra)
            rows.append({"prompt_set": "s", "prompt_id": str(i), "method": method, "config": config,
                         "prompt_tokens": prompt_tokens, "new_tokens": 64, "wall_s": wall, "forward_calls": calls,
                         "forward_s": wall - host * calls if method == "greedy" else fwd, "step_tokens": step,
                         "single_token_steps": single})
    return pd.DataFrame(rows)


def test_validation_formula_recovers_runs_that_follow_it():
    """Rows generated by the model itself are predicted exactly (error 0): the prefill, the step mix and the host
    time enter as documented; pld-like rows without a config are left out."""
    profile = LatencyProfile("toy", 64, (1, 8, 32, 128), (0.05, 0.06, 0.09, 0.2))
    rows = _runs(profile, host=0.001)
    rows.loc[rows["method"] == "greedy", "forward_s"] = rows["wall_s"] - 0.001 * rows["forward_calls"]
    table = vd.validate(rows, profile, "toy.jsonl")
    assert set(table["method"]) == {"lade(4,5,5)", "lade-auto"}
    assert table["predicted_speedup"].tolist() == pytest.approx(table["speedup"].tolist(), rel=1e-3)
    assert vd.median_abs_error(table) < 1e-3
    with pytest.raises(ValueError, match="greedy"):
        vd.plain_host_s(rows[rows["method"] != "greedy"])


def test_a_config_json_is_counted_by_the_shape_rule(tmp_path):
    """The planner's parameter count of a local model (specs.config_params) is costmodel.Shape.params of its
    config.json, one rule for both; a tied LM head counts its embedding once."""
    config = {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert config_params(str(tmp_path)) == cm.Shape(2, 64, 4, 2, 128, 100).params
    (tmp_path / "config.json").write_text(json.dumps(config | {"tie_word_embeddings": True}))
    assert config_params(str(tmp_path)) == cm.Shape(2, 64, 4, 2, 128, 100).params - 100 * 64


def test_a_batch_reads_the_weights_once():
    """B rows read the weights once but each its own KV cache, and do B times one row's FLOPs; GEMM efficiency
    follows the B x q rows the matmuls see (a compute-bound toy device shows it exactly)."""
    s = cm.Shape(2, 64, 4, 2, 128, 100)
    kv = 2 * s.layers * s.kv_dim * 10 * cm.DTYPE_BYTES
    assert cm.step_bytes(s, 1, 10, False, 4) - cm.step_bytes(s, 1, 10, False) == pytest.approx(3 * kv)
    assert cm.step_flops(s, 3, 10, 4) == pytest.approx(4 * cm.step_flops(s, 3, 10))
    g = cm.Gpu("toy", peak_tflops=1e-6, bandwidth_gbs=1e6, memory_gb=1.0)  # 1 MFLOP/s: compute-bound
    p = cm.LatencyParams(t_step=0.0, t_layer=0.0, bandwidth_eff=1.0, flop_eff=1.0, q_half=4.0, host_s=0.0,
                         eager_attention=False)
    for batch, q in ((1, 1), (4, 1), (4, 7), (16, 3)):
        rows = batch * q
        expected = float(cm.step_flops(s, q, 10, batch)) / (1e6 * rows / (rows + 4.0))
        assert cm.latency(s, g, p, q, 10, batch) == pytest.approx(expected)
    with pytest.raises(ValueError, match="at least one row"):
        cm.latency(s, g, p, 1, 10, 0)


def test_batch_speedup_is_the_single_sequence_speedup_at_batch_one_and_falls_with_the_batch():
    """At batch 1 the batched price is `speedup` of the single-sequence latency; a wide config on a GPU loses its
    free compute as rows are added (plain steps stay bandwidth-bound longer), so its predicted ratio never rises."""
    s, g = cm.shape("Llama-2-7B"), cm.gpu("A100 80GB SXM")
    p = cm.LatencyParams(t_step=2e-3, t_layer=1e-4, bandwidth_eff=0.8, flop_eff=0.6, q_half=32.0, host_s=1e-3)
    lat = lambda q: cm.latency(s, g, p, q)  # noqa: E731
    assert cm.batch_speedup(s, g, p, 1, 2.5, 121.0, 0.0) == pytest.approx(cm.speedup(2.5, lat, 121.0, 0.0, 1e-3))
    curve = [cm.batch_speedup(s, g, p, b, 2.5, 121.0, 0.0) for b in (1, 2, 4, 8, 16, 32)]
    assert all(a >= b for a, b in zip(curve, curve[1:])) and curve[-1] < 1 < curve[0]


def test_batch_predictions_keep_or_adapt_the_config(calibration):
    """At batch 1 the fixed choice is notebook 04's fastest prediction of the cell; the batch-aware choice is never
    below the fixed one or below plain decoding (1x, where it falls back to plain steps)."""
    obs, loo = calibration
    fit = cal.fit(obs, LOOKUP)
    sigma = cal.class_sigma(loo, cal.transfer_error(obs, LOOKUP, "RTX 3090"), list(cm.gpus()))
    grid = gm.predict_grid(fit, sigma, REFERENCE, loo, ["Llama-2-7B"])
    curve = gm.predict_batches(fit, sigma, grid, [1, 4, 16])
    assert list(curve.columns) == list(gm.BATCH_PREDICTION_COLUMNS)
    assert len(curve) == len(cm.gpus()) * 2 * 3 * 2  # GPU x task x batch size x choice
    first = curve[(curve["batch_size"] == 1) & (curve["choice"] == "fixed")].set_index(["gpu", "task"])
    best = grid.loc[grid.groupby(["gpu", "task"])["speedup"].idxmax()].set_index(["gpu", "task"])
    assert np.allclose(first["speedup"], best.loc[first.index, "speedup"])
    pivot = curve.pivot_table(index=["gpu", "task", "batch_size"], columns="choice", values="speedup")
    assert (pivot["batch-aware"] >= pivot["fixed"] - 1e-12).all() and (pivot["batch-aware"] >= 1).all()
    plain = curve[curve["config"] == "plain"]
    assert (plain["speedup"] == 1).all() and (plain["speedup_low"] == plain["speedup_high"]).all()
