"""Flat batch steps (lab/studies/flat_steps.py): a flat step computes lade's padded step exactly, its sizing prices the
rows'
own tokens and weighs rows behind, and the experiment's rows equal plain batched greedy."""

import copy
from unittest import mock

import pytest
import torch

from lab.harness.methods import Method
from lab.harness.models import load_model
from lab.studies import flat_steps as fs
from lade.cache import new_cache
from lade.layout import build_layout, stack_layouts
from lade.model_call import ModelCall
from lade.tree import TokenTree
from tiny_hub import save_tiny_chat_model
from tiny_models import tiny_model

CPU = torch.device("cpu")
FREE = lambda q: 1e-3  # noqa: E731  a latency model where wide steps are free: adaptive configs draft


def _prefilled(model):
    """Three left-padded prompts of different lengths, prefilled -> (cache, last logits [3, V], mask [3, P])."""
    ids = torch.tensor([[0, 0, 0, 5, 6, 7, 8], [0, 9, 10, 11, 12, 13, 14], [15, 16, 17, 18, 19, 20, 21]])
    mask = (torch.arange(7) >= torch.tensor([[3], [1], [0]])).long()
    cache = new_cache(model)
    with torch.no_grad():
        last = ModelCall(model, cache, "mask").prefill(ids, mask)
    return cache, last, mask


def test_a_flat_step_computes_the_padded_step_exactly():
    """Rows of 1, 7 and 4 tokens (windows and trees): every kept row's logits and every real slot's cache entry equal
    those of lade's padded step."""
    model = tiny_model("llama", "sdpa")
    cache, last, mask = _prefilled(model)
    layouts = [build_layout(int(last[0].argmax()), torch.zeros(0, 0, dtype=torch.long), TokenTree([]), CPU),
               build_layout(int(last[1].argmax()), torch.tensor([[30, 31], [32, 33]]), TokenTree([(40, 41)]), CPU),
               build_layout(int(last[2].argmax()), torch.zeros(0, 0, dtype=torch.long), TokenTree([(42, 43), (44,)]),
                            CPU)]
    batch = stack_layouts(layouts)
    past, first = mask.shape[1], mask.sum(1)
    out = {}
    for kind in (ModelCall, fs.FlatCall):
        call = kind(model, copy.deepcopy(cache), "mask")
        with torch.no_grad():
            out[kind] = call.step(batch, first, past, mask.bool()), call.cache
    (padded, padded_cache), (flat, flat_cache) = out.values()
    for b, layout in enumerate(layouts):
        real = batch.kept_real(b)
        assert torch.allclose(flat[b, :real], padded[b, :real], atol=1e-5)
        for a, c in zip(padded_cache.layers, flat_cache.layers):
            assert torch.allclose(a.keys[b, :, : past + layout.size], c.keys[b, :, : past + layout.size], atol=1e-6)


def test_flat_steps_need_sdpa_attention():
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        fs.FlatCall(tiny_model("llama", "eager"), None, "mask")


def test_lag_weights_fall_with_the_tokens_a_row_is_ahead():
    assert fs.lag_weights([10, 10, 12], 2.0) == pytest.approx([1.0, 1.0, 1 / 2.718281828])
    assert fs.lag_weights([10, 30], 0) == [1.0, 1.0]


def test_flat_sizing_prices_the_rows_own_tokens_and_favours_rows_behind():
    """Each node costs one token: the row with good nodes feeds four and the others' weak nodes do not pay, unless the
    row with good nodes is far ahead, when its nodes buy little and the rows behind feed theirs."""
    forward = lambda n: 1.0 + 0.1 * n  # noqa: E731  seconds of a step feeding n tokens in all
    values, fixed = [[0.9, 0.8, 0.7, 0.6], [0.2], [0.2]], [1, 1, 1]
    assert fs.allocate_flat(values, fixed, forward) == [4, 0, 0]
    assert fs.allocate_flat(values, fixed, forward, weights=[0.01, 1, 1]) == [0, 1, 1]
    assert fs.allocate_flat([[0.01]] * 3, fixed, forward, margin=1.05) == [0, 0, 0]


def test_a_flat_method_is_a_lade_method():
    method = fs.flat_method(Method.lade(3, 2, 2))
    assert method.name == "lade(3,2,2)-flat" and method.generate_kwargs["lookahead_model_call"] is fs.FlatCall
    with pytest.raises(ValueError, match="lade method"):
        fs.flat_method(Method.greedy())


def test_the_experiment_matches_plain_batched_greedy(tmp_path):
    """Both feeds of an adaptive config on a tiny chat model, batches of 1 and 2: every row equals plain batched
    greedy's, the batch of two is fed flat and sized by allocate_flat, and the padded feed is lade's own."""
    model, tok = load_model(str(save_tiny_chat_model(tmp_path)))
    with mock.patch.object(fs, "_padded", wraps=fs._padded) as fed, \
            mock.patch.object(fs, "allocate_flat", wraps=fs.allocate_flat) as sized:
        df = fs.run_flat(model, tok, ("mt_bench",), (1, 2), Method.from_label("merged/8/adaptive"), 2, 8,
                         progress=False, latency=FREE, repeats=1)
    assert df["matches_greedy"].all() and (df["rows_identical"] == df["rows"]).all()
    assert set(df["method"]) == {"greedy", "lade(merged/8/adaptive)", "lade(merged/8/adaptive)-flat"}
    assert fed.called and sized.called
    assert df.attrs["provenance"]["params"]["lag"] == fs.LAG
