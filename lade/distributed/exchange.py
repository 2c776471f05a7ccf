"""The per-step collectives of lookahead parallelism: small int64 tensors through all_gather, no pickling.

One step message per rank: [status, n, accepted tokens (padded to N), new window tokens of own columns
(padded to ceil(W / R))]. The longest acceptance wins (lowest rank on ties); the new window level is
reassembled column by column, so every rank ends the step with the same tokens, window and pool.
A rank that fails sends one message with status ABORT instead, so its peers raise instead of waiting.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from .shard import own_columns

OK, ABORT = 0, 1
PAD = -1


class PeerFailure(RuntimeError):
    """Another rank failed during lookahead decoding."""


class StepExchange:
    def __init__(self, ngram_size: int, width: int, rank: int, world: int, device: torch.device) -> None:
        self.rank, self.world, self.device = rank, world, device
        self.ngram_size, self.width = ngram_size, width
        self.share = -(-width // world)  # columns of the widest share
        self.size = 2 + ngram_size + self.share

    def _gather(self, message: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(message) for _ in range(self.world)]
        dist.all_gather(parts, message)
        return torch.stack(parts)  # [R, size]

    def step(self, accepted: Sequence[int], new_columns: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """accepted: this rank's tokens (drafts + bonus, <= N); new_columns: [own columns] next-level tokens.
        Returns the winning accepted tokens and the full next window level [W]."""
        message = torch.full((self.size,), PAD, dtype=torch.long)  # [2 + N + share]
        message[0], message[1] = OK, len(accepted)
        message[2 : 2 + len(accepted)] = torch.tensor(list(accepted), dtype=torch.long)
        message[2 + self.ngram_size : 2 + self.ngram_size + new_columns.numel()] = new_columns.cpu()
        gathered = self._gather(message.to(self.device)).cpu()  # [R, size]
        failed = (gathered[:, 0] == ABORT).nonzero().flatten().tolist()
        if failed:
            raise PeerFailure(f"lade.distributed: rank(s) {failed} failed during decoding; stopping rank {self.rank}")
        winner = int(gathered[:, 1].argmax())  # first maximum: lowest rank on ties
        tokens = gathered[winner, 2 : 2 + int(gathered[winner, 1])].tolist()
        new_level = torch.empty(self.width, dtype=torch.long)  # [W]
        for r in range(self.world):
            columns = own_columns(self.width, r, self.world)
            new_level[columns] = gathered[r, 2 + self.ngram_size : 2 + self.ngram_size + len(columns)]
        return tokens, new_level

    def share_first(self, tokens: Sequence[int]) -> list[int]:
        """The first new token, drawn on rank 0 only (sampling): every rank returns rank 0's `tokens`."""
        message = torch.tensor(list(tokens)[:1], dtype=torch.long, device=self.device)  # [1]
        dist.broadcast(message, src=0)
        return message.tolist()

    def abort(self) -> None:
        """Tell the peers (waiting in their next step) that this rank failed; never raises."""
        message = torch.full((self.size,), PAD, dtype=torch.long, device=self.device)
        message[0] = ABORT
        try:
            self._gather(message)
        except Exception:  # the peers may be gone already; the original error is what matters
            pass
