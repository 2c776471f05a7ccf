"""One rank of the lookahead-parallelism tests (launched by test_distributed.py, 2 ranks, gloo on CPU).

Modes (run in the order given): `exact` (greedy output and per-step acceptance equal single-process),
`sampling` (sampled output and per-step acceptance equal single-process lade with the same sampling_seed),
`errors` (clear errors raised on every rank, group still usable afterwards), `strategy` ("auto", FA2 on the split
path, a disabled config, padding, a refused batch), `fail` (rank 1 raises mid-decoding), `fail_last` (rank 1 raises
on the last token). Prints `RANK r ... OK`, or `RANK r ERROR ...` and exits 1.
"""

import dataclasses
import datetime
import sys

import torch
import torch.distributed as dist
from transformers import StoppingCriteria, StoppingCriteriaList

import lade
import lade.distributed
from tiny_models import random_prompt, tiny_model

GREEDY = dict(do_sample=False, max_new_tokens=40, eos_token_id=None)
CONFIGS = [
    lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
    lade.LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=7),  # uneven column and candidate shares
    lade.LookaheadConfig(window_size=2, ngram_size=2, guess_set_size=0),  # no verification branch
    lade.LookaheadConfig(window_size=3, ngram_size=5, guess_set_size=1, pool_from_prompt=False),  # rank 1: no tree
]


def plain(model, ids, **kw):
    return model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, **kw})


def exact(rank: int) -> None:
    """Same tokens as plain greedy and the same accepted tokens per step as single-process lade (the union of
    the ranks' shares is the single-process step); both ranks must really take tokens verified elsewhere."""
    refed, cases = 0, 0
    for arch in ("llama", "gpt2"):
        model = tiny_model(arch, "sdpa")
        for i in range(8):
            ids = random_prompt(i, repeat=i % 2 == 0)
            kw = dict(repetition_penalty=1.3) if i == 5 else dict(eos_token_id=7) if i == 6 else {}
            cfg = CONFIGS[i % len(CONFIGS)]
            out, stats = lade.distributed.generate(model, ids, cfg, return_stats=True, **{**GREEDY, **kw})
            _, single = lade.generate(model, ids, cfg, return_stats=True, **{**GREEDY, **kw})
            assert torch.equal(out, plain(model, ids, **kw)), (arch, i, cfg)
            assert stats.accepted_per_step == single.accepted_per_step, (arch, i, cfg)
            refed, cases = refed + stats.refed_tokens, cases + 1
    assert refed > 0, "no step accepted tokens verified on another rank: the KV re-feed path is untested"
    print(f"RANK {rank} EXACT OK cases={cases} refed={refed}", flush=True)


def sampling(rank: int) -> None:
    """Rank 0 verifies with lade's lossless sampling walk; the output must be single-process lade's for the same
    sampling_seed (whose distribution tests/core/test_sampling.py checks), step by step, across configs and warpers."""
    model, cases, best = tiny_model("llama", "sdpa", vocab_size=12), 0, 0
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # sharp logits over 12 tokens: drafts from its own samples often accepted
    warpers = [dict(temperature=0.7, top_k=0), dict(temperature=1.0, top_p=0.9), dict(temperature=1.0, top_k=4)]
    for i in range(6):
        torch.manual_seed(i)  # the same prompt on every rank: one the model sampled itself
        start = torch.tensor([[3, 4, 5 + i % 6]])
        ids = model.generate(start, attention_mask=torch.ones_like(start), do_sample=True, max_new_tokens=30,
                             eos_token_id=None, top_k=0)
        cfg = dataclasses.replace(CONFIGS[i % len(CONFIGS)], sampling_seed=100 + i)
        kw = dict(do_sample=True, max_new_tokens=40, eos_token_id=None, **warpers[i % len(warpers)])
        out, stats = lade.distributed.generate(model, ids, cfg, return_stats=True, **kw)
        single_out, single = lade.generate(model, ids, cfg, return_stats=True, **kw)
        assert torch.equal(out, single_out), (i, cfg, kw)
        assert stats.accepted_per_step == single.accepted_per_step, (i, cfg)
        cases, best = cases + 1, max([best, *stats.accepted_per_step])
    assert best >= 3, "no sampled step accepted several tokens: the walk on rank 0 is untested"
    print(f"RANK {rank} SAMPLING OK cases={cases}", flush=True)


def expect_error(text: str, call) -> None:
    try:
        call()
    except ValueError as error:
        assert text in str(error), str(error)
        return
    raise AssertionError(f"no ValueError containing {text!r}")


