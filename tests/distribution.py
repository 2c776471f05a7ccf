"""A chi-square check that sampled first two tokens follow plain sampling's exact joint distribution
(temperature 1, no warpers), per prompt."""

from collections.abc import Callable

import torch
from scipy.stats import chisquare


@torch.no_grad()
def exact_first_two(model, prompt: torch.Tensor) -> torch.Tensor:
    """prompt [P] -> [V * V] probability of each (first, second) new token pair under plain sampling."""
    vocab = model.config.vocab_size
    first = model(prompt[None]).logits[0, -1].float().softmax(-1)  # [V]
    seconds = torch.cat([prompt.expand(vocab, -1), torch.arange(vocab)[:, None]], dim=1)  # [V, P+1]
    return (first[:, None] * model(seconds).logits[:, -1].float().softmax(-1)).reshape(-1).double()


@torch.no_grad()
def first_two_pvalues(model, prompts: list[torch.Tensor], draw: Callable[[], torch.Tensor], samples: int) -> list[float]:
    """draw() -> [B, 2] sampled new tokens for the B prompts; one chi-square p-value per prompt (cells
    expecting fewer than 5 are pooled)."""
    vocab = model.config.vocab_size
    counts = torch.zeros(len(prompts), vocab * vocab)
    for _ in range(samples):
        new = draw()
        counts[torch.arange(len(prompts)), new[:, 0] * vocab + new[:, 1]] += 1
    pvalues = []
    for b, prompt in enumerate(prompts):
        expected = exact_first_two(model, prompt) * samples
        keep = expected >= 5
        observed = torch.cat([counts[b][keep], counts[b][~keep].sum()[None]]).double()
        wanted = torch.cat([expected[keep], expected[~keep].sum()[None]])
        used = wanted > 0
        observed, wanted = observed[used], wanted[used] * samples / wanted[used].sum()
        pvalues.append(float(chisquare(observed.numpy(), wanted.numpy()).pvalue))
    return pvalues
