"""The per-step collectives of lookahead parallelism: small int64 tensors through all_gather, no pickling.

Every collective is one all_gather of the same message per rank: [status, n, accepted tokens (padded to N), new
window tokens of own columns (padded to ceil(W / R))]. In a step the longest acceptance wins (lowest rank on
ties) and the new window level is reassembled column by column, so every rank ends the step with the same tokens,
window and pool. A rank that fails sends status ABORT instead, so its peers raise instead of waiting; after the
last step every rank sends one more message, so that a failure on the last token reaches every rank too.
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

    def _gather(self, tokens: Sequence[int] = (), columns: torch.Tensor | None = None,
                status: int = OK) -> torch.Tensor:
        """One message per rank -> [R, size] on the CPU; raises PeerFailure if another rank aborted."""
        message = torch.full((self.size,), PAD, dtype=torch.long)  # [2 + N + share]
        message[0], message[1] = status, len(tokens)
        message[2 : 2 + len(tokens)] = torch.tensor(list(tokens), dtype=torch.long)
        if columns is not None:
            message[2 + self.ngram_size : 2 + self.ngram_size + columns.numel()] = columns.cpu()
        message = message.to(self.device)
        parts = [torch.empty_like(message) for _ in range(self.world)]
        dist.all_gather(parts, message)
        gathered = torch.stack(parts).cpu()  # [R, size]
        failed = [r for r in (gathered[:, 0] == ABORT).nonzero().flatten().tolist() if r != self.rank]
        if failed and status == OK:
            raise PeerFailure(f"lade.distributed: rank(s) {failed} failed during decoding; stopping rank {self.rank}")
        return gathered

    def step(self, accepted: Sequence[int], new_columns: torch.Tensor | None) -> tuple[list[int], torch.Tensor | None]:
        """accepted: this rank's tokens (drafts + bonus, <= N); new_columns: [own columns] next-level tokens (None
        when no window was fed). Returns the winning accepted tokens and the full next window level [W] (or None)."""
        gathered = self._gather(accepted, new_columns)
        winner = int(gathered[:, 1].argmax())  # first maximum: lowest rank on ties
        tokens = gathered[winner, 2 : 2 + int(gathered[winner, 1])].tolist()
        if new_columns is None:
            return tokens, None
        new_level = torch.empty(self.width, dtype=torch.long)  # [W]
        for r in range(self.world):
            columns = own_columns(self.width, r, self.world)
            new_level[columns] = gathered[r, 2 + self.ngram_size : 2 + self.ngram_size + len(columns)]
        return tokens, new_level.to(new_columns.device)

    def share_first(self, tokens: Sequence[int]) -> list[int]:
        """The first new token, drawn on rank 0 only (sampling): every rank returns rank 0's `tokens`."""
        gathered = self._gather(tokens if self.rank == 0 else ())
        return gathered[0, 2 : 2 + int(gathered[0, 1])].tolist()

    def finish(self) -> None:
        """After the last step: raises PeerFailure if another rank failed on its way out."""
        self._gather()

    def abort(self) -> None:
        """Tell the peers (waiting in their next collective) that this rank failed; never raises."""
        try:
            self._gather(status=ABORT)
        except Exception:  # the peers may be gone already; the original error is what matters
            pass
