"""Unit tests of the pieces of one lookahead step, each against a slow, obviously correct construction."""

import pytest
import torch
from transformers.cache_utils import DynamicCache

from lade.cache import compact
from lade.config import LookaheadConfig
from lade.drafters import LookaheadWindow, NGramPool
from lade.layout import additive_mask, build_layout, stack_layouts
from lade.tree import TokenTree
from tiny_models import tiny_model


def test_pool_keeps_most_recent_guess_set_size_entries():
    """LRU per key: re-adding refreshes, a full key evicts the least recently added continuation."""
    pool = NGramPool(ngram_size=3, guess_set_size=2)
    pool.add_all([(1, 2, 3), (1, 4, 5), (1, 2, 3), (1, 6, 7)])
    assert pool.candidates(1) == [(6, 7), (2, 3)]  # (4, 5) was least recent
    assert pool.candidates(9) == []
    pool.add_sequence([5, 1, 2, 3, 1])
    assert pool.candidates(5) == [(1, 2)]
    assert pool.candidates(2) == [(3, 1)]
    assert len(NGramPool(3, 0).candidates(1)) == 0


def test_pool_ranks_candidates_by_the_token_before():
    """Above the guess set size, a key keeps more continuations and returns first those seen after the same
    token (a two-token context match), then the most recent; window n-grams (no context) keep a known one."""
    pool = NGramPool(ngram_size=3, guess_set_size=2, capacity=3)
    pool.add_sequence([8, 1, 2, 3, 9, 1, 4, 5, 7, 1, 6, 6])
    assert pool.candidates(1) == [(6, 6), (4, 5)]
    assert pool.candidates(1, before=8) == [(2, 3), (6, 6)]
    assert pool.candidates(1, before=9) == [(4, 5), (6, 6)]
    pool.add((1, 2, 3))  # refreshed from the window: keeps its context 8
    assert pool.candidates(1, before=8) == [(2, 3), (6, 6)] and pool.candidates(1) == [(2, 3), (6, 6)]
    pool.add((1, 0, 0))  # capacity 3: evicts the least recent, (4, 5)
    assert pool.candidates(1, before=9) == [(0, 0), (2, 3)]
    pool.add_tail([4, 1, 3, 3, 5], new=1)  # only the n-gram ending in the new token: (3, 3, 5) after 1
    assert pool.candidates(3, before=1) == [(3, 5), (9, 1)] and pool.candidates(3, before=2) == [(9, 1), (3, 5)]
    assert pool.candidates(1, before=4) == [(0, 0), (2, 3)]


def test_pool_rejects_wrong_length():
    pool = NGramPool(ngram_size=3, guess_set_size=2)
    try:
        pool.add((1, 2))
    except ValueError as e:
        assert "3 tokens" in str(e)
    else:
        raise AssertionError("a 2-gram was accepted by a 3-gram pool")


def test_window_warms_up_then_emits_column_ngrams():
    """Levels fill up to N-1; afterwards each column plus its new token is an n-gram and the oldest level drops."""
    window = LookaheadWindow(torch.tensor([10, 11, 12]), ngram_size=3)
    assert window.advance(torch.tensor([20, 21, 22])) == []
    assert window.filled == 2
    ngrams = window.advance(torch.tensor([30, 31, 32]))
    assert ngrams == [[10, 20, 30], [11, 21, 31], [12, 22, 32]]
    assert window.levels.tolist() == [[20, 21, 22], [30, 31, 32]]


def test_window_from_prompt_is_seeded():
    prompt = torch.arange(100, 140)
    a = LookaheadWindow.from_prompt(prompt, 6, 4, seed=3).levels
    b = LookaheadWindow.from_prompt(prompt, 6, 4, seed=3).levels
    assert torch.equal(a, b) and a.shape == (1, 6) and bool(((a >= 100) & (a < 140)).all())


