"""Exact lookahead beam search: drafted trees under every beam, verified by replaying plain beam search.

One step: every running beam (a row of the B * k rows) feeds its last token and a tree of drafts: its likeliest next
tokens (from the logits where its last token was computed, else the model's recorded successors of that token), then
continuations from its prompt's n-gram pool (the prompt's or source's n-grams and every beam's output, shared by the
prompt's beams), then chains of recorded successors; all rows in one forward under the tree mask. Plain beam search
steps are then replayed one after another (lade.beam_state), each fed every running beam's next-token logits looked up
in the trees; the replay ends after the first step that leaves a running beam whose tokens are no path of the trees (its
next logits were not computed), or when beam search is done. So the output is plain beam search's, and a step advances
every beam by as many tokens as were replayed. Each new beam's cache row is its ancestor's row plus the KV of its path
through that ancestor's tree: every beam caches all its tokens but the last, as plain beam search does. Unlike plain
beam search, each prompt is prefilled once for its k beams, steps write their KV in place, and a reorder copies only
the beams' own slots (lade.cache.reorder_rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .auto import auto_task, resolve_config
from .beam_state import BeamSearch
from .cache import compact, reorder_rows, slotted
from .compat import CACHE_KWARG
from .config import LookaheadConfig
from .drafters import RowContext, make_drafter
from .drafters.pool import NGramPool
from .drafters.recycling import AdjacencyTable
from .drafters.step_cost import StepCost
from .layout import StepLayout, cache_visibility, stack_layouts
from .model_call import ModelCall
from .outputs import LookaheadStats, output_type
from .pricing import Costs, Plan, pays, speedup
from .rope import Positions
from .tree import TokenTree
from .vocabulary import logits_width

# "auto" for beams: the draft under every beam, fed only in steps the latency model prices as paying (BeamPricing)
AUTO_BEAMS = LookaheadConfig(window_size=0, ngram_size=4, guess_set_size=2, step_budget=8)
PRIOR_REPLAYED = 1.5  # beam search steps a drafted forward is expected to replay before any was observed
EXPLORE = 8  # plain steps in a row after which a drafted step is fed anyway, to re-measure what drafts replay
MAX_EXPLORE = 128  # the interval doubles after each drafted step that replayed one step only, up to this


@dataclass
class BeamPricing:
    """Whether a drafted beam step pays (lade.pricing): the `rows` beam rows' [last token | tree] of q tokens each
    cost an [rows, q] forward plus every drafting row's host work, and replay `replayed` beam search steps on average
    (a running mean over drafted steps), against a plain beam step replaying one. The forward's cost is the device's
    profile corrected by this call's timed steps (at its own context length, lade.drafters.step_cost). After
    `explore` plain steps in a row a step drafts anyway, to re-measure; the interval doubles while such steps replay
    one step only."""

    costs: Costs  # the device's step costs (lade.profile.device_costs)
    rows: int  # beam rows fed per step (B * k)
    replayed: float = PRIOR_REPLAYED
    plain_in_a_row: int = 0
    explore: int = EXPLORE  # plain steps in a row after which a step drafts anyway
    timed: StepCost | None = None  # [rows, q] step seconds, corrected by the timed steps

    def __post_init__(self) -> None:
        self.timed = StepCost(self.costs.rows(self.rows), self.costs.host_s)

    def drafts_pay(self, q: int) -> bool:
        if self.plain_in_a_row >= self.explore:
            return True
        costs = replace(self.costs, forward=lambda rows, width: self.timed.forward_s(int(width)))
        return pays(speedup(costs, Plan(self.rows, q, self.rows * self.replayed)))

    def observe(self, drafted: bool, replayed: int, q: int | None = None, seconds: float | None = None) -> None:
        """A step's outcome; q, seconds: tokens per row it fed and its forward's time (None: not timed)."""
        if q is not None and seconds is not None:
            self.timed.observe(q, seconds)
        if drafted:
            self.replayed = 0.8 * self.replayed + 0.2 * replayed
            self.plain_in_a_row = 0
            self.explore = min(2 * self.explore, MAX_EXPLORE) if replayed <= 1 else EXPLORE
        else:
            self.plain_in_a_row += 1


def successor_widths(k: int) -> tuple[int, ...]:
    """Recorded successors drafted at each depth under a beam: k after its last token (beam search keeps the top k
    continuations of the k beams), then 2, then 1."""
    return (k, 2, 1)


def beam_config(value, gen: GenerationConfig, model) -> LookaheadConfig:
    """The config beam search drafts with: "auto" (any task) is AUTO_BEAMS; otherwise a config of the lookahead draft,
    whose pool and step_budget beams use (its Jacobi window is not run under beams)."""
    if auto_task(value if value is not None else getattr(gen, "lookahead_config", None)) is not None:
        return AUTO_BEAMS
    config = resolve_config(value, gen, model)
    if config.draft != "lookahead":
        raise ValueError(f"beam search drafts from the n-gram pool of the lookahead draft, not draft={config.draft!r}: "
                         "use draft='lookahead' (e.g. LookaheadConfig(window_size=0)), 'auto', or num_beams=1")
    return config


@dataclass
class BeamRun:
    """What every step of one beam search shares."""

    call: ModelCall
    search: BeamSearch
    pools: list[NGramPool]  # one per prompt, shared by its beams
    table: AdjacencyTable | None  # the model's top successors of every token it was fed (None: no drafts)
    budget: int  # most tree nodes under one beam
    pricing: BeamPricing | None  # "auto": feeds drafts only where they pay (None: always, as configured)
    pads: list[int]  # [N] each row's left padding
    from_output: bool
    positions: Positions
    stats: LookaheadStats
    device: torch.device
    successors: list[list[int] | None] = field(default_factory=list)  # each running beam's own top next tokens
    shared: int = 0  # slots equal in every beam of a prompt (its padded prompt, once one parent holds all its beams)


def beam_generate(model, call: ModelCall, input_ids: torch.Tensor, pads: list[int], config: LookaheadConfig,
                  gen: GenerationConfig, processors: LogitsProcessorList, stopping_criteria: StoppingCriteriaList,
                  attention_mask: torch.Tensor | None, source_ids: torch.Tensor | None,
                  costs: Costs | None = None, cache_outlives: bool = True):
    """input_ids: [N, P] (N = B * k, each left-padded prompt repeated k times, attention_mask [N, P] or None);
    source_ids: [B, S] an encoder-decoder model's sources (n-grams for the pools); costs: the device's step costs,
    which price every step ("auto"); None drafts every step; cache_outlives: whether the cache outlives the call
    (compacted at its end, lade.cache.outlives_call) -> what plain beam search returns."""
    k = gen.num_beams
    search = BeamSearch.start(model, input_ids, gen, processors, stopping_criteria)
    vocab = logits_width(model)
    table = AdjacencyTable(vocab, max(2, k)) if config.enabled else None
    pricing = BeamPricing(costs, len(input_ids)) if costs is not None else None
    run = BeamRun(call, search, _pools(config, input_ids, pads, k, source_ids, vocab), table, config.step_budget,
                  pricing, pads, config.pool_from_output, Positions.of(model), LookaheadStats(), input_ids.device)
    with slotted(call.cache, cache_outlives):  # steps write their KV in place; a reorder copies only the beams' slots
        # 1. prefill and the first beam step. Plain beam search feeds k copies of each prompt, and its first step
        # reads the first copy's logits alone; lade feeds each prompt once and repeats its KV and logits for its k beams
        # (an encoder-decoder's decoder prompt, a start token, is fed k times, as its cross-attention rows are k)
        once = 1 if model.config.is_encoder_decoder else k
        with run.stats.timed_forward(run.device):
            logits = call.prefill(input_ids[::once], attention_mask[::once] if any(pads) else None, 0)  # [N / once, V]
        if once > 1:
            logits = logits.repeat_interleave(once, 0)  # [N, V]
            call.cache.batch_repeat_interleave(once)
        if table is not None:
            table.update(input_ids[:, -1], logits)
        parents = search.advance(logits)
        if once == 1:  # (repeated rows are equal: any parent in the prompt's group holds the same KV)
            reorder_rows(call.cache, parents)
        if all(p == parents[r - r % k] for r, p in enumerate(parents)):  # (beam search's first step: always)
            run.shared = input_ids.shape[1]  # each prompt's k rows now hold one row's prompt KV (and cross-attention)
        _learn(run, 1)
        # 2. steady steps until beam search is done
        while not search.done:
            _learn(run, step(run))
    return _output(model, run, gen)


def step(run: BeamRun) -> int:
    """One forward of every running beam's [last token | tree] and the beam search steps it determines; returns how
    many steps were replayed."""
    search, call = run.search, run.call
    past = search.cur_len - 1  # every beam caches all its tokens but the last
    # 2a. every row's tree, laid out with its nodes in depth columns shared by all rows
    running = search.running()  # [N, cur_len]
    k = search.beams
    own = run.successors or [None] * len(running)
    trees = [TokenTree([])] * len(running)
    if run.pricing is None or run.pricing.drafts_pay(2):  # (a step no draft pays at builds no tree)
        trees = [TokenTree(_candidates(run, run.pools[r // k], running[r, run.pads[r] :].tolist(), run.pads[r],
                                       own[r])) for r in range(len(running))]
    layouts, node_rows = aligned_layouts(running[:, -1].tolist(), trees, run.device)
    drafted = layouts[0].size > 1
    room = run.positions.room(past)  # a fixed causal buffer's keys left for [last token | tree] (None: no bound)
    if drafted and (room is not None and layouts[0].size > room  # rows' trees aligned in shared depth columns
                    or run.pricing is not None and not run.pricing.drafts_pay(layouts[0].size)):
        trees, drafted = [TokenTree([])] * len(trees), False
        layouts, node_rows = aligned_layouts(running[:, -1].tolist(), trees, run.device)
    batch = stack_layouts(layouts)
    first = torch.tensor([past - pad for pad in run.pads], device=run.device)  # [N] the last tokens' positions
    # 2b. one forward for every row and node
    with run.stats.timed_forward(run.device):
        logits = call.step(batch, first, past, cache_visibility(run.pads, None, past, run.device))  # [N, Q, V]
    if run.table is not None:  # every row's root and nodes (not the dummies) teach the successor table
        fed = torch.tensor([r * batch.size + i for r, rows in enumerate(node_rows) for i in [0, *rows]],
                           device=run.device)  # [F]
        run.table.update(batch.input_ids.reshape(-1)[fed], logits.reshape(-1, logits.shape[-1])[fed])
    # 2c. replay beam steps while every running beam sits on a computed node: origin[j] is the row beam j descends
    # from, node[j] its tree node (-1: the root, the row's last token), path[j] the nodes whose KV it keeps
    rows = len(trees)
    origin, node, path = list(range(rows)), [-1] * rows, [[] for _ in range(rows)]
    replayed = 0
    while True:
        at = torch.tensor([node_rows[o][n] if n >= 0 else 0 for o, n in zip(origin, node)], device=run.device)  # [N]
        parents = search.advance(logits[torch.tensor(origin, device=run.device), at])
        replayed += 1
        tokens = search.running()[:, -1].tolist()
        path = [path[p] + [node[p]] if node[p] >= 0 else [] for p in parents]
        node = [trees[origin[p]].child(node[p], t) for p, t in zip(parents, tokens)]
        origin = [origin[p] for p in parents]
        if search.done or any(n is None for n in node):
            break
    # each new beam whose last token was fed at a node: its own top next tokens, from the logits computed there
    width = successor_widths(k)[0]
    run.successors = [logits[o, node_rows[o][n] if n >= 0 else 0].topk(width).indices.tolist() if n is not None
                      else None for o, n in zip(origin, node)]
    # 2d. each new beam's cache row: its origin row's, then the root and its path's nodes in contiguous slots
    reorder_rows(call.cache, origin, run.shared, cross=not run.shared)
    compact(call.cache, past, [past] * rows, [[0, *(node_rows[o][n] for n in p)] for o, p in zip(origin, path)])
    if run.pricing is not None:
        run.pricing.observe(drafted, replayed, batch.size, run.stats.last_forward_s)
    return replayed


def aligned_layouts(last_tokens: list[int], trees: list[TokenTree], device: torch.device
                    ) -> tuple[list[StepLayout], list[list[int]]]:
    """Every row's [last token | tree] with the nodes of depth d in a block of columns every row places at offset
    d + 1 (a row with fewer nodes at a depth fills the block with dummy tokens that see only themselves), so all rows
    share one row of offsets: an encoder-decoder decoder places one row of positions for the whole batch.
    -> (layouts, node_rows[r][n]: the step row of tree r's node n)."""
    depth = max((max(t.depths) + 1 for t in trees if len(t)), default=0)
    widths = [max(t.depths.count(d) for t in trees) for d in range(depth)]
    starts = [1 + sum(widths[:d]) for d in range(depth)]
    q = 1 + sum(widths)
    offsets = torch.tensor([0] + [d + 1 for d, w in enumerate(widths) for _ in range(w)], device=device)  # [q]
    layouts, node_rows = [], []
    for last, tree in zip(last_tokens, trees):
        fill = list(starts)
        rows = []
        for d in tree.depths:
            rows.append(fill[d])
            fill[d] += 1
        ids = torch.full((1, q), last, dtype=torch.long)  # [1, q]
        visible = torch.eye(q, dtype=torch.bool)  # [q, q]
        if rows:
            ids[0, rows] = torch.tensor(tree.tokens)
            visible[rows, 0] = True
            visible[[rows[n] for n, p in enumerate(tree.paths) for _ in p], [rows[a] for p in tree.paths for a in p]] \
                = True
        layouts.append(StepLayout(ids.to(device), offsets, visible.to(device), tree, 0, [], 1))
        node_rows.append(rows)
    return layouts, node_rows


def _candidates(run: BeamRun, pool: NGramPool, tokens: list[int], pad: int,
                own: list[int] | None = None) -> list[tuple[int, ...]]:
    """A beam's drafts (tokens: the beam's, no padding), in the order the budget keeps them: first its next tokens,
    the beam's own top ones (`own`, from the logits where its last token was computed) or else the recorded
    successors of its last token, each alone (a second replayed step needs every surviving beam among them); then its
    prompt's pool continuations; then chains of recorded successors. Cut where no replayed step could use them (the
    beams reach max_length) or a position table ends, and to the keys one forward may hold (Positions.room)."""
    depth = run.search.max_length - run.search.cur_len - 1  # a node at depth d chooses the token at cur_len + d + 1
    last = len(tokens) - 1
    bound = run.positions.last_position(last, pad)
    if bound is not None:
        depth = min(depth, bound - last)
    if depth <= 0:
        return []
    before = tokens[-2] if len(tokens) > 1 else None
    widths = successor_widths(run.search.beams)[: min(depth, pool.ngram_size - 1)]
    firsts = [] if run.table is None or not widths else \
        (own if own is not None else run.table.row(tokens[-1]))[: widths[0]]
    drafts = [(first,) for first in firsts] + [c[:depth] for c in pool.candidates(tokens[-1], before)] + \
        [(first, *chain) for first in firsts for chain in _successors(run.table, first, widths[1:])]
    room = run.positions.room(run.search.cur_len - 1)  # the keys left after the cache (its last token fed first)
    budget = run.budget if room is None else min(run.budget, room - 1)
    kept: list[tuple[int, ...]] = []
    for draft in drafts:  # in order, each that keeps the tree within the budget
        if len(TokenTree([*kept, draft])) <= budget:
            kept.append(draft)
    return kept


def _successors(table: AdjacencyTable | None, token: int, widths: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Chains of the model's recorded top successors: widths[d] of them after each token at depth d."""
    if table is None or not widths:
        return []
    chains = []
    for successor in table.row(token)[: widths[0]]:
        tails = _successors(table, successor, widths[1:])
        chains += [(successor, *tail) for tail in tails] if tails else [(successor,)]
    return chains


def _pools(config: LookaheadConfig, input_ids: torch.Tensor, pads: list[int], k: int, source_ids: torch.Tensor | None,
           vocab_size: int) -> list[NGramPool]:
    """One pool per prompt, shared by its beams: the pool of the lookahead drafter (the drafter registry's) of the
    prompt, seeded as that drafter seeds it (the source's and prompt's n-grams)."""
    return [make_drafter(config, RowContext(input_ids[b * k, pads[b * k] :],
                                            source_ids[min(b, source_ids.shape[0] - 1)] if source_ids is not None
                                            else None, vocab_size)).pool
            for b in range(input_ids.shape[0] // k)]


def _learn(run: BeamRun, replayed: int) -> None:
    """Record the step; every running beam's new n-grams join its prompt's pool."""
    run.stats.record_step(replayed)
    if not run.from_output:
        return
    running, k = run.search.running(), run.search.beams
    for r in range(running.shape[0]):
        run.pools[r // k].add_tail(running[r, run.pads[r] :], replayed)


def _output(model, run: BeamRun, gen: GenerationConfig):
    """What plain beam search returns: the sequences, or with return_dict_in_generate an output object."""
    search = run.search
    sequences, scores, indices = search.result(gen.num_return_sequences)
    if not gen.return_dict_in_generate:
        return sequences
    cache = run.call.cache if gen.use_cache else None  # each running beam's tokens but its last, as plain leaves it
    return output_type(model, beams=True)(sequences=sequences, sequences_scores=scores if gen.output_scores else None,
                       scores=search.scores, logits=search.logits, beam_indices=indices, **{CACHE_KWARG: cache},
                       lookahead_stats=run.stats)
