"""Batched greedy lookahead equals both oracles: each row decoded alone by plain greedy, and batched plain
`model.generate` of the left-padded batch (same output format: finished rows padded with pad_token_id)."""

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList

import lade
from distribution import decoder_only, first_two_pvalues
from lade import left_pad as left_pad_with
from lade.cache import SlotLayer, compact, crop, slotted
from lade.layout import additive_mask, build_layout, stack_layouts
from lade.profile import PROFILE_ROWS, cached_rows
from lade.tree import TokenTree
from tiny_models import COMMON, RecordingStreamer, random_prompt, tiny_model

PAD = COMMON["pad_token_id"]
CONFIGS = [
    lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
    lade.LookaheadConfig(window_size=3, ngram_size=2, guess_set_size=2),
    lade.LookaheadConfig(window_size=2, ngram_size=5, guess_set_size=40),
    lade.LookaheadConfig(window_size=0, ngram_size=5, guess_set_size=2, pool_capacity=8),
]
GREEDY = dict(do_sample=False, max_new_tokens=24, pad_token_id=PAD)
# (seed, length) of each prompt of a batch: 2 to 8 rows, lengths 5 to 40
BATCHES = [
    [(0, 24), (1, 9)],
    [(2, 30), (3, 12), (4, 5)],
    [(5, 16), (6, 40), (7, 20), (8, 13), (9, 27)],
    [(10 + i, n) for i, n in enumerate([8, 33, 14, 24, 19, 6, 28, 12])],
]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run ~10x faster on one thread on this shared 2-core machine; restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def left_pad(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return left_pad_with(prompts, PAD)


def per_row_greedy(model, prompts: list[torch.Tensor], ids: torch.Tensor, **kw) -> torch.Tensor:
    """Each prompt decoded alone (no padding), written in batched generate's format."""
    news = [model.generate(p[None], attention_mask=torch.ones(1, len(p), dtype=torch.long), **kw)[0, len(p) :]
            for p in prompts]
    out = torch.full((len(prompts), ids.shape[1] + max(len(n) for n in news)), PAD, dtype=torch.long)
    out[:, : ids.shape[1]] = ids
    for b, new in enumerate(news):
        out[b, ids.shape[1] : ids.shape[1] + len(new)] = new
    return out


def pick_eos(new_tokens: torch.Tensor) -> int:
    """The token whose first occurrences (or absence) end the most rows at different steps."""
    def spread(token: int) -> int:
        ends = {int((row == token).nonzero()[0]) if bool((row == token).any()) else -1 for row in new_tokens}
        return len(ends)
    return max(sorted(set(new_tokens[:, 1:].flatten().tolist())), key=spread)


def ending_batch(model, seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Four left-padded prompts (ids, mask [4, P]) and the EOS (pick_eos) that ends their greedy rows at different
    steps."""
    prompts = [random_prompt(seed + b, length=n)[0] for b, n in enumerate([12, 25, 7, 18])]
    ids, mask = left_pad(prompts)
    free = model.generate(ids, attention_mask=mask, eos_token_id=None, **GREEDY)[:, ids.shape[1] :]
    return ids, mask, pick_eos(free)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2", "gpt_neox"])
def test_batched_greedy_equals_per_row_and_batched_plain(arch, attn):
    """Rows end at different steps (EOS chosen from the rows' own outputs), layouts differ in size per row,
    and rows accept different numbers of tokens per step: any slip in per-row masks, positions, cache
    compaction or row dropping changes some row's tokens."""
    model = tiny_model(arch, attn)
    best = 0
    for i, spec in enumerate(BATCHES):
        prompts = [random_prompt(seed, length=n)[0] for seed, n in spec]
        ids, mask = left_pad(prompts)
        free = model.generate(ids, attention_mask=mask, eos_token_id=None, **GREEDY)[:, ids.shape[1] :]
        kw = dict(GREEDY, eos_token_id=pick_eos(free))
        ref = model.generate(ids, attention_mask=mask, **kw)
        assert torch.equal(ref, per_row_greedy(model, prompts, ids, **kw)), "the two oracles disagree"
        lengths = {int((row != PAD).sum()) for row in ref[:, ids.shape[1] :]}
        assert len(lengths) > 1, "EOS must end rows at different steps"
        out = lade.generate(model, ids, CONFIGS[i % len(CONFIGS)], attention_mask=mask,
                            return_dict_in_generate=True, **kw)
        assert torch.equal(out.sequences, ref), f"batch {i}, {CONFIGS[i % len(CONFIGS)]}"
        best = max([best] + [max(s.accepted_per_step) for s in out.row_stats])
    assert best >= 3, "no row ever accepted several tokens in one step"


def test_custom_generate_batch_and_rows_leave_the_batch():
    """The custom_generate spelling; finished rows stop being fed to the model (the forward batch shrinks)."""
    model = tiny_model("qwen2", "sdpa")
    ids, mask, eos = ending_batch(model, 20)
    kw = dict(GREEDY, eos_token_id=eos)
    widths = []
    handle = model.register_forward_pre_hook(lambda _, args, kwargs: widths.append(kwargs["input_ids"].shape[0]),
                                             with_kwargs=True)
    try:
        out = model.generate(ids, attention_mask=mask, custom_generate=lade.lookahead_generate,
                             lookahead_config=CONFIGS[0], **kw)
    finally:
        handle.remove()
    assert torch.equal(out, model.generate(ids, attention_mask=mask, **kw))
    assert widths[0] == 4 and widths[-1] < 4 and widths == sorted(widths, reverse=True)


def test_disabled_config_decodes_a_batch_one_token_per_step():
    """LookaheadConfig(enabled=False) (what auto returned when lookahead did not pay) is plain decoding in a batch
    too."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([random_prompt(40 + b, length=n, repeat=True)[0] for b, n in enumerate([9, 30, 16])])
    kw = dict(GREEDY, eos_token_id=None)
    out = lade.generate(model, ids, lade.LookaheadConfig(enabled=False), attention_mask=mask,
                        return_dict_in_generate=True, **kw)
    assert torch.equal(out.sequences, model.generate(ids, attention_mask=mask, **kw))
    assert all(set(s.accepted_per_step) == {1} for s in out.row_stats)


def test_single_padded_row_and_processors():
    """One left-padded row goes through the batched path; processors see each row's padded ids, as in
    batched plain generate (the repetition penalty skips each row's padding, as generate arranges)."""
    model = tiny_model("llama", "eager")
    prompts = [random_prompt(30, length=10)[0], random_prompt(31, length=22)[0], random_prompt(32, length=16)[0]]
    ids, mask = left_pad(prompts)
    kw = dict(GREEDY, eos_token_id=None, repetition_penalty=1.3, no_repeat_ngram_size=3)
    out = lade.generate(model, ids, CONFIGS[0], attention_mask=mask, **kw)
    assert torch.equal(out, model.generate(ids, attention_mask=mask, **kw))
    one, one_mask = ids[:1], mask[:1]
    assert not bool(one_mask.all())
    assert torch.equal(lade.generate(model, one, CONFIGS[1], attention_mask=one_mask, **kw),
                       model.generate(one, attention_mask=one_mask, **kw))


class StopAfterToken(StoppingCriteria):
    """A custom per-row criterion (no eos_token_id attribute)."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == self.token


@pytest.mark.parametrize("change, message", [
    (dict(right_pad=True), "left-padded"),
    (dict(eos_token_id=None, stopping_criteria=StoppingCriteriaList([StopAfterToken(5)])), "needs an eos_token_id"),
    (dict(prefix_allowed_tokens_fn=lambda batch_id, ids: [3, 4]), "batch index"),
])
def test_batch_refusals_say_what_to_change(change, message):
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([random_prompt(40, length=10)[0], random_prompt(41, length=6)[0]])
    if change.pop("right_pad", False):
        ids, mask = ids.flip(1), mask.flip(1)
    kw = {**GREEDY, "eos_token_id": 2, **change}
    with pytest.raises(ValueError, match=message):
        lade.generate(model, ids, CONFIGS[0], attention_mask=mask, **kw)


def test_compact_moves_each_rows_accepted_slots():
    """Against a per-row loop: row b's kept step slots land right after its own tokens; the cache is cropped
    after the longest row."""
    cache = DynamicCache()
    past, q = 6, 5
    keys = torch.randn(3, 2, past + q, 4)
    values = torch.randn(3, 2, past + q, 4)
    cache.update(keys.clone(), values.clone(), 0)
    starts, keep = [6, 3, 5], [[0, 2], [0], [0, 1, 4]]
    compact(cache, past, starts, keep)
    assert cache.layers[0].keys.shape[-2] == max(s + len(k) for s, k in zip(starts, keep))
    for b, (s, ks) in enumerate(zip(starts, keep)):
        for i, k in enumerate(ks):
            assert torch.equal(cache.layers[0].keys[b, :, s + i], keys[b, :, past + k])
            assert torch.equal(cache.layers[0].values[b, :, s + i], values[b, :, past + k])
        assert torch.equal(cache.layers[0].keys[b, :, :s], keys[b, :, :s])


def test_slot_layers_hold_what_dynamic_layers_hold_and_write_in_place():
    """Random steps (updates of several slots, compaction, a row leaving) on a DynamicCache and on a slotted one: the
    same keys and values after every operation; a step after compaction writes into the same buffer."""
    generator = torch.Generator().manual_seed(0)
    plain_cache, slot_cache = DynamicCache(), DynamicCache()
    in_place = 0
    with slotted(slot_cache):
        rows = 3
        for step in range(40):
            q = int(torch.randint(1, 6, (1,), generator=generator))
            keys, values = (torch.randn(rows, 2, q, 4, generator=generator) for _ in range(2))
            past = plain_cache.get_seq_length()
            buffer = slot_cache.layers[0].keys.data_ptr() if past else None
            for cache in (plain_cache, slot_cache):
                cache.update(keys.clone(), values.clone(), 0)
            in_place += buffer == slot_cache.layers[0].keys.data_ptr()
            starts = [past - int(torch.randint(0, min(past, 3) + 1, (1,), generator=generator)) for _ in range(rows)]
            keep = [[0, *range(1, int(torch.randint(1, q + 1, (1,), generator=generator)))] for _ in range(rows)]
            for cache in (plain_cache, slot_cache):
                compact(cache, past, starts, keep)
            if step == 25:  # a row leaves the batch
                rows -= 1
                for cache in (plain_cache, slot_cache):
                    cache.batch_select_indices(torch.tensor([0, 2]))
            assert isinstance(slot_cache.layers[0], SlotLayer)
            assert torch.equal(slot_cache.layers[0].keys, plain_cache.layers[0].keys)
            assert torch.equal(slot_cache.layers[0].values, plain_cache.layers[0].values)
    assert in_place >= 35  # all but the first step and the one after the row left (and a rare regrowth)
    held = slot_cache.layers[0].keys
    assert type(slot_cache.layers[0]) is DynamicLayer and held.is_contiguous()
    assert torch.equal(held, plain_cache.layers[0].keys)


def test_slotted_never_writes_into_tensors_the_caller_holds():
    """A cache passed in keeps its tensors: the slotted layers copy them into their own buffers before writing."""
    cache = DynamicCache()
    keys = torch.randn(1, 2, 5, 4)
    cache.update(keys.clone(), keys.clone(), 0)
    held = cache.layers[0].keys
    before = held.clone()
    with slotted(cache):
        crop(cache, 3)
        cache.update(torch.zeros(1, 2, 2, 4), torch.zeros(1, 2, 2, 4), 0)
    assert torch.equal(held, before)
    assert torch.equal(cache.layers[0].keys[..., :3, :], before[..., :3, :])
    assert not cache.layers[0].keys[..., 3:, :].any()


def test_stacked_layouts_pad_with_self_only_dummies():
    """Each row keeps its own layout; dummy tokens see only themselves and no cache slot."""
    small = build_layout(5, torch.tensor([[7, 8]]), TokenTree([]), torch.device("cpu"))
    large = build_layout(9, torch.tensor([[7, 8]]), TokenTree([(3, 4), (3, 6)]), torch.device("cpu"))
    batch = stack_layouts([small, large])
    assert batch.size == large.size == small.size + 3
    assert torch.equal(batch.visible[1], large.visible)
    assert torch.equal(batch.visible[0, : small.size, : small.size], small.visible)
    assert batch.input_ids[0, small.size :].tolist() == [5, 5, 5]
    mask = additive_mask(batch, 2, torch.tensor([[False, True], [True, True]]), torch.float32)  # [2, 1, Q, 2 + Q]
    allowed = mask[:, 0] == 0
    assert allowed[0, small.size :].sum(-1).tolist() == [1, 1, 1]
    assert allowed[0, : small.size, :2].tolist() == [[False, True]] * small.size
    assert torch.equal(batch.position_ids(torch.tensor([10, 20]))[1], large.offsets + 20)


def test_batched_sampling_top_k_1_is_greedy_and_seeded_runs_repeat():
    model = tiny_model("qwen2", "sdpa")
    ids, mask = left_pad([random_prompt(60, length=18)[0], random_prompt(61, length=7)[0]])
    cfg = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, sampling_seed=5)
    kw = dict(max_new_tokens=24, pad_token_id=PAD, eos_token_id=None)
    greedy = model.generate(ids, attention_mask=mask, do_sample=False, **kw)
    top1 = lade.generate(model, ids, cfg, attention_mask=mask, do_sample=True, top_k=1, **kw)
    assert torch.equal(top1, greedy)
    runs = [lade.generate(model, ids, cfg, attention_mask=mask, do_sample=True, top_k=0, **kw) for _ in range(2)]
    assert torch.equal(runs[0], runs[1])


def test_batched_sampling_is_lossless_per_row():
    """Per row, the first two sampled tokens follow the exact joint distribution of plain sampling (chi-square,
    p = 1e-3), while the second token is often chosen at a node of that row's own drafted tree."""
    model = tiny_model("llama", "sdpa", vocab_size=8)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)
    prompts = [torch.tensor([3, 4, 5, 3, 4, 5, 6]), torch.tensor([7, 6, 3, 7, 6])]
    ids, mask = left_pad(prompts)
    cfg = lade.LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=4)
    torch.manual_seed(0)

    def draw():
        out = lade.generate(model, ids, cfg, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=2,
                            eos_token_id=None, pad_token_id=PAD)
        return out[:, ids.shape[1]:]

    assert min(first_two_pvalues(decoder_only(model), prompts, draw, samples=2500)) > 1e-3


def test_auto_config_decodes_a_padded_batch(tmp_path, monkeypatch):
    """lookahead_config="auto" resolves with the model in hand for a batch as for one prompt (measured once, cached,
    with the profiles of the row counts that price whether drafts can pay for a batch of two: one and four rows,
    lade/handover.py, lade/profile.py), and the batch still decodes exactly."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([random_prompt(70, length=20)[0], random_prompt(71, length=8)[0]])
    kw = dict(GREEDY, eos_token_id=None)
    out = lade.generate(model, ids, "auto", attention_mask=mask, **kw)
    assert torch.equal(out, model.generate(ids, attention_mask=mask, **kw))
    assert len(list((tmp_path / "cost").glob("latency-*.json"))) == 2 and cached_rows(model) == PROFILE_ROWS[:2]
    lade.generate(model, ids, "auto", attention_mask=mask, **kw)
    assert len(list((tmp_path / "cost").glob("latency-*.json"))) == 2  # all from the cache


@pytest.mark.parametrize("spelling", ["lade.generate", "model.generate"])
def test_a_batch_with_a_streamer_is_refused_before_any_work(spelling):
    """transformers' streamers take one sequence: a batch with one is a clear ValueError, before any forward and
    (through lade.generate) before the streamer sees anything."""
    model = tiny_model("llama", "sdpa")
    ids, mask = left_pad([random_prompt(72, length=12)[0], random_prompt(73, length=6)[0]])
    streamer, forwards = RecordingStreamer(), []
    handle = model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        with pytest.raises(ValueError, match="a streamer takes one sequence"):
            if spelling == "lade.generate":
                lade.generate(model, ids, CONFIGS[0], attention_mask=mask, streamer=streamer, **GREEDY)
            else:
                model.generate(ids, attention_mask=mask, custom_generate=lade.lookahead_generate,
                               lookahead_config=CONFIGS[0], streamer=streamer, **GREEDY)
    finally:
        handle.remove()
    assert not forwards
    assert streamer.calls == (0 if spelling == "lade.generate" else 1)  # transformers itself puts the prompt first


def assert_steps_close(got, want):
    assert got is not None and len(got) == len(want)
    for step, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, f"step {step}"
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda m, step=step: f"step {step}: {m}")


@pytest.mark.parametrize("config", [CONFIGS[0], "auto"], ids=["fixed", "auto"])
def test_batch_scores_and_logits_equal_plain_batched_generate(config):
    """One [B, V] tensor per step, as plain generate returns: each row's own processed scores and raw logits up to
    its end (lade computed them for its tokens, processors applied with the row's padded prefix), and for a row
    that finished (EOS) the scores plain generate computes for it fed pad tokens (the same tokens, positions and
    padding, one forward instead of one per step: equal up to rounding)."""
    model = tiny_model("llama", "sdpa")
    ids, mask, eos = ending_batch(model, 50)
    kw = dict(GREEDY, eos_token_id=eos, repetition_penalty=1.3, return_dict_in_generate=True,
              output_scores=True, output_logits=True)
    ref = model.generate(ids, attention_mask=mask, **kw)
    assert len({int((row != PAD).sum()) for row in ref.sequences[:, ids.shape[1] :]}) > 1
    extra = dict(lookahead_latency=lambda q: 1.0 + 1e-4 * q) if config == "auto" else {}
    out = lade.generate(model, ids, config, attention_mask=mask, **kw, **extra)
    assert torch.equal(out.sequences, ref.sequences)
    assert_steps_close(out.scores, ref.scores)
    assert_steps_close(out.logits, ref.logits)
    only = lade.generate(model, ids, config, attention_mask=mask, **dict(kw, output_logits=False), **extra)
    assert only.logits is None
    assert_steps_close(only.scores, ref.scores)


def test_a_batch_output_without_scores_runs_no_forward_after_decoding():
    """return_dict_in_generate without output_scores or output_logits: no forward of the finished rows (the pass that
    computes what plain generate scores for them after their end)."""
    model = tiny_model("llama", "sdpa")
    ids, mask, eos = ending_batch(model, 50)
    kw = dict(GREEDY, eos_token_id=eos)
    ref = model.generate(ids, attention_mask=mask, **kw)
    assert len({int((row != PAD).sum()) for row in ref[:, ids.shape[1] :]}) > 1  # rows finish at different steps
    forwards = []
    handle = model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        tensor = lade.generate(model, ids, CONFIGS[0], attention_mask=mask, **kw)
        alone = len(forwards)
        out = lade.generate(model, ids, CONFIGS[0], attention_mask=mask, return_dict_in_generate=True, **kw)
    finally:
        handle.remove()
    assert torch.equal(tensor, ref) and torch.equal(out.sequences, ref)
    assert out.scores is None and out.logits is None
    assert len(forwards) - alone == alone


def test_batch_sampling_scores_per_row_and_after_the_end():
    """Seeded sampling: the keyed noise of a row depends on its index and positions only, so row 0 (unpadded)
    samples exactly what it samples alone; its scores are the same processed rows. Every entry, including a
    finished row's later steps, is warped as plain generate warps it (top_k=5: five finite scores)."""
    model = tiny_model("llama", "sdpa")
    prompts = [random_prompt(60 + b, length=n)[0] for b, n in enumerate([20, 9, 14])]
    ids, mask = left_pad(prompts)
    config = lade.LookaheadConfig(window_size=3, ngram_size=3, guess_set_size=3, sampling_seed=11)
    kw = dict(GREEDY, do_sample=True, top_k=5, return_dict_in_generate=True, output_scores=True)
    free = lade.generate(model, ids, config, attention_mask=mask, **dict(kw, eos_token_id=None)).sequences
    kw["eos_token_id"] = pick_eos(free[:, ids.shape[1] :])
    out = lade.generate(model, ids, config, attention_mask=mask, **kw)
    ends = [int((row != PAD).sum()) for row in out.sequences[:, ids.shape[1] :]]
    assert len(set(ends)) > 1 and len(out.scores) == max(ends)
    alone = lade.generate(model, ids[:1], config, attention_mask=mask[:1], **kw)
    assert torch.equal(alone.sequences[0], out.sequences[0, : alone.sequences.shape[1]])
    assert_steps_close([s[:1] for s in out.scores[: len(alone.scores)]], alone.scores)
    assert all(int(torch.isfinite(s).sum()) == 5 * len(prompts) for s in out.scores)
