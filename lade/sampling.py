"""Lossless, reproducible sampling verification of a step's token tree (do_sample=True).

Keyed noise. Every (seed, row, position) owns a noise vector E [V] of Exp(1) variates, E(v) = -log u(v), with the
uniform u(v) in (0, 1) taken from a keyed integer hash of (seed, row, position, v) (`position_noise`): a
counter-based generator, so the noise of a position is the same whichever step computes it, however many tokens
that step feeds (the uniforms come from exact integer arithmetic: the same on every device). The position is the
token's index in the row's prompt and output (padding not counted); the row is its index in the input batch.

The rule (an exponential race, i.e. Gumbel-max). At each tree node, with p the node's processed distribution (the
logits processors and warpers applied with the node's own prefix) and t the position of the token chosen there,
the node's token is x = argmax_v p(v) / E_t(v). The walk starts at the root (the last accepted token); if x is a
drafted child it moves there and goes on, else x is the step's last (bonus) token. The drafts never enter the
choice: they only decide how many positions one step can settle.

Why it is lossless. (1) One position: for independent E(v) ~ Exp(1), E(v) / p(v) ~ Exp(rate p(v)), independent;
the smallest of independent exponentials is v with probability p(v) / sum_w p(w) = p(v), so x ~ p (tokens with
p(v) = 0 never win). (2) The sequence: position t's noise decides position t's token and nothing else, and is
independent of every other position's noise. The prefix x_<t is a function of the noise at positions < t, and p at
position t a function of that prefix, so given x_<t the token x_t follows p(. | x_<t) exactly, which is what plain
`model.generate(do_sample=True)` samples from. The drafts (pool, window, retrieval, recycling, any tree size or
shape, planned from earlier tokens, logits or wall-clock timings) cannot change any x_t, so the output is the same
function of (seed, row, prompt) as the reference sampler that runs one plain forward per position and applies the
same rule: token for token, whatever the steps' grouping. Stopping criteria cut the emitted tokens exactly where
plain decoding would stop.

Relation to the multi-candidate rule (try drafts x1..xk in turn, accept xi with probability r(xi) under the
residual r, zero and renormalise on a rejection, draw from the residual if all fail). For point-mass drafts both
rules emit each token with probability p and accept a draft with probability p(x1) + ... + p(xk), so they run as
fast; but that rule's draw chain has one uniform per draft tried, so its random stream, and with it the output,
changes whenever a tree changes (an adaptive drafter's trees follow step timings). The race consumes nothing per
draft, which is what makes a seed reproduce the output.

Accuracy: the uniforms have 32-bit resolution and come from a fixed hash (pseudo-random, as any generator's), so
the law above holds up to errors of order 2^-32 per token.

Seeds: `LookaheadConfig.sampling_seed` is the key. Without it, one key is drawn per call from torch's default
generator, so `torch.manual_seed(...)` before the call reproduces the output as it does for plain `generate` (the
tokens differ from plain `generate`'s, whose stream is another). A sampled window (`sample_window=True`) draws its
levels from a `torch.Generator` seeded from the key: the window only shapes drafts, never the output.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from transformers.generation.logits_process import LogitsProcessorList

from .config import LookaheadConfig
from .tree import TokenTree
from .verify import Acceptance, greedy_walk, walk_processed

if TYPE_CHECKING:
    from .rows import Row

_MASK32 = 0xFFFFFFFF


def _key_words(seed: int, row: int, position: int, words: int) -> list[int]:
    """`words` 32-bit words derived from (seed, row, position) by a keyed digest."""
    digest = hashlib.blake2b(struct.pack("<QQQ", seed, row, position), digest_size=4 * words,
                             person=b"lade-noise").digest()
    return list(struct.unpack(f"<{words}I", digest))


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer mixer (xor-shift-multiply) on int64 tensors holding values in [0, 2^32); every
    product stays below 2^63, so the arithmetic is exact on every device."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def position_noise(seed: int, row: int, position: int, vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[vocab] float64 Exp(1) variates of one (seed, row, position): the same values on every call (and the same
    uniforms, exact integers, on every device)."""
    k0, k1, k2 = _key_words(seed, row, position, 3)
    h = torch.arange(vocab, device=device, dtype=torch.int64)  # [V] the counter: token ids
    h = _mix32(_mix32(_mix32(h ^ k0) ^ k1) ^ k2)  # [V] a keyed permutation of 32-bit values: distinct per token
    u = (h.double() + 0.5) / 2.0**32  # [V] in (0, 1)
    return -torch.log(u)


