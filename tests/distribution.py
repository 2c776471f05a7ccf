"""A chi-square check that sampled first two tokens follow plain sampling's exact joint distribution
(temperature 1, no warpers), per prompt."""

from collections.abc import Callable

import torch
from scipy.stats import chisquare


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
