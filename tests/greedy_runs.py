"""The greedy exactness run shared by the causal and encoder-decoder tests: lade against plain `generate` over a set
of prompts, cycling through lookahead configs."""

import torch

import lade
from tiny_models import random_prompt

PROMPTS = 20


def most_accepted(model, configs: list, greedy: dict, long: int, short: int) -> int:
    """Decode PROMPTS prompts (seeds 0, 1, ...; every other one with a repeated span; the first `long` tokens, the
    others `short`) with lade, cycling through `configs`; each output must equal plain greedy `generate` with the
    same `greedy` arguments -> the most tokens one step accepted (a caller checks it is above 1, or verification
    was never exercised)."""
    accepted = 0
    for i in range(PROMPTS):
        ids = random_prompt(i, length=long if i == 0 else short, repeat=i % 2 == 0)  # [1, L]
        config = configs[i % len(configs)]
        out, stats = lade.generate(model, ids, config, return_stats=True, **greedy)
        assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **greedy)), \
            f"prompt {i}, {config}"
        accepted = max(accepted, max(stats.accepted_per_step))
    return accepted
