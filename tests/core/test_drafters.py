"""The drafters (lade/drafters/): each piece against a slow, obvious construction; the planner's per-step decision
on synthetic latency and acceptance; every drafter exact under greedy decoding and lossless under sampling."""

import random
from dataclasses import dataclass

import pytest
import torch
from transformers import GenerationConfig

import lade
from distribution import decoder_only, first_two_pvalues
from lade.distributed.checks import check_parallel_generation
from lade.drafters import Draft, Outcome, RecyclingOptions, RowContext, register, unregister
from lade.drafters.acceptance import AcceptanceStats
from lade.drafters.acceptance_prior import CALIBRATION
from lade.drafters.kinds import agreed_member, agreement
from lade.drafters.planner import Lead, calibrated, plan_tree
from lade.drafters.recycling import AdjacencyTable
from lade.drafters.retrieval import MAX_MATCH, SuffixIndex
from tiny_models import random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

DRAFTS = [
    lade.LookaheadConfig(draft="retrieval", step_budget=8),
    lade.LookaheadConfig(draft="recycling", step_budget=12, draft_options=dict(recycling_width=4)),
    lade.LookaheadConfig(draft="merged", step_budget=16, window_size=3, ngram_size=3, guess_set_size=3),
    lade.LookaheadConfig(draft="merged", step_budget=24, adaptive=True, draft_options=dict(correct_latency=False)),
    lade.LookaheadConfig(draft="retrieval", step_budget=6, adaptive=True, draft_options=dict(correct_latency=False)),
]
# Adaptive drafts plan with this latency model alone (no machine's timings): a memory-bound step whose extra tokens are
# nearly free, so whether a test's drafts run never depends on how fast the machine runs the tiny model.
FLAT = lambda q: 0.05 + 1e-4 * q  # noqa: E731
GREEDY = dict(do_sample=False, max_new_tokens=40, eos_token_id=None)


def slow_continuations(tokens, tail, count, length, max_n):
    """By definition: for n = max_n .. 1, the earlier end positions of tail's last n tokens, most recent first."""
    found, seen = [], set()
    for n in range(min(max_n, len(tail)), 0, -1):
        for end in range(len(tokens) - 2, n - 2, -1):
            if tokens[end - n + 1 : end + 1] != list(tail[-n:]):
                continue
            continuation = tuple(tokens[end + 1 : end + 1 + length])
            if continuation in seen:
                continue
            seen.add(continuation)
            match = n
            if n == max_n:
                while match < min(MAX_MATCH, end + 1, len(tail)) and tokens[end - match] == tail[-match - 1]:
                    match += 1
            found.append((continuation, match))
            if len(found) == count:
                return found
    return found


@pytest.mark.parametrize("seed", range(20))
def test_suffix_index_against_brute_force(seed):
    """Random sequences over a small alphabet (many repeats), indexed incrementally, queried at every length."""
    rng = random.Random(seed)
    tokens = [rng.randrange(4 if seed % 2 else 12) for _ in range(rng.randint(1, 120))]
    index = SuffixIndex(max_n=rng.choice([2, 4, 8]))
    for stop in range(1, len(tokens) + 1):
        index.extend(tokens[len(index.tokens) : stop])
        count, length = rng.randint(1, 5), rng.randint(1, 9)
        got = index.continuations(index.tokens, count, length)
        assert got == slow_continuations(tokens[:stop], tokens[:stop], count, length, index.max_n)


def test_adjacency_table_keeps_the_latest_top_k():
    table = AdjacencyTable(vocab_size=10, width=3)
    assert table.row(4) == []
    logits = torch.tensor([[0.0, 5, 1, 9, 2, 0, 0, 0, 0, 7], [9.0, 0, 0, 0, 0, 0, 8, 7, 0, 0]])
    table.update(torch.tensor([4, 2]), logits)
    assert table.row(4) == [3, 9, 1] and table.row(2) == [0, 6, 7]
    table.update(torch.tensor([4]), logits[1:])  # fed again: its newest prediction replaces the old one
    assert table.row(4) == [0, 6, 7] and table.row(2) == [0, 6, 7]


def stats_with(rate: float) -> AcceptanceStats:
    return AcceptanceStats({}, default=rate)


def slow_best(plan_probabilities, cost):
    """argmax over m of (1 + sum of the m first path probabilities) / cost(m)."""
    values = [(1 + sum(plan_probabilities[:m])) / cost(m) for m in range(len(plan_probabilities) + 1)]
    return max(range(len(values)), key=lambda m: (values[m], -m))


