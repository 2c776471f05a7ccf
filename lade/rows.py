"""Per-sequence state of the decoding loop: one Row per sequence of the batch (a single sequence is a batch of one)."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field

import torch
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .drafters import Drafter
from .outputs import LookaheadStats


@dataclass
class Row:
    """One sequence: its ids (left padding, prompt, accepted tokens), lookahead state and output.

    Cache layout: the row's first `cached` slots hold its padding and every token but those still to be fed (the
    last accepted token, and under lookahead parallelism tokens verified on another rank); in a batch, slots past
    `cached` are junk until the next step overwrites them.
    """

    index: int  # row in the input batch
    pad: int  # left-padding slots
    prompt: InitVar[torch.Tensor]  # [1, P] the row's left padding and prompt
    cached: int
    drafter: Drafter
    processors: LogitsProcessorList  # this row's view of the batch's processors
    stats: LookaheadStats = field(default_factory=LookaheadStats)
    scores: list[torch.Tensor] | None = None  # [1, V] processed scores per new token, when kept
    logits: list[torch.Tensor] | None = None  # [1, V] raw logits per new token, when kept
    finished: bool = False

    def __post_init__(self, prompt: torch.Tensor) -> None:
        # ids live in a buffer grown by doubling (gpt-fast preallocates the same way): appending stays linear
        self._buffer = prompt.new_empty((1, prompt.shape[1] + 64))  # [1, capacity]
        self._buffer[:, : prompt.shape[1]] = prompt
        self._length = prompt.shape[1]

    @property
    def ids(self) -> torch.Tensor:
        """[1, S] left padding, prompt and accepted tokens (a view of the buffer)."""
        return self._buffer[:, : self._length]

    @property
    def tokens(self) -> torch.Tensor:
        """[S - pad] the row's prompt and output."""
        return self.ids[0, self.pad :]

    @property
    def first_fed_position(self) -> int:
        """Logical position of the first token a step feeds (the first token not in the cache)."""
        return self.cached - self.pad

    def emit(self, tokens: list[int], scores: list[torch.Tensor], logits: torch.Tensor | None,
             stopping_criteria: StoppingCriteriaList, streamer=None) -> int:
        """Append tokens one by one until a stopping criterion fires; return how many were taken.
        scores: [1, V] per token (or empty); logits: [len(tokens), V] (or None)."""
        self._reserve(len(tokens))
        start = self._length
        self._buffer[0, start : start + len(tokens)] = self._buffer.new_tensor(tokens)  # [T], one copy per step
        taken = 0
        for i in range(len(tokens)):
            self._length += 1
            taken += 1
            if self.scores is not None:
                self.scores.append(scores[i])
            if self.logits is not None:
                self.logits.append(logits[i : i + 1])
            if streamer is not None:
                streamer.put(self.ids[:, -1].cpu())
            if bool(stopping_criteria(self.ids, scores[i] if scores else None).all()):
                self.finished = True
                break
        self.stats.record_step(taken)
        return taken

    def _reserve(self, extra: int) -> None:
        """Room for `extra` more tokens, doubling the buffer when it is full."""
        if self._length + extra <= self._buffer.shape[1]:
            return
        grown = self._buffer.new_empty((1, max(2 * self._buffer.shape[1], self._length + extra)))  # [1, capacity]
        grown[:, : self._length] = self.ids
        self._buffer = grown


def left_pad(prompts: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[P_b] prompts -> ids [B, P] and attention mask [B, P], padded on the left (what lade's batches take)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p) :] = p
        mask[b, width - len(p) :] = 1
    return ids, mask


def row_lengths(new: torch.Tensor, eos: torch.Tensor | None) -> list[int]:
    """Tokens each row generated: through its first EOS (any id of `eos`, None: no EOS), else all. new: [B, T]."""
    if eos is None or eos.numel() == 0 or new.shape[1] == 0:
        return [new.shape[1]] * new.shape[0]
    hits = torch.isin(new, eos.to(new.device))  # [B, T]
    first = hits.int().argmax(1) + 1  # [B]
    return torch.where(hits.any(1), first, new.shape[1]).tolist()


def pad_rows(rows: list[Row], pad_id: int | None) -> torch.Tensor:
    """Stack rows [1, S_b] into [B, max S_b], rows that finished early padded with pad_id as `model.generate` does."""
    length = max(row.ids.shape[1] for row in rows)
    if pad_id is None and any(row.ids.shape[1] < length for row in rows):
        raise ValueError("rows finished at different lengths and no pad_token_id is set: pass pad_token_id=")
    out = rows[0].ids.new_full((len(rows), length), int(pad_id) if pad_id is not None else 0)  # [B, S]
    for b, row in enumerate(rows):
        out[b, : row.ids.shape[1]] = row.ids[0]
    return out
