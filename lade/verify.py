"""Verification of a step's token tree: which drafted tokens the model accepts.

The walk starts at the last accepted token (the root) and moves to the child that holds the token the
model chooses at the current node; it stops at a node whose choice was not drafted, emitting that choice
as the bonus token. Every emitted token is chosen from the distribution at its own node, processed with
its own prefix, so the result is what token-by-token decoding would give.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers.generation import logits_process as lp
from transformers.generation.logits_process import LogitsProcessorList

from .tree import TokenTree

# Processors whose output depends only on (prefix ids, scores): safe to apply once per tree node.
PREFIX_PURE_PROCESSORS = tuple(
    getattr(lp, name)
    for name in (
        "EncoderNoRepeatNGramLogitsProcessor", "EncoderRepetitionPenaltyLogitsProcessor", "EpsilonLogitsWarper",
        "EtaLogitsWarper", "ExponentialDecayLengthPenalty", "ForcedBOSTokenLogitsProcessor",
        "ForcedEOSTokenLogitsProcessor", "InfNanRemoveLogitsProcessor", "LogitNormalization",
        "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor",
        "MinPLogitsWarper", "NoBadWordsLogitsProcessor", "NoRepeatNGramLogitsProcessor",
        "PrefixConstrainedLogitsProcessor", "RepetitionPenaltyLogitsProcessor", "SequenceBiasLogitsProcessor",
        "SuppressTokensAtBeginLogitsProcessor", "SuppressTokensLogitsProcessor", "TemperatureLogitsWarper",
        "TopHLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "TypicalLogitsWarper",
    )
    if hasattr(lp, name)
)


def check_processors(processors: LogitsProcessorList) -> None:
    """Refuse processors that keep state across calls or call the model: a tree step calls them per node."""
    for proc in processors:
        if isinstance(proc, PREFIX_PURE_PROCESSORS) or getattr(proc, "lade_prefix_pure", False):
            continue
        raise ValueError(
            f"lade cannot apply {type(proc).__name__} per tree node: it may keep state between calls or run the "
            "model. Remove it, or, if its output depends only on (input_ids, scores), set "
            "`lade_prefix_pure = True` on the processor instance"
        )


@dataclass
class Acceptance:
    tokens: list[int]  # emitted tokens, drafted ones first, then the bonus token
    path: list[int]  # tree nodes of the accepted drafted tokens (len(tokens) - 1)
    rows: list[int]  # logits row (0 = root, 1 + n = tree node n) each token was chosen at
    scores: list[torch.Tensor] = field(default_factory=list)  # [1, V] processed scores per token, if kept


def walk_tree(tree: TokenTree, prefix: torch.Tensor, choose: Callable[[int, torch.Tensor], int]) -> Acceptance:
    """Follow the chosen token from the root while it was drafted; the first undrafted choice is the bonus.

    choose(node, ids) -> the token emitted at `node` (-1 = root), ids [1, S + depth] being the node's prefix.
    """
    acc = Acceptance([], [], [])
    node, ids = -1, prefix  # [1, S]
    while True:
        token = choose(node, ids)
        acc.tokens.append(token)
        acc.rows.append(node + 1)
        child = tree.child(node, token)
        if child is None:
            return acc
        acc.path.append(child)
        node = child
        ids = torch.cat([ids, ids.new_tensor([[token]])], dim=1)  # [1, S + depth]


def walk_processed(tree: TokenTree, logits: torch.Tensor, prefix: torch.Tensor, processors: LogitsProcessorList,
                   keep_scores: bool, pick: Callable[[int, torch.Tensor], int]) -> Acceptance:
    """walk_tree where each node's choice is `pick(node, scores [1, V])` of its logits processed with its own prefix
    (logits: [1 + T, V], the root row, then one row per tree node); the processed scores kept if asked."""
    scores: list[torch.Tensor] = []

    def choose(node: int, ids: torch.Tensor) -> int:
        processed = processors(ids, logits[node + 1 : node + 2].clone())  # [1, V]
        if keep_scores:
            scores.append(processed)
        return pick(node, processed)

    acc = walk_tree(tree, prefix, choose)
    acc.scores = scores
    return acc


def greedy_walk(
    tree: TokenTree,
    logits: torch.Tensor,  # [1 + T, V]: root row, then one row per tree node
    prefix: torch.Tensor,  # [1, S] tokens up to and including the root
    processors: LogitsProcessorList,
    keep_scores: bool,
) -> Acceptance:
    if not processors and not keep_scores:
        choices = logits.argmax(-1).tolist()  # every node's choice is its argmax: one host sync for the tree
        return walk_tree(tree, prefix, lambda node, _ids: choices[node + 1])
    return walk_processed(tree, logits, prefix, processors, keep_scores, lambda _node, scores: int(scores.argmax(-1)))