def race(probs: torch.Tensor, noise: torch.Tensor) -> int:
    """The exponential race: argmax p(v) / E(v) over probs [V] (any non-negative weights) and noise [V] (Exp(1))."""
    return int((probs.double() / noise).argmax())


@dataclass(frozen=True)
class PositionSampler:
    """Draws the token of (row, position) from processed scores with that position's keyed noise."""

    seed: int

    def __call__(self, scores: torch.Tensor, row: int, position: int) -> int:
        """scores [1, V] processed logits -> the token at `position` of `row`."""
        probs = scores[0].double().softmax(-1)  # [V]
        return race(probs, position_noise(self.seed, row, position, probs.shape[0], probs.device))


def sample_walk(tree: TokenTree, logits: torch.Tensor, row: Row, keep_scores: bool,
                sampler: PositionSampler) -> Acceptance:
    """Walk the tree choosing each node's token by its position's race; same contract as `verify.greedy_walk`
    (logits [1 + T, V]: the root row, then one row per tree node; row.ids [1, S]: tokens up to the root)."""
    first = row.ids.shape[1] - row.pad  # position of the token chosen at the root

    def pick(node: int, scores: torch.Tensor) -> int:
        return sampler(scores, row.index, first + (0 if node < 0 else tree.depths[node] + 1))

    return walk_processed(tree, logits, row.ids, row.processors, keep_scores, pick)


def sample_window(
    logits: torch.Tensor,  # [W, V] predictions at the window's top level
    prefix: torch.Tensor,  # [1, S] accepted tokens
    processors: LogitsProcessorList,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Next Jacobi level drawn from the processed distributions (all rows conditioned on the accepted prefix,
    an approximation that only affects speed: window tokens are drafts, never output) -> [W]."""
    scores = processors(prefix.expand(logits.shape[0], -1), logits.clone())  # [W, V]
    return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(1)  # [W]


def sampling_key(seed: int | None) -> int:
    """The noise key of a call: `seed`, or one drawn from torch's default generator when it is None."""
    return int(torch.randint(0, 2**63 - 1, ())) if seed is None else seed


def window_generator(key: int, device: torch.device) -> torch.Generator:
    """The sampled window's generator, seeded from the call's key (a stream apart from the positions' noise)."""
    (derived,) = struct.unpack("<Q", hashlib.blake2b(struct.pack("<Q", key), digest_size=8,
                                                     person=b"lade-window").digest())
    return torch.Generator(device=device).manual_seed(derived >> 1)


@dataclass(frozen=True)
class TokenChooser:
    """How a step picks tokens: greedy (argmax) or lossless sampling with keyed per-position noise, for the
    verification walk; argmax or a seeded draw for the window's next Jacobi level."""

    sampling: bool
    sample_window: bool = False
    sampler: PositionSampler | None = None
    generator: torch.Generator | None = None  # the sampled window's

    @classmethod
    def for_generation(cls, do_sample: bool, config: LookaheadConfig, device: torch.device) -> "TokenChooser":
        if not do_sample:
            return cls(False)
        key = sampling_key(config.sampling_seed)
        window = window_generator(key, device) if config.sample_window else None
        return cls(True, config.sample_window, PositionSampler(key), window)

    def walk(self, tree: TokenTree, logits: torch.Tensor, row: Row, keep_scores: bool) -> Acceptance:
        """logits [1 + T, V]: the root's and the tree nodes' rows of `row`'s step."""
        if self.sampling:
            return sample_walk(tree, logits, row, keep_scores, self.sampler)
        return greedy_walk(tree, logits, row.ids, row.processors, keep_scores)

    def window_level(self, logits: torch.Tensor, prefix: torch.Tensor, processors: LogitsProcessorList) -> torch.Tensor:
        """logits [W, V] at the window's top level -> the next level [W]."""
        if self.sample_window:
            return sample_window(logits, prefix, processors, self.generator)
        return logits.argmax(-1)