@pytest.mark.parametrize("seed", range(10))
def test_planned_trees_are_trees_within_budget_in_decreasing_path_probability(seed):
    rng = random.Random(seed)
    table = AdjacencyTable(vocab_size=20, width=4)
    table.update(torch.arange(20), torch.randn(20, 20, generator=torch.Generator().manual_seed(seed)))
    leads = [Lead(tuple(rng.randrange(20) for _ in range(rng.randint(1, 6))), tuple(("r", d) for d in range(6)))
             for _ in range(rng.randint(0, 4))]
    stats = AcceptanceStats({("r", d): rng.random() for d in range(6)}, default=rng.random() * 0.5)
    budget = rng.randint(1, 30)
    plan = plan_tree(rng.randrange(20), leads, table, lambda rank, depth: ("c", rank), stats, budget, None)
    paths = [node.path for node in plan.nodes]
    assert len(paths) == len(set(paths)) <= budget
    assert all(path[:-1] in paths[:i] for i, path in enumerate(paths) if len(path) > 1), "a node before its parent"
    probabilities = [node.path_probability for node in plan.nodes]
    assert probabilities == sorted(probabilities, reverse=True)
    by_parent = {}
    for node in plan.nodes:
        by_parent.setdefault(node.path[:-1], []).append(node.path_probability)
    for parent, children in by_parent.items():  # at most one child is accepted: their mass never exceeds the parent's
        parent_p = 1.0 if not parent else next(n.path_probability for n in plan.nodes if n.path == parent)
        assert sum(children) <= parent_p + 1e-9
    assert sorted(plan.candidates) == sorted(p for p in paths if not any(q[: len(p)] == p and q != p for q in paths))


@pytest.mark.parametrize("seed", range(10))
def test_the_step_size_maximises_expected_tokens_per_second(seed):
    rng = random.Random(seed)
    table = AdjacencyTable(vocab_size=30, width=6)
    table.update(torch.arange(30), torch.randn(30, 30, generator=torch.Generator().manual_seed(seed)))
    stats = AcceptanceStats({("c", r): rng.random() * 0.6 for r in range(6)})
    latency = {0: 0.04}
    for m in range(1, 40):
        latency[m] = latency[m - 1] + rng.choice([0.0, 0.001, 0.004, -0.002])
    cost = lambda m: max(latency[m], 0.01)  # noqa: E731
    full = plan_tree(3, [], table, lambda rank, depth: ("c", rank), stats, 30, None)
    cut = plan_tree(3, [], table, lambda rank, depth: ("c", rank), stats, 30, cost)
    assert len(cut.nodes) == slow_best(full.values, cost)
    assert [n.path for n in cut.nodes] == [n.path for n in full.nodes[: len(cut.nodes)]]


def test_no_acceptance_means_plain_steps_and_flat_latency_means_wide_ones():
    table = AdjacencyTable(vocab_size=30, width=8)
    table.update(torch.arange(30), torch.randn(30, 30))
    leads = [Lead((4, 5, 6, 7), ("r",) * 4)]
    never, often = stats_with(0.0), stats_with(0.9)
    steep = lambda m: 0.04 * (1 + 0.5 * (m > 0)) + 0.002 * m  # noqa: E731  (a CPU: any draft costs 1.5x)
    flat = lambda m: 0.04 + 1e-5 * m  # noqa: E731  (a GPU, memory bound)
    assert plan_tree(3, leads, table, lambda r, d: ("c",), never, 24, flat).nodes == []  # nothing is ever accepted
    assert plan_tree(3, leads, table, lambda r, d: ("c",), stats_with(0.03), 24, steep).nodes == []
    wide = plan_tree(3, leads, table, lambda r, d: ("c",), often, 24, flat)
    assert len(wide.nodes) == 24
    assert 0 < len(plan_tree(3, leads, table, lambda r, d: ("c",), often, 24, steep).nodes) < 24


def test_observed_acceptance_is_counted_for_tested_nodes_only():
    """A node is tested when its parent was accepted; accepted when its token was."""
    stats = AcceptanceStats({}, default=0.5)
    plan = plan_tree(1, [Lead((2, 3, 4), ("a", "b", "c")), Lead((5,), ("d",))], None, None, stats, 10, None)
    plan.record([2, 3, 9], stats)  # accepted 2, 3, then the model's own 9
    assert stats.tested == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert stats.accepted == {"a": 1, "b": 1, "c": 0, "d": 0}


