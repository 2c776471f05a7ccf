"""Notebook 05's losslessness check with power: do lade's sampled k-token continuations follow the joint law of plain
`model.generate(do_sample=True)`, on prompts and temperatures where drafts are often accepted?

Per setting (prompt, temperature) these samplers each draw n continuations of k tokens (EOS ignored):
- "pilot": plain sampling with seeds of its own. It alone fixes the bins, before any other sample is drawn: each
  continuation the pilot drew at least MIN_PILOT times is a bin, every other continuation falls into one pooled bin
  (per position likewise, for the marginals);
- "plain": the reference; "plain control": plain sampling with other seeds (a correct sampler, through the same test);
- "lade" (a fixed config) and "lade auto" (lookahead_config="auto");
- "biased" (optional): lade with a verifier of known bias (BIASED_DEVIATION), `replicates` independent runs of n,
  each tested against a plain reference of its own: the share rejected is the check's power at n.

The joint test is a two-sample G-test (scipy.stats.chi2_contingency, log-likelihood) of a sampler's bin counts
against the reference's. Every joint test of a check (settings x control, lade, lade auto) is one of a family,
each at level ALPHA / family size (Bonferroni), so a check of correct samplers passes with probability >= 1 - ALPHA.
The per-position marginals (the same test on the token at each position) are a second family, built the same way.
Compression = new tokens per forward of the sampler's rows (lade: each row's own steps, prefill included).

    python -m lab.studies.sampling_check --out data/results/sampling_check.jsonl [--size quick|default|full]

writes one row per sample (SAMPLE_COLUMNS) with its provenance, and prints the tests (TEST_COLUMNS) and the power
(POWER_COLUMNS), which `joint_tests`, `marginal_tests` and `power` recompute from the rows.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict, dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from scipy.stats import binomtest, chi2_contingency

import lade
from lab.harness.figure_style import MEASURED, OKABE_ITO, PUBLISHED, legend_below
from lab.harness.prompts import encode_prompt
from lab.harness.provenance import model_record, provenance
from lade.config import LookaheadConfig

SAMPLE_COLUMNS = ("setting", "temperature", "sampler", "replicate", "sample", "tokens", "forward_calls")
TEST_COLUMNS = ("setting", "sampler", "test", "position", "n", "bins", "statistic", "dof", "pvalue", "level",
                "reject", "compression")
POWER_COLUMNS = ("setting", "sampler", "test", "n", "replicates", "rejections", "power", "power_low", "power_high",
                 "level")
PILOT, REFERENCE, CONTROL, BIASED = "pilot", "plain", "plain control", "biased"
TESTED = (CONTROL, "lade", "lade auto")  # the samplers each test compares with the reference, in this order
ALPHA = 0.01  # the whole check's false-rejection rate for correct samplers (Bonferroni within each family)
MIN_PILOT = 5  # a continuation (a token, for the marginals) gets its own bin when the pilot drew it this often
BIASED_DEVIATION = ("a verifier that samples every candidate path independently and keeps the longest match, "
                    "instead of the multi-candidate rule's one draw chain per node")


@dataclass(frozen=True)
class Setting:
    name: str
    prompt: str | tuple[int, ...]  # text (encoded in prompt_format, lab.harness.prompts) or token ids
    temperature: float
    prompt_format: str = "auto"

    def encode(self, tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
        """-> input ids and attention mask [1, P]."""
        if not isinstance(self.prompt, str):
            ids = torch.tensor([self.prompt])
            return ids, torch.ones_like(ids)
        encoded = encode_prompt(tokenizer, self.prompt, "", self.prompt_format)
        return encoded.input_ids, encoded.attention_mask


REPEAT = "Repeat the sentence 'the cat sat on the mat' ten times."  # its drafts (prompt n-grams) are often accepted
SETTINGS = (Setting("repeat, T=0.7", REPEAT, 0.7), Setting("repeat, T=0.5", REPEAT, 0.5))


@dataclass(frozen=True)
class Size:
    samples: int  # n per sampler (and per biased replicate)
    tokens: int  # k new tokens per continuation
    replicates: int  # biased runs of n each (0: no power run)
    batch: int  # rows per generate call (lade "auto" runs one row per call)
    settings: int = len(SETTINGS)  # the first this many of SETTINGS


SIZES = {"smoke": Size(10, 4, 1, 10, 1),  # notebook 05's --quick run: the wiring, not a test with power
         "quick": Size(40, 6, 1, 20, 1), "default": Size(200, 8, 1, 20, 1),  # the default run: one power replicate
         "replicated": Size(200, 8, 4, 20, 1),  # default's n with 4 power replicates (embedded-cpu-full.yaml)
         "full": Size(1000, 8, 4, 50)}
CONFIG = "4,5,5"  # the fixed lookahead config (N,W,G)


def _draw(model, ids: torch.Tensor, mask: torch.Tensor, lookahead, gen: dict, n: int, seed: int, batch: int,
          strategy: Callable | None = None) -> tuple[list[list[int]], list[int]]:
    """n continuations of one prompt (ids, mask [1, P]) -> (their tokens [n][k], forwards per row [n]). lookahead:
    None (plain generate), a LookaheadConfig or "auto". Call i seeds torch with seed + i (lade draws its noise key
    from torch's generator; lade's rows draw their own noise, plain generate's rows their own tokens)."""
    tokens, forwards, k = [], [], gen["max_new_tokens"]
    batch = 1 if lookahead == "auto" else batch
    for i, start in enumerate(range(0, n, batch)):
        rows = min(batch, n - start)
        torch.manual_seed(seed + i)
        with torch.inference_mode():
            if lookahead is None:
                out = model.generate(ids.expand(rows, -1), attention_mask=mask.expand(rows, -1), **gen)
                forwards += [k] * rows
            else:
                extra = {} if strategy is None else {"lookahead_strategy": lambda *_: strategy()}
                out = lade.generate(model, ids.expand(rows, -1), lookahead, attention_mask=mask.expand(rows, -1),
                                    return_dict_in_generate=True, **extra, **gen)
                stats = out.row_stats or [out.lookahead_stats]
                forwards += [s.steps for s in stats]
                out = out.sequences
        tokens += out[:, -k:].tolist()  # [rows, k]
    return tokens, forwards


def sample_check(model, tokenizer, size: Size, settings: tuple[Setting, ...] | None = None, config: str = CONFIG,
                 seed: int = 0, biased: type | None = None, auto: bool = True, progress: bool = True,
                 **provenance_params) -> pd.DataFrame:
    """Draw every sampler's continuations (module docstring) -> one row per sample (SAMPLE_COLUMNS). biased: a lade
    strategy class with a biased verifier (tests.distribution.BiasedStrategy: BIASED_DEVIATION), or None. auto:
    whether "lade auto" runs. tokenizer: None where every setting's prompt is token ids. settings: None, the size's."""
    settings = SETTINGS[: size.settings] if settings is None else settings
    lookahead = LookaheadConfig.from_label(config)
    strategy = biased
    pad = tokenizer.pad_token_id if tokenizer is not None else model.generation_config.pad_token_id
    rows = []
    for s_index, setting in enumerate(settings):
        ids, mask = setting.encode(tokenizer)  # [1, P]
        gen = dict(do_sample=True, temperature=setting.temperature, top_k=0, top_p=1.0, max_new_tokens=size.tokens,
                   eos_token_id=None, pad_token_id=pad)
        plan = [(PILOT, 0, None, None), (REFERENCE, 0, None, None), (CONTROL, 0, None, None),
                ("lade", 0, lookahead, None)] + ([("lade auto", 0, "auto", None)] if auto else [])
        if strategy is not None:
            plan += [(name, r, cfg, strat) for r in range(size.replicates)
                     for name, cfg, strat in ((REFERENCE, None, None), (BIASED, lookahead, strategy))
                     if (name, r) != (REFERENCE, 0)]
        for p_index, (sampler, replicate, cfg, strat) in enumerate(plan):
            base = seed + 10**6 * (100 * s_index + p_index) + 10**4 * replicate  # disjoint seeds per draw
            tokens, forwards = _draw(model, ids, mask, cfg, gen, size.samples, base, size.batch, strat)
            rows += [{"setting": setting.name, "temperature": setting.temperature, "sampler": sampler,
                      "replicate": replicate, "sample": i, "tokens": " ".join(map(str, t)), "forward_calls": f}
                     for i, (t, f) in enumerate(zip(tokens, forwards))]
            if progress:
                print(f"{setting.name}: {sampler} (replicate {replicate}) drawn", flush=True)
    df = pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))
    df.attrs["provenance"] = provenance(
        model=getattr(model.config, "_name_or_path", ""), **model_record(model), size=asdict(size), config=config,
        settings=[asdict(s) for s in settings], seed=seed,
        biased=f"{biased.__module__}:{biased.__qualname__}" if biased else None, biased_deviation=BIASED_DEVIATION,
        alpha=ALPHA, min_pilot=MIN_PILOT, **provenance_params)
    return df


