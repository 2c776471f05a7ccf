"""Equivalence check that CI runs under both ends of pyproject's transformers range (scripts/compat_ends.sh) and
tests/core/test_compat.py under any other release (in a scratch venv): lade's greedy output equals plain generate's
through every private transformers API lade.compat touches (each attention path, padding, a streamer found in
generate's frame, generate's kept mask length, the cache keyword (a prefix cache in, the cache out, a static cache
refused), encoder-decoder position adapters, a plain and a lade call on one model in two threads). Prints one line
per check and "compat ok"."""

import threading

import torch
import transformers
from transformers.cache_utils import DynamicCache

import lade
from lade.compat import CACHE_KWARG
from tiny_models import RecordingStreamer, random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

GREEDY = dict(do_sample=False, max_new_tokens=16, eos_token_id=None)


def config(attention: str = "auto") -> lade.LookaheadConfig:
    return lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, attention=attention)


def check(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert torch.equal(got, want), f"{name}: lade differs from plain generate"
    print(f"{name}: equal")


@torch.no_grad()
def prefix_cache(model, ids: torch.Tensor) -> DynamicCache:
    """A cache holding the prompt's first 10 tokens."""
    cache = DynamicCache(config=model.config)
    model(ids[:, :10], use_cache=True, **{CACHE_KWARG: cache})
    return cache


def main() -> None:
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    model = tiny_model("llama", "sdpa")
    ids = random_prompt(1, length=30)
    want = model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY)
    for attention in ("mask", "split", "flex"):
        check(f"llama {attention}", lade.generate(model, ids, config(attention), **GREEDY), want)
    streamer = RecordingStreamer()
    check("streamer", lade.generate(model, ids, config(), streamer=streamer, **GREEDY), want)
    assert sum(streamer.puts[1:], []) == want[0, ids.shape[1]:].tolist(), "streamer: tokens differ"
    try:
        lade.generate(model, ids, config(), attention_mask=torch.ones(1, ids.shape[1] + 2, dtype=torch.long), **GREEDY)
        raise AssertionError("a mask of the wrong length was accepted")
    except ValueError as error:
        assert "attention_mask has" in str(error), error
    print("mask length: refused")

    check("prefix cache", lade.generate(model, ids, config(), **{CACHE_KWARG: prefix_cache(model, ids)}, **GREEDY),
          model.generate(ids, attention_mask=torch.ones_like(ids), **{CACHE_KWARG: prefix_cache(model, ids)},
                         **GREEDY))
    out = lade.generate(model, ids, config(), return_dict_in_generate=True, **GREEDY)
    assert getattr(out, CACHE_KWARG).get_seq_length() == out.sequences.shape[1] - 1, "returned cache: wrong length"
    print("returned cache: holds every token but the last")
    try:
        lade.generate(model, ids, config(), cache_implementation="static", **GREEDY)
        raise AssertionError("a static cache was not refused")
    except ValueError as error:
        assert "DynamicCache" in str(error), error
    print("static cache: refused")

    batch = torch.cat([torch.zeros(1, 6, dtype=torch.long), random_prompt(2, length=24)], dim=1)
    batch = torch.cat([batch, random_prompt(3, length=30)])  # [2, 30], the first row left-padded
    mask = (torch.arange(30) >= 6).long().expand(2, 30).clone()
    mask[1] = 1
    plain = model.generate(batch, attention_mask=mask, **GREEDY)
    check("padded batch", lade.generate(model, batch, config("split"), attention_mask=mask, **GREEDY), plain)
    check("gpt2 eager", lade.generate(tiny_model("gpt2", "eager"), ids, config(), **GREEDY),
          tiny_model("gpt2", "eager").generate(ids, attention_mask=torch.ones_like(ids), **GREEDY))

    for family in ("bart", "t5"):
        seq2seq = tiny_seq2seq(family, "sdpa")
        check(family, lade.generate(seq2seq, ids, config(), **GREEDY),
              seq2seq.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY))

    results = {}
    barrier = threading.Barrier(2)

    def run(name, job):
        barrier.wait()
        results[name] = [job() for _ in range(2)]

    jobs = {"plain": lambda: model.generate(batch, attention_mask=mask, **GREEDY),
            "lade": lambda: lade.generate(model, ids, config("split"), **GREEDY)}
    threads = [threading.Thread(target=run, args=item) for item in jobs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(torch.equal(out, plain) for out in results["plain"]), "threads: plain output changed beside lade"
    assert all(torch.equal(out, want) for out in results["lade"]), "threads: lade output changed beside plain"
    print("threads: equal")
    print("compat ok")


if __name__ == "__main__":
    main()