def test_a_token_several_drafters_propose_is_planned_and_counted_as_their_agreement():
    """A token proposed by kinds a and b is one node of kind agreement(b) (b: the likelier), rated as b until the
    agreement has a prior or counts of its own; its outcome is counted for the agreement alone, so a kind that is weak
    alone keeps its own rate however often a stronger one proposes the same token."""
    stats = AcceptanceStats({"a": 0.3, "b": 0.6})
    plan = plan_tree(1, [Lead((2,), ("a",)), Lead((2, 7), ("b", "b")), Lead((5,), ("a",))], None, None, stats, 10,
                     None)
    assert {node.path: node.kind for node in plan.nodes} == {(2,): agreement("b"), (2, 7): "b", (5,): "a"}
    assert plan.nodes[0].path_probability == pytest.approx(0.6)  # the agreement rated as its likeliest proposer
    plan.record([2, 7, 9], stats)
    assert stats.tested == {agreement("b"): 1, "b": 1, "a": 1}
    assert stats.accepted == {agreement("b"): 1, "b": 1, "a": 0}
    assert stats.rate("a") == pytest.approx((0 + 4 * 0.3) / (1 + 4))  # its own miss only
    assert stats.rate(agreement("b")) == pytest.approx((1 + 4 * stats.rate("b")) / (1 + 4))
    assert AcceptanceStats({"b": 0.6, agreement("b"): 0.9}).rate(agreement("b")) == pytest.approx(0.9)  # own prior
    assert agreed_member(agreement(("retrieval", 5, 1))) == ("retrieval", 5, 1) and agreed_member("b") is None


def test_a_rare_kind_follows_its_group_realised_over_expected_acceptance():
    """Misses of one kind lower an untested kind of the same group by the group's realised / expected acceptances
    (smoothed toward 1), and leave other groups alone."""
    prior = {("r", 0, 2): 0.8, ("r", 1, 2): 0.6, ("r", 0, 0): 0.5}
    stats = AcceptanceStats(prior, weight=4.0, group=lambda kind: (kind[0], kind[-1]), group_weight=4.0)
    expected = 0.0
    for i in range(10):
        own = 4 * 0.8 / (i + 4)  # ("r", 0, 2)'s own rate before its i-th miss (no acceptance yet)
        expected += own
        stats.record(("r", 0, 2), False)
    factor = (0 + 4.0) / (expected + 4.0)
    assert stats.rate(("r", 1, 2)) == pytest.approx(0.6 * factor)
    assert stats.rate(("r", 1, 2)) < 0.6 / 2
    assert stats.rate(("r", 0, 0)) == pytest.approx(0.5)  # another depth: another group
    assert AcceptanceStats(prior).rate(("r", 1, 2)) == pytest.approx(0.6)  # no grouping: the prior alone
    for _ in range(50):
        stats.record(("r", 0, 0), True)
    assert stats.rate(("r", 0, 0)) <= 1.0  # a group above expectations never lifts a rate past 1


@pytest.mark.parametrize("config", DRAFTS, ids=lambda c: c.label)
@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3"])
def test_every_drafter_is_exact(arch, config):
    """Greedy output equals plain greedy through each drafter, alone and merged, fixed and adaptive; some step must
    accept several tokens."""
    model = tiny_model(arch)
    best = 0
    for i in range(8):
        ids = random_prompt(i, length=40 if i % 3 == 0 else 20, repeat=i % 2 == 0)
        latency = dict(lookahead_latency=FLAT) if config.adaptive else {}
        out, stats = lade.generate(model, ids, config, return_stats=True, **latency, **GREEDY)
        assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY)), f"prompt {i}"
        best = max(best, max(stats.accepted_per_step))
    assert best >= 3


@pytest.mark.parametrize("config", DRAFTS[2:4], ids=lambda c: c.label)
def test_drafters_in_batches_and_encoder_decoder_models(config):
    model = tiny_model("llama")
    ids, mask = lade.left_pad([random_prompt(1)[0], random_prompt(2, length=9)[0], random_prompt(3, 30)[0]], 0)
    kw = dict(GREEDY, pad_token_id=0)
    assert torch.equal(lade.generate(model, ids, config, attention_mask=mask, **kw),
                       model.generate(ids, attention_mask=mask, **kw))
    seq2seq = tiny_seq2seq("bart")
    source = random_prompt(4)
    assert torch.equal(lade.generate(seq2seq, source, config, **GREEDY),
                       seq2seq.generate(source, attention_mask=torch.ones_like(source), **GREEDY))