def pilot_bins(pilot: list[str], min_count: int = MIN_PILOT) -> dict[str, int]:
    """Outcomes the pilot drew at least `min_count` times -> their bin (in order of frequency); any other outcome
    falls into the pooled bin len(bins). Only the pilot's outcomes decide the bins."""
    counts = pd.Series(pilot).value_counts()
    return {outcome: i for i, outcome in enumerate(counts[counts >= min_count].index)}


def bin_counts(outcomes, bins: dict[str, int]) -> np.ndarray:
    """[len(bins) + 1] counts of `outcomes` per bin, the pooled bin last."""
    return np.bincount([bins.get(o, len(bins)) for o in outcomes], minlength=len(bins) + 1)


def g_test(reference: np.ndarray, other: np.ndarray) -> tuple[float, int, float]:
    """Two-sample G-test of two count vectors over the same bins -> (statistic, degrees of freedom, p-value); bins
    empty in both are dropped; one bin left gives (0, 0, 1)."""
    table = np.vstack([reference, other])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 0.0, 0, 1.0
    stat, p, dof, _ = chi2_contingency(table, correction=False, lambda_="log-likelihood")
    return float(stat), int(dof), float(p)


def compression(group: pd.DataFrame) -> float:
    """New tokens per forward of a sampler's rows."""
    k = group["tokens"].str.split().str.len()
    return float(k.sum() / group["forward_calls"].sum())