def test_tree_merges_shared_prefixes():
    tree = TokenTree([(5, 6, 7), (5, 6, 8), (9, 1, 2)])
    assert tree.tokens == [5, 6, 7, 8, 9, 1, 2]
    assert tree.parents == [-1, 0, 1, 1, -1, 4, 5]
    assert tree.depths == [0, 1, 2, 2, 0, 1, 2]
    assert tree.paths[3] == [0, 1, 3]
    assert tree.child(1, 8) == 3 and tree.child(-1, 6) is None
    assert tree.children(1) == [2, 3]


def _slow_contexts(levels: int, width: int, tree: TokenTree) -> list[list[int]]:
    """For each step token, the step indices of the tokens that form its causal context, by definition:
    window token (l, j) continues the sequence at offsets 1..l+j+1, where offset m is held by level 0,
    column m-1 for m <= j+1 and by column j, level m-j-1 beyond; a tree node continues its path."""
    contexts = [[0]]
    for l in range(levels):
        for j in range(width):
            ctx = [0]
            for m in range(1, l + j + 2):
                lvl, col = (0, m - 1) if m <= j + 1 else (m - j - 1, j)
                ctx.append(1 + lvl * width + col)
            contexts.append(ctx)
    start = 1 + levels * width
    for path in tree.paths:
        contexts.append([0] + [start + n for n in path])
    return contexts


def test_layout_mask_and_positions_match_slow_construction():
    window = torch.arange(40, 40 + 3 * 4).reshape(3, 4)
    tree = TokenTree([(5, 6, 7), (5, 9, 1), (8, 8, 8)])
    layout = build_layout(77, window, tree, torch.device("cpu"))
    contexts = _slow_contexts(3, 4, tree)
    expected = torch.zeros(len(contexts), len(contexts), dtype=torch.bool)
    for row, ctx in enumerate(contexts):
        expected[row, ctx] = True
    assert torch.equal(layout.visible, expected)
    # every token's logical offset is the length of its context (the last token sits at offset 0)
    assert layout.offsets.tolist() == [len(c) - 1 for c in contexts]
    assert layout.input_ids[0].tolist() == [77] + window.reshape(-1).tolist() + tree.tokens


def test_step_logits_equal_plain_forwards_of_each_context():
    """Under the tree mask and logical positions, every step token's logits equal a plain causal forward of
    prefix + its own context: the property that makes verification exact (eager and sdpa)."""
    prefix = torch.randint(3, 90, (1, 9), generator=torch.Generator().manual_seed(1))
    window = torch.randint(3, 90, (2, 3), generator=torch.Generator().manual_seed(2))
    tree = TokenTree([(5, 6, 7), (5, 9), (8,)])
    for arch in ("llama", "gpt2"):
        for attn in ("eager", "sdpa"):
            model = tiny_model(arch, attn)
            cache = DynamicCache(config=model.config)
            past = prefix.shape[1] - 1
            model(prefix[:, :-1], cache=cache, use_cache=True)
            layout = build_layout(int(prefix[0, -1]), window, tree, torch.device("cpu"))
            logits = model(layout.input_ids, position_ids=(layout.offsets + past)[None],
                           attention_mask=additive_mask(stack_layouts([layout]), past, None, model.dtype),
                           cache=cache).logits[0]
            tokens = layout.input_ids[0]
            for row, ctx in enumerate(_slow_contexts(2, 3, tree)):
                seq = torch.cat([prefix[0, :-1], tokens[ctx]]).unsqueeze(0)
                plain = model(seq).logits[0, -1]
                torch.testing.assert_close(logits[row], plain, atol=1e-5, rtol=1e-5)


