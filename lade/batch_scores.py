"""A batch's `output_scores` / `output_logits` as plain `model.generate` returns them: one [B, V] tensor per generated
step.

Up to its end a row's entries are what lade's steps computed for its own tokens (each processed with its own
prefix). Plain generate keeps computing a row that has finished while others run: it appends pad_token_id and feeds
it (attended), so that row's later scores are the processors' output for the model's logits after its padded
sequence. lade drops finished rows from its steps, so after decoding it computes those logits in one forward of the
finished rows' padded sequences (the same tokens, positions and padding plain generate fed, computed in one pass
instead of one token per step: equal up to floating-point rounding).
"""

from __future__ import annotations

import torch

from .cache import new_cache
from .model_call import ModelCall
from .rows import Row


def batch_outputs(model, rows: list[Row], sequences: torch.Tensor, prompt_mask: torch.Tensor | None,
                  attention: str) -> tuple[tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
    """sequences: [B, L] what generate returns (finished rows padded); prompt_mask: [B, P] the prompts' attention
    mask (None: no padding) -> (scores, logits), each a tuple of L - P tensors [B, V] (None where not kept)."""
    if rows[0].scores is None and rows[0].logits is None:
        return None, None  # nothing kept: no forward of the finished rows
    tails = _tails(model, rows, sequences, prompt_mask, attention)
    scores = logits = None
    if rows[0].scores is not None:
        scores = _steps([row.scores + tail[0] for row, tail in zip(rows, tails)])
    if rows[0].logits is not None:
        logits = _steps([row.logits + tail[1] for row, tail in zip(rows, tails)])
    return scores, logits


def _steps(per_row: list[list[torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    """per_row[b][t]: [1, V] -> one [B, V] per step t."""
    return tuple(torch.cat(step) for step in zip(*per_row))


def _tails(model, rows: list[Row], sequences: torch.Tensor, prompt_mask: torch.Tensor | None,
           attention: str) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """Per row, (processed scores, raw logits) [1, V] of each step after its end: what plain generate computes
    for a finished row, fed pad tokens."""
    length = sequences.shape[1]
    early = [b for b, row in enumerate(rows) if row.ids.shape[1] < length]
    tails: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = [([], []) for _ in rows]
    if not early:
        return tails
    ids = sequences[early]  # [E, L]
    mask = torch.ones_like(ids)  # [E, L]: generate attends to every token after the prompt, the pads included
    if prompt_mask is not None:
        mask[:, : prompt_mask.shape[1]] = prompt_mask[early]
    keep = length - min(rows[b].ids.shape[1] for b in early) + 1
    with torch.no_grad():
        logits = ModelCall(model, new_cache(model), attention).last_logits(ids, mask, 0, keep)  # [E, keep, V]
    for e, b in enumerate(early):
        row = rows[b]
        for j in range(row.ids.shape[1], length):  # the token at j is predicted from position j - 1
            raw = logits[e, j - 1 - (length - keep)][None]  # [1, V]
            tails[b][0].append(row.processors(sequences[b : b + 1, :j], raw.clone()))
            tails[b][1].append(raw)
    return tails
