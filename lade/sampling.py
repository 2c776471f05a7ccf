"""Lossless sampling verification of a step's token tree (do_sample=True).

At each tree node, starting at the root, with p the node's processed distribution (the logits processors and
warpers applied with the node's own prefix) and x1..xk its distinct drafted children in tree order:
try x1..xk in turn, accepting xi with probability r(xi) under the current residual r (r = p at first); on a
rejection set r(xi) = 0 and renormalise; if all are rejected, sample the token from the final residual. An
accepted draft moves the walk to that child (only candidates sharing the accepted prefix remain); a node
without drafts, or a rejection of all drafts, emits the sampled token as the step's last (bonus) token.
One random draw chain per node: k uniforms, then at most one draw from the residual.

Why it is lossless (each emitted token is distributed exactly as p at its node). Write P = p(x1) + ... +
p(xk) and m_i = 1 - p(x1) - ... - p(x_{i-1}), the residual mass before trying xi. The residual before trying
xi is p restricted to the tokens other than x1..x_{i-1}, divided by m_i, so xi is accepted with probability
p(xi) / m_i. xi is emitted iff x1..x_{i-1} were rejected and xi accepted:
    Pr[xi] = prod_{j<i} (1 - p(xj) / m_j) * p(xi) / m_i = prod_{j<i} (m_{j+1} / m_j) * p(xi) / m_i
           = (m_i / m_1) * p(xi) / m_i = p(xi)        (m_1 = 1; the product telescopes).
A token y outside the drafts is emitted iff all drafts were rejected (probability m_{k+1} = 1 - P, by the same
telescoping) and y is then drawn from the residual p(y) / (1 - P): Pr[y] = p(y). So the first token follows p
at the root exactly, whatever the drafts are, as long as they were fixed before this step's draws (the pool
and window only use earlier randomness). Given the emitted token x, the walk continues at the child holding
x, whose logits are the model's for prefix + x, and the same argument applies there with fresh draws; by
induction every emitted token is drawn from the processed conditional of its own prefix, which is what
plain `model.generate(do_sample=True)` samples from. Stopping criteria cut the emitted tokens exactly where
plain decoding would stop.

With drafts that are point masses (lade's pool and window), this rule emits each token with the same law as
drawing y ~ p and moving to the child holding y; the two differ only in which random numbers are used. The
biased alternative, sampling each candidate row independently and keeping the longest match, draws several
times at a shared node and therefore favours drafted tokens.

Reproducibility: all draws go through one `torch.Generator` (`LookaheadConfig.sampling_seed`), or through
torch's default generator when that is None, so `torch.manual_seed` works as with plain `generate`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.generation.logits_process import LogitsProcessorList

from .config import LookaheadConfig
from .tree import TokenTree
from .verify import Acceptance, greedy_walk, walk_processed


def make_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    """A generator seeded with `seed` on `device`; None (torch's default generator) when seed is None."""
    return None if seed is None else torch.Generator(device=device).manual_seed(seed)


def draw_at_node(probs: torch.Tensor, drafts: list[int], generator: torch.Generator | None) -> int:
    """One node's draw chain: the multi-candidate rule over `drafts` (distinct ids) on probs [V] (sums to 1)."""
    if not drafts:
        return int(torch.multinomial(probs, 1, generator=generator))
    draft_ids = torch.tensor(drafts, device=probs.device)  # [k]
    residual = probs.clone()
    residual[draft_ids] = 0.0  # [V]: what is left once every draft is rejected
    uniforms = torch.rand(len(drafts), generator=generator, device=probs.device, dtype=torch.float64)  # [k]
    host = torch.cat([probs[draft_ids].double(), residual.double().sum().view(1), uniforms]).tolist()  # one sync
    p_drafts, rest, u = host[: len(drafts)], host[len(drafts)], host[len(drafts) + 1 :]
    for i, token in enumerate(drafts):
        mass = rest + sum(p_drafts[i:])  # residual mass before trying draft i (exactly p_i when rest is 0)
        if u[i] * mass < p_drafts[i]:
            return token
    return int(torch.multinomial(residual, 1, generator=generator))


def sample_walk(tree: TokenTree, logits: torch.Tensor, prefix: torch.Tensor, processors: LogitsProcessorList,
                keep_scores: bool, generator: torch.Generator | None) -> Acceptance:
    """Walk the tree with the multi-candidate rule; same contract as `verify.greedy_walk` (logits [1 + T, V]: the
    root row, then one row per tree node; prefix [1, S]: tokens up to and including the root)."""
    def pick(node: int, scores: torch.Tensor) -> int:
        drafts = [tree.tokens[c] for c in tree.children(node)]
        return draw_at_node(scores.softmax(-1)[0], drafts, generator)

    return walk_processed(tree, logits, prefix, processors, keep_scores, pick)


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


@dataclass(frozen=True)
class TokenChooser:
    """How a step picks tokens: greedy (argmax) or lossless sampling through one generator, for the
    verification walk and for the window's next Jacobi level alike."""

    sampling: bool
    sample_window: bool = False
    generator: torch.Generator | None = None

    @classmethod
    def for_generation(cls, do_sample: bool, config: LookaheadConfig, device: torch.device) -> "TokenChooser":
        if not do_sample:
            return cls(False)
        return cls(True, config.sample_window, make_generator(config.sampling_seed, device))

    def walk(self, tree: TokenTree, logits: torch.Tensor, prefix: torch.Tensor, processors: LogitsProcessorList,
             keep_scores: bool) -> Acceptance:
        if self.sampling:
            return sample_walk(tree, logits, prefix, processors, keep_scores, self.generator)
        return greedy_walk(tree, logits, prefix, processors, keep_scores)

    def window_level(self, logits: torch.Tensor, prefix: torch.Tensor, processors: LogitsProcessorList) -> torch.Tensor:
        """logits [W, V] at the window's top level -> the next level [W]."""
        if self.sample_window:
            return sample_window(logits, prefix, processors, self.generator)
        return logits.argmax(-1)