def _outcomes(group: pd.DataFrame, position: int | None) -> list[str]:
    return list(group["tokens"] if position is None else group["tokens"].str.split().str[position])


def _tests(samples: pd.DataFrame, positions: list[int | None]) -> pd.DataFrame:
    rows = []
    for setting, block in samples[samples["replicate"] == 0].groupby("setting", sort=False):
        by = {name: g for name, g in block.groupby("sampler")}
        for position in positions:
            bins = pilot_bins(_outcomes(by[PILOT], position))
            reference = bin_counts(_outcomes(by[REFERENCE], position), bins)
            for sampler in [s for s in TESTED if s in by]:
                stat, dof, p = g_test(reference, bin_counts(_outcomes(by[sampler], position), bins))
                rows.append({"setting": setting, "sampler": sampler, "test": "joint" if position is None else
                             "marginal", "position": -1 if position is None else position, "n": len(by[sampler]),
                             "bins": len(bins) + 1, "statistic": stat, "dof": dof, "pvalue": p,
                             "compression": compression(by[sampler])})
    out = pd.DataFrame(rows)
    out["level"] = ALPHA / len(out)  # Bonferroni over the family
    out["reject"] = out["pvalue"] < out["level"]
    return out[list(TEST_COLUMNS)]


def joint_tests(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, tested sampler): the G-test of whole continuations against the reference (TEST_COLUMNS),
    each at level ALPHA / number of rows."""
    return _tests(samples, [None])


def marginal_tests(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, tested sampler, position): the G-test of the token at that position, each at level
    ALPHA / number of rows."""
    k = samples["tokens"].iloc[0].count(" ") + 1
    return _tests(samples, list(range(k)))


def power(samples: pd.DataFrame) -> pd.DataFrame:
    """Per setting with biased runs and per test (joint; marginal: any position rejected): the share of the biased
    replicates rejected at the level of joint_tests / marginal_tests, each replicate of n tested against the plain
    reference of the same replicate, with its 95% Clopper-Pearson interval (POWER_COLUMNS); empty without biased
    runs."""
    tests = {"joint": joint_tests, "marginal": marginal_tests}
    levels = {name: float(test(samples)["level"].iloc[0]) for name, test in tests.items()}
    rows = []
    for setting, block in samples.groupby("setting", sort=False):
        biased = block[block["sampler"] == BIASED]
        if biased.empty:
            continue
        rejected = dict.fromkeys(tests, 0)
        for r, group in biased.groupby("replicate"):  # replicate r as a check of the biased sampler alone
            plain = block[(block["sampler"] == REFERENCE) & (block["replicate"] == r)]
            one = pd.concat([block[block["sampler"] == PILOT], plain, group.assign(sampler="lade")])
            for name, test in tests.items():
                rejected[name] += bool((test(one.assign(replicate=0))["pvalue"] < levels[name]).any())
        replicates = biased["replicate"].nunique()
        for name, count in rejected.items():
            low, high = binomtest(count, replicates).proportion_ci(0.95)
            rows.append({"setting": setting, "sampler": BIASED, "test": name, "n": len(biased) // replicates,
                         "replicates": replicates, "rejections": count, "power": count / replicates,
                         "power_low": low, "power_high": high, "level": levels[name]})
    return pd.DataFrame(rows, columns=list(POWER_COLUMNS))