def test_compaction_equals_cache_of_the_accepted_sequence():
    """After compaction the cache holds exactly the KV a plain forward of the accepted tokens produces."""
    model = tiny_model("llama", "sdpa")
    prefix = torch.randint(3, 90, (1, 7), generator=torch.Generator().manual_seed(3))
    tree = TokenTree([(11, 12, 13), (11, 14, 15)])
    window = torch.tensor([[30, 31]])
    cache = DynamicCache(config=model.config)
    model(prefix[:, :-1], cache=cache, use_cache=True)
    past = prefix.shape[1] - 1
    layout = build_layout(int(prefix[0, -1]), window, tree, torch.device("cpu"))
    model(layout.input_ids, position_ids=(layout.offsets + past)[None],
          attention_mask=additive_mask(stack_layouts([layout]), past, None, model.dtype), cache=cache, use_cache=True)
    path = [tree.child(-1, 11), tree.child(tree.child(-1, 11), 14)]  # accept 11, 14
    compact(cache, past, [past], [[0] + [layout.tree_start + n for n in path]])
    reference = DynamicCache(config=model.config)
    model(torch.cat([prefix, torch.tensor([[11, 14]])], dim=1), cache=reference, use_cache=True)
    assert cache.get_seq_length() == reference.get_seq_length() == past + 3
    for got, want in zip(cache.layers, reference.layers):
        torch.testing.assert_close(got.keys, want.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.values, want.values, atol=1e-5, rtol=1e-5)


def test_config_keys_name_configs_and_round_trip():
    """`key` names a config in results and in the cost prior; `from_key` rebuilds an equivalent config."""
    plain = LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=3)
    pool_only = LookaheadConfig(window_size=0, ngram_size=8, guess_set_size=2, pool_capacity=16, pool_match_tokens=2)
    assert plain.key == (4, 5, 3) and pool_only.key == (8, 0, 2, 16, 2)
    assert LookaheadConfig.from_key(plain.key) == plain and LookaheadConfig.from_key(pool_only.key) == pool_only
    matched = LookaheadConfig(window_size=3, ngram_size=4, guess_set_size=2, pool_match_tokens=2)
    assert matched.key == (4, 3, 2, 2, 2) and LookaheadConfig.from_key(matched.key).key == matched.key
    assert LookaheadConfig.from_key((3, 1, 2), seed=7).seed == 7
    with pytest.raises(ValueError, match="config key"):
        LookaheadConfig.from_key((3, 1))


def test_both_strategies_satisfy_the_strategy_protocol():
    """The loop (Run.strategy) is typed against Strategy: the one-process and the distributed strategies must each
    provide every member it declares, and make the stats object the same way (a method)."""
    from lade.distributed.strategy import ParallelStats, ParallelStrategy
    from lade.outputs import LookaheadStats
    from lade.strategy import LocalStrategy, Strategy

    members = set(Strategy.__annotations__) | {name for name, value in vars(Strategy).items()
                                               if callable(value) and not name.startswith("_")}
    assert {"new_stats", "setup", "layout", "verify", "agree", "returns_cache", "adaptive_drafts"} <= members
    for strategy in (LocalStrategy, ParallelStrategy):
        assert all(hasattr(strategy, name) for name in members), strategy
    assert isinstance(LocalStrategy(), Strategy) and type(LocalStrategy().new_stats()) is LookaheadStats
    parallel = ParallelStrategy.__new__(ParallelStrategy)
    parallel.world = 3
    assert parallel.new_stats() == ParallelStats(world_size=3)


def test_row_emit_appends_in_place_and_grows_by_doubling():
    """Row.emit writes into a preallocated buffer grown by doubling: ids always read prompt + emitted tokens, the
    buffer is replaced O(log n) times over n tokens (not once per token), and a stop cuts exactly at its token."""
    from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteriaList

    from lade.rows import Row

    prompt = torch.tensor([[7, 8, 9]])
    row = Row(0, 0, prompt, 3, drafter=None, processors=[])
    buffers, expected = set(), prompt[0].tolist()
    never = StoppingCriteriaList([MaxLengthCriteria(10_000)])
    for step in range(300):
        tokens = [step % 50, (step * 7) % 50][: 1 + step % 2]
        assert row.emit(tokens, [], None, never) == len(tokens)
        expected += tokens
        buffers.add(row._buffer.data_ptr())
        assert row.ids.tolist() == [expected]
    assert len(buffers) <= 4  # 3 + 64 slots, then 134, 268, 536
    assert row.emit([1, 2, 3], [], None, StoppingCriteriaList([MaxLengthCriteria(len(expected) + 2)])) == 2
    assert row.finished and row.ids.tolist() == [expected + [1, 2]]