def errors(rank: int) -> None:
    model = tiny_model("llama", "sdpa")
    ids = random_prompt(3)
    run = lambda ids=ids, cfg=CONFIGS[0], **kw: lade.distributed.generate(model, ids, cfg, **{**GREEDY, **kw})
    expect_error("window_size=1 cannot be sharded across 2 ranks",
                 lambda: run(cfg=lade.LookaheadConfig(window_size=1, ngram_size=3, guess_set_size=2)))
    expect_error("ranks disagree on prompt_length", lambda: run(ids=random_prompt(3, length=20 + rank)))
    expect_error("ranks disagree on lookahead_config",
                 lambda: run(cfg=lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4 + rank)))
    expect_error("draft='lookahead'", lambda: run(cfg=lade.LookaheadConfig(draft="merged")))
    sampled_window = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, sample_window=True)
    expect_error("set sample_window=False", lambda: run(cfg=sampled_window, do_sample=True))
    shard_error = "cannot be sharded" if rank == 1 else "rank(s) [1] refused their inputs"
    expect_error(shard_error,
                 lambda: run(cfg=lade.LookaheadConfig(window_size=4 - 3 * rank, ngram_size=3, guess_set_size=4)))
    assert torch.equal(run(), plain(model, ids)), "the group must stay usable after refused inputs"
    print(f"RANK {rank} ERRORS OK", flush=True)


def strategy(rank: int) -> None:
    """What the shared loop gives lookahead parallelism: "auto" (resolved on rank 0), an FA2-configured model on the
    split attention path, a disabled config as plain decoding, a left-padded prompt; a batch refused on every rank."""
    model, ids = tiny_model("llama", "sdpa"), random_prompt(5)
    assert torch.equal(lade.distributed.generate(model, ids, "auto", **GREEDY), plain(model, ids))
    out, stats = lade.distributed.generate(model, ids, lade.LookaheadConfig(enabled=False), return_stats=True, **GREEDY)
    assert torch.equal(out, plain(model, ids))
    assert set(stats.accepted_per_step) == {1} and set(stats.step_tokens) == {1}, "a disabled config fed drafts"
    flash, seen = tiny_model("llama", "sdpa"), set()
    flash.config._attn_implementation = "flash_attention_2"  # as loading with attn_implementation= leaves it
    flash.model.layers[0].self_attn.register_forward_pre_hook(
        lambda module, args: seen.add(module.config._attn_implementation))
    assert torch.equal(lade.distributed.generate(flash, ids, CONFIGS[0], **GREEDY), plain(model, ids))
    assert seen == {"lade_split"}, seen
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)], dim=1)
    want = model.generate(padded, attention_mask=mask, pad_token_id=0, **GREEDY)
    assert torch.equal(lade.distributed.generate(model, padded, CONFIGS[1], attention_mask=mask, pad_token_id=0,
                                                 **GREEDY), want)
    batch = torch.cat([ids, ids])
    expect_error("one prompt at a time", lambda: lade.distributed.generate(model, batch, CONFIGS[0], **GREEDY))
    print(f"RANK {rank} STRATEGY OK", flush=True)


class FailOnRank(StoppingCriteria):
    """Raises on `rank` at its `after`-th call (mid-decoding), as a crashing rank would."""

    def __init__(self, rank: int, after: int) -> None:
        self.fail, self.calls, self.after = rank == 1, 0, after

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.fail and self.calls >= self.after:
            raise RuntimeError("injected failure on rank 1")
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def fail(rank: int) -> None:
    model = tiny_model("llama", "sdpa")
    criteria = StoppingCriteriaList([FailOnRank(rank, after=6)])
    lade.distributed.generate(model, random_prompt(0), CONFIGS[0], stopping_criteria=criteria, **GREEDY)


def fail_last(rank: int) -> None:
    """Rank 1 raises on the final token, after the last exchange: rank 0 has nothing left to decode."""
    model = tiny_model("llama", "sdpa")
    criteria = StoppingCriteriaList([FailOnRank(rank, after=GREEDY["max_new_tokens"])])
    lade.distributed.generate(model, random_prompt(0), CONFIGS[0], stopping_criteria=criteria, **GREEDY)


if __name__ == "__main__":
    torch.set_num_threads(1)
    # a long gloo timeout: a failure must surface through lade's abort message, not through this timeout
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    status = 0
    try:
        for mode in sys.argv[1:]:
            {"exact": exact, "sampling": sampling, "errors": errors, "strategy": strategy, "fail": fail,
             "fail_last": fail_last}[mode](rank)
    except Exception as error:
        print(f"RANK {rank} ERROR {type(error).__name__}: {error}", flush=True)
        status = 1
    finally:
        # always shut the group down before exiting: leaving it to interpreter teardown after a peer has gone can
        # abort the process from gloo's destructor ("terminate called without an active exception", exit -6)
        dist.destroy_process_group()
    sys.exit(status)
