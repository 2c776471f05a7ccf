"""A chi-square check that sampled first two tokens follow plain sampling's exact joint distribution
(temperature 1, no warpers), per prompt; and a deliberately biased verifier, the deviation that the sampling checks'
power is measured against (tests/core/test_sampling.py, tests/lab/test_sampling_check.py)."""

from collections.abc import Callable

import torch
from scipy.stats import chisquare

from lade.strategy import LocalStrategy
from lade.verify import Acceptance


def decoder_only(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """prefixes [B, S] -> next-token probabilities [B, V] of a causal LM."""
    return lambda prefixes: model(prefixes).logits[:, -1].float().softmax(-1)


@torch.no_grad()
def exact_first_two(conditional: Callable[[torch.Tensor], torch.Tensor], prompt: torch.Tensor) -> torch.Tensor:
    """prompt [P] -> [V * V] probability of each (first, second) new token pair under plain sampling."""
    first = conditional(prompt[None])[0]  # [V]
    vocab = first.shape[0]
    seconds = torch.cat([prompt.expand(vocab, -1), torch.arange(vocab)[:, None]], dim=1)  # [V, P+1]
    return (first[:, None] * conditional(seconds)).reshape(-1).double()


@torch.no_grad()
def first_two_pvalues(conditional: Callable[[torch.Tensor], torch.Tensor], prompts: list[torch.Tensor],
                      draw: Callable[[], torch.Tensor], samples: int) -> list[float]:
    """draw() -> [B, 2] sampled new tokens for the B prompts; one chi-square p-value per prompt (cells
    expecting fewer than 5 are pooled)."""
    expected = [exact_first_two(conditional, prompt) * samples for prompt in prompts]  # [V * V] each
    vocab2 = expected[0].shape[0]
    counts = torch.zeros(len(prompts), vocab2)
    for _ in range(samples):
        new = draw()
        counts[torch.arange(len(prompts)), new[:, 0] * int(vocab2**0.5) + new[:, 1]] += 1
    pvalues = []
    for b, want in enumerate(expected):
        keep = want >= 5
        observed = torch.cat([counts[b][keep], counts[b][~keep].sum()[None]]).double()
        wanted = torch.cat([want[keep], want[~keep].sum()[None]])
        used = wanted > 0
        observed, wanted = observed[used], wanted[used] * samples / wanted[used].sum()
        pvalues.append(float(chisquare(observed.numpy(), wanted.numpy()).pvalue))
    return pvalues


def biased_walk(tree, logits, row, keep_scores, sampler) -> Acceptance:
    """The biased verifier: sample every candidate path independently (torch's default generator), keep the
    longest match."""
    best = None
    for leaf in [n for n in range(len(tree)) if not tree.children(n)] or [None]:
        acc, ids, node = Acceptance([], [], []), row.ids, -1
        for target in (tree.paths[leaf] if leaf is not None else []) + [None]:
            probs = row.processors(ids, logits[node + 1 : node + 2].clone()).softmax(-1)[0]
            token = int(torch.multinomial(probs, 1))
            acc.tokens.append(token)
            acc.rows.append(node + 1)
            if target is None or tree.tokens[target] != token:
                break
            acc.path.append(target)
            node, ids = target, torch.cat([ids, ids.new_tensor([[token]])], dim=1)
        if best is None or len(acc.tokens) > len(best.tokens):
            best = acc
    return best


class BiasedStrategy(LocalStrategy):
    """The one-process strategy with the biased verifier in place of lade's lossless walk (injected through
    lookahead_strategy=, as lookahead parallelism injects its own)."""

    def verify(self, choose, layout, logits, row, keep_scores):
        return biased_walk(layout.tree, logits, row, keep_scores, choose.sampler)