def findings(samples: pd.DataFrame) -> list[str]:
    """The check's result as Markdown bullets, computed from its rows: each joint test against its level, the
    marginals' rejections, and the power against BIASED_DEVIATION."""
    joint, marginal, found = joint_tests(samples), marginal_tests(samples), power(samples)
    lines = [f"- {r.setting}, {r.sampler} (compression {r.compression:.2f}, n = {r.n}): joint G-test p = "
             f"{r.pvalue:.3g} ({'REJECTED' if r.reject else 'passes'} at level {r.level:.2g})"
             for r in joint.itertuples()]
    lines.append(f"- per-position marginals: {int(marginal['reject'].sum())} of {len(marginal)} tests rejected at "
                 f"level {marginal['level'].iloc[0]:.2g} each")
    lines += [f"- power against {BIASED_DEVIATION} ({r.setting}, n = {r.n}): {r.test} tests rejected {r.rejections} of "
              f"{r.replicates} replicates ({r.power:.0%}, 95% interval {r.power_low:.0%}-{r.power_high:.0%})"
              for r in found.itertuples()]
    return lines


def check_plot(samples: pd.DataFrame, heading: str) -> plt.Figure:
    """Left: each joint test's p-value (as -log10 p) per setting for the plain control, lade and lade auto, against
    the check's level. Right: the per-position marginal tests' p-values against theirs. Subtitle: n, compression and
    (with biased runs) the power in the first setting."""
    joint, marginal = joint_tests(samples), marginal_tests(samples)
    colours = dict(zip(TESTED, (PUBLISHED, MEASURED, OKABE_ITO[2])))
    samplers = [s for s in TESTED if s in set(joint["sampler"])]
    settings = list(joint["setting"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.8))
    for i, sampler in enumerate(samplers):
        shift = i - (len(samplers) - 1) / 2
        rows = joint[joint["sampler"] == sampler].set_index("setting").loc[settings]
        axes[0].bar(np.arange(len(settings)) + 0.22 * shift, -np.log10(rows["pvalue"].clip(lower=1e-300)),
                    width=0.2, color=colours[sampler], label=sampler)
        for (setting, block), marker in zip(marginal[marginal["sampler"] == sampler].groupby("setting", sort=False),
                                            "os^D"):
            axes[1].plot(block["position"] + 0.1 * shift, -np.log10(block["pvalue"].clip(lower=1e-300)), marker,
                         ls="-", lw=0.8, color=colours[sampler], label=f"{sampler}: {setting}")
    for ax, table in ((axes[0], joint), (axes[1], marginal)):
        ax.axhline(-np.log10(table["level"].iloc[0]), color="0.1", ls="--", lw=1.1,
                   label=f"{table['test'].iloc[0]} tests' level ({ALPHA:g} / {len(table)} tests)")
        ax.set(ylim=(0, None), ylabel="-log10 p")
    axes[0].set_ylabel("-log10 p (higher: more evidence of a difference)")
    axes[0].set_xticks(np.arange(len(settings)), settings)
    axes[0].set(title="whole continuations (G-test vs plain)")
    axes[1].set_xticks(sorted(marginal["position"].unique()))
    axes[1].set(xlabel="generated token position", title="per-position marginals (G-test vs plain)")
    k = samples["tokens"].iloc[0].count(" ") + 1
    lade_rows = joint[joint["sampler"] != CONTROL]
    compressions = "; ".join(f"{r.sampler} {r.compression:.2f} ({r.setting})" for r in lade_rows.itertuples())
    power_rows = power(samples)
    found = "; ".join(f"{r.test} {r.rejections} of {r.replicates}" for r in power_rows.itertuples()
                      if r.setting == settings[0])
    power_line = f"\npower: biased verifier rejected ({settings[0]}, n = {power_rows['n'].iloc[0]}): {found}" \
        if found else ""
    legend_below(fig, [axes[0], axes[1]], ncol=3)
    fig.suptitle(f"{heading}\nn = {int(joint['n'].iloc[0])} continuations of {k} tokens per sampler and setting\n"
                 f"compression (new tokens per forward): {compressions}{power_line}")
    return fig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.sampling_check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="results file (.jsonl or .csv); provenance beside it")
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--config", default=CONFIG, help="the fixed lookahead config N,W,G")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-biased", action="store_true", help="skip the power runs (the biased verifier of "
                        "tests/distribution.py, which needs the checkout on the path)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    from lab.harness.models import load_model
    from lab.harness.results import save_results

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.no_biased:
        from tests.distribution import BiasedStrategy  # the deviation, shared with tests/core/test_sampling.py
    model, tokenizer = load_model(args.model)
    samples = sample_check(model, tokenizer, SIZES[args.size], config=args.config, seed=args.seed,
                           biased=None if args.no_biased else BiasedStrategy, model_arg=args.model, size_name=args.size)
    print(f"wrote {save_results(samples, args.out)}")
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.precision", 4):
        for table in (joint_tests(samples), marginal_tests(samples), power(samples)):
            print(table.to_string(index=False))
    print("\n".join(findings(samples)))


if __name__ == "__main__":
    main()
