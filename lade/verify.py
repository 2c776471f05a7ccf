"""Verification of a step's token tree: which drafted tokens the model accepts.

The walk starts at the last accepted token (the root) and moves to the child that holds the token the
model chooses at the current node; it stops at a node whose choice was not drafted, emitting that choice
as the bonus token. Every emitted token is chosen from the distribution at its own node, processed with
its own prefix, so the result is what token-by-token decoding would give.
"""

from __future__ import annotations

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
        "EtaLogitsWarper", "ForcedBOSTokenLogitsProcessor", "ForcedEOSTokenLogitsProcessor",
        "InfNanRemoveLogitsProcessor", "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor",
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


def greedy_walk(
    tree: TokenTree,
    logits: torch.Tensor,  # [1 + T, V]: root row, then one row per tree node
    prefix: torch.Tensor,  # [1, S] tokens up to and including the root
    processors: LogitsProcessorList,
    keep_scores: bool,
) -> Acceptance:
    # Without processors every node's choice is its argmax: one host sync for the whole tree.
    choices = logits.argmax(-1).tolist() if not processors and not keep_scores else None
    acc = Acceptance([], [], [])
    node, ids = -1, prefix
    while True:
        row = node + 1
        if choices is not None:
            token = choices[row]
        else:
            scores = processors(ids, logits[row : row + 1].clone())  # [1, V]
            token = int(scores.argmax(-1))
            if keep_scores:
                acc.scores.append(scores)
            ids = torch.cat([ids, ids.new_tensor([[token]])], dim=1)
        acc.tokens.append(token)
        acc.rows.append(row)
        child = tree.child(node, token)
        if child is None:
            return acc
        acc.path.append(child)
        node = child
