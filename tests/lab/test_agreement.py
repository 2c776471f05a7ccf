"""Agreement with plain greedy: first divergence, the per-method table, and exactness asserted only in fp32."""

import pandas as pd
import pytest
import torch

from lab.harness.agreement import agreement_table, check_agreement, first_divergence
from lab.harness.bench import run_benchmark
from lab.harness.methods import Method
from lab.harness.models import load_model
from tiny_hub import save_tiny_chat_model


def test_first_divergence():
    a = torch.tensor([5, 6, 7, 8])
    assert first_divergence(a, a.clone()) == -1
    assert first_divergence(a, torch.tensor([5, 6, 9, 8])) == 2
    assert first_divergence(a, torch.tensor([5, 6])) == 2  # stopped earlier: differs where it stopped
    assert first_divergence(torch.tensor([], dtype=torch.long), torch.tensor([1])) == 0


def _rows(dtype: str, matches: list[bool], positions: list[int]) -> pd.DataFrame:
    rows = [{"model": "m", "dtype": dtype, "prompt_set": "mt_bench", "prompt_id": str(i), "method": "greedy",
             "matches_greedy": True, "first_divergence": -1} for i in range(len(matches))]
    rows += [{"model": "m", "dtype": dtype, "prompt_set": "mt_bench", "prompt_id": str(i), "method": "lade(5,15,15)",
              "matches_greedy": ok, "first_divergence": pos} for i, (ok, pos) in enumerate(zip(matches, positions))]
    return pd.DataFrame(rows)


def test_reduced_precision_is_measured():
    """bf16: one of three outputs differs from token 7 on; reported (share 2/3, positions [7]), not raised."""
    table = check_agreement(_rows("bfloat16", [True, False, True], [-1, 7, -1]))
    row = table.iloc[0]
    assert list(table["method"]) == ["lade(5,15,15)"]
    assert row["identical"] == pytest.approx(2 / 3) and row["divergence_positions"] == [7]
    assert row["median_divergence"] == 7


def test_fp32_mismatch_is_an_error_naming_the_prompt():
    with pytest.raises(AssertionError, match=r"float32: m/mt_bench/1/lade\(5,15,15\) \(token 3\)"):
        check_agreement(_rows("float32", [True, False], [-1, 3]))
    assert agreement_table(_rows("float32", [True, True], [-1, -1]))["identical"].tolist() == [1.0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_benchmark_rows_record_agreement_in_reduced_precision(tmp_path, dtype):
    """A tiny model in bf16/fp16: every row says its dtype, whether it equals plain greedy in that dtype and where
    it first differs, and the check reports instead of asserting."""
    torch.set_num_threads(1)
    model, tok = load_model(str(save_tiny_chat_model(tmp_path / "tiny")), dtype=dtype)
    rows = run_benchmark(model, tok, ["mt_bench"], [Method.lade(4, 5, 5)], max_new_tokens=24, n_prompts=3,
                         ignore_eos=True, progress=False, warmup=False)
    assert set(rows["dtype"]) == {dtype}
    lade_rows = rows[rows["method"] == "lade(4,5,5)"]
    assert ((lade_rows["first_divergence"] == -1) == lade_rows["matches_greedy"]).all()
    assert (lade_rows["first_divergence"] < 24).all()
    table = check_agreement(rows)
    assert table["prompts"].tolist() == [3] and 0.0 <= table["identical"].iloc[0] <= 1.0