@pytest.mark.parametrize("config", DRAFTS[:4], ids=lambda c: c.label)
def test_every_drafter_samples_losslessly(config):
    """The first two sampled tokens follow plain sampling's exact joint distribution (chi-square, p = 1e-3) while the
    second is drafted by the drafter under test."""
    model = tiny_model("llama", vocab_size=8)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)
    prompt = torch.tensor([3, 4, 5, 3, 4, 5, 6, 3, 4])
    torch.manual_seed(0)

    def draw():
        return lade.generate(model, prompt[None], config, do_sample=True, top_k=0, max_new_tokens=2,
                             eos_token_id=None)[:, len(prompt):]

    assert first_two_pvalues(decoder_only(model), [prompt], draw, samples=1500)[0] > 1e-3


def test_adaptive_drafts_feed_fewer_tokens_where_they_are_rarely_accepted():
    """On a random model (drafts rarely right) with a CPU-like latency profile, most adaptive steps feed one token."""
    model = tiny_model("llama")
    ids = random_prompt(7, repeat=False)
    _, stats = lade.generate(model, ids, lade.LookaheadConfig(draft="merged", adaptive=True), return_stats=True,
                             **GREEDY)
    _, fixed = lade.generate(model, ids, lade.LookaheadConfig(draft="merged"), return_stats=True, **GREEDY)
    assert stats.steps >= fixed.steps  # fewer tokens accepted per step: it drafted less


NO_WINDOW = torch.empty(0, 0, dtype=torch.long)  # [L=0, W=0]


@dataclass(frozen=True)
class EchoOptions:
    length: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.length, bool) or not isinstance(self.length, int) or not 1 <= self.length <= 64:
            raise ValueError(f"length must be an integer in [1, 64], got {self.length!r}")


class EchoDrafter:
    """Defined outside lade (docs/drafters.md): copies what followed the last token's latest earlier occurrence."""

    observes_logits = False

    def __init__(self, config: lade.LookaheadConfig, row: RowContext) -> None:
        self.length = config.draft_options.length

    def propose(self, ids: torch.Tensor, new_tokens: int) -> Draft:
        tokens = ids.tolist()
        for start in range(len(tokens) - 2, -1, -1):
            if tokens[start] == tokens[-1]:
                return Draft(NO_WINDOW, [tuple(tokens[start + 1 : start + 1 + self.length])])
        return Draft(NO_WINDOW, [])

    def observe(self, outcome: Outcome) -> None:
        pass


def check_echo(config: lade.LookaheadConfig) -> None:
    if config.window_size:
        raise ValueError("draft='echo' feeds no Jacobi window: set window_size=0")


@pytest.fixture
def echo():
    register("echo", EchoDrafter, options=EchoOptions, check=check_echo,
             tree_nodes=lambda config: config.draft_options.length)
    yield "echo"
    unregister("echo")


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_drafter_registered_outside_lade_decodes_exactly(echo, arch):
    """A drafter defined in this file, registered by name: the loop verifies whatever it proposes against the model's
    own argmax chain, so greedy output equals plain greedy; on repeating prompts some copy is right, so some step
    accepts more than the model's own token (its drafts really were fed and verified)."""
    model = tiny_model(arch)
    config = lade.LookaheadConfig(draft=echo, draft_options=dict(length=6))
    assert config.draft_options == EchoOptions(6) and config.max_step_tokens() == 7 and config.label == "echo/16"
    best = 0
    for i in range(4):
        ids = random_prompt(i, length=30, repeat=True)
        out, stats = lade.generate(model, ids, config, return_stats=True, **GREEDY)
        assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY)), f"prompt {i}"
        best = max(best, max(stats.accepted_per_step))
    assert best >= 2


def test_registered_drafters_validate_their_own_settings(echo):
    """Names, options and rules come from the registration: an unknown draft lists the registered ones, the options
    class refuses bad values and unknown fields, the drafter's check refuses a window, adaptive needs a drafter that
    plans by cost, and lookahead parallelism refuses a drafter not marked same_on_every_rank."""
    names = r"one of \('lookahead', 'retrieval', 'recycling', 'merged', 'corpus', 'echo'\)"
    with pytest.raises(ValueError, match=names):
        lade.LookaheadConfig(draft="nope")
    with pytest.raises(ValueError, match=r"length must be an integer in \[1, 64\], got 0"):
        lade.LookaheadConfig(draft=echo, draft_options=dict(length=0))
    with pytest.raises(ValueError, match=r"no option 'width': its draft_options are \['length'\]"):
        lade.LookaheadConfig(draft=echo, draft_options=dict(width=3))
    with pytest.raises(ValueError, match="set window_size=0"):
        lade.LookaheadConfig(draft=echo, window_size=2)
    with pytest.raises(ValueError, match=r"adaptive steps plan a tree .* use one of \['retrieval', 'recycling'"):
        lade.LookaheadConfig(draft=echo, adaptive=True)
    with pytest.raises(ValueError, match="takes no draft_options"):
        lade.LookaheadConfig(draft="lookahead", draft_options=dict(length=3))
    with pytest.raises(ValueError, match="no option 'recycling_width'"):
        lade.LookaheadConfig(draft="retrieval", draft_options=dict(recycling_width=3))
    with pytest.raises(ValueError, match="registered already"):
        register(echo, EchoDrafter)
    with pytest.raises(ValueError, match="needs a drafter registered with adaptive=True"):
        lade.auto_config(tiny_model("llama"), latency=lambda q: 1.0, draft=echo)
    with pytest.raises(ValueError, match="every rank must draft alike"):
        check_parallel_generation(GenerationConfig(), lade.LookaheadConfig(draft=echo))
    assert lade.LookaheadConfig(draft="merged", draft_options=RecyclingOptions(recycling_width=3)) == \
        lade.LookaheadConfig(draft="merged", draft_options=dict(recycling_width=3))


def test_the_latency_model_passed_in_is_the_one_the_planner_uses():
    """An adaptive drafter plans with the latency model given as lookahead_latency (no measurement, no patching):
    where any extra token costs a hundred one-token steps no drafting step can pay, so every step emits exactly one
    token; where extra tokens are nearly free, a repeating prompt's retrieved copies are fed and accepted."""
    model = tiny_model("llama")
    ids = random_prompt(3, length=30, repeat=True)
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY)
    config = lade.LookaheadConfig(draft="retrieval", adaptive=True, draft_options=dict(correct_latency=False))
    asked = []

    def steep(q: float) -> float:
        asked.append(q)
        return 1.0 if q <= 1 else 100.0 * q

    out, stats = lade.generate(model, ids, config, lookahead_latency=steep, return_stats=True, **GREEDY)
    assert torch.equal(out, plain) and asked and set(stats.accepted_per_step) == {1}
    out, stats = lade.generate(model, ids, config, lookahead_latency=lambda q: 1.0 + 1e-3 * q, return_stats=True,
                               **GREEDY)
    assert torch.equal(out, plain) and max(stats.accepted_per_step) > 1
    assert lade.auto_config(model, latency=steep).window_size == 0  # the static choice with this model: no window
    with pytest.raises(ValueError, match="drop lookahead_latency"):
        lade.generate(model, ids, lade.LookaheadConfig(), lookahead_latency=steep, **GREEDY)


def test_values_are_path_probabilities_with_calibrated_odds_corrected_by_the_sequence():
    assert calibrated(0.0, 3.0) == 0.0 and calibrated(1.0, 3.0) == 1.0 and calibrated(0.25, 1.0) == 0.25
    assert calibrated(0.25, 3.0) == pytest.approx(0.5)  # odds 1/3 -> 1
    stats = AcceptanceStats({("r", 0): 0.3})
    lead = [Lead((5, 6), (("r", 0), ("r", 0)))]
    plan = plan_tree(1, lead, None, lambda rank, depth: ("c", rank), stats, 8, None)
    assert plan.odds == pytest.approx(CALIBRATION)
    assert plan.values == [pytest.approx(calibrated(n.path_probability, CALIBRATION)) for n in plan.nodes]
    for _ in range(20):  # a sequence that accepts every path raises its odds; one that accepts none lowers them
        plan.record([5, 6, 7], stats)
    assert plan_tree(1, lead, None, lambda rank, depth: ("c", rank), stats, 8, None).odds > CALIBRATION
    stats = AcceptanceStats({("r", 0): 0.3})
    for _ in range(20):
        plan.record([9], stats)
    assert plan_tree(1, lead, None, lambda rank, depth: ("c", rank), stats, 8, None).odds < CALIBRATION
