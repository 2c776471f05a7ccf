"""Small inputs of the cost-model tests: the compression notebook 04 would measure for every published config."""

import pandas as pd

# compression measured for each published config, as notebook 04 measures it (chat: MT-Bench, code: HumanEval)
REFERENCE = pd.DataFrame(
    [(task, f"{n},{w},{g}", n, w, g, 3, c, c - 0.1, c + 0.1, 1 + (w + g) * (n - 1) * 0.6, 0.0)
     for task, values in (("chat", (1.30, 1.39, 1.39, 1.45, 1.52)), ("code", (1.80, 2.03, 2.06, 2.21, 2.25)))
     for (n, w, g), c in zip(((4, 8, 8), (5, 7, 7), (5, 10, 10), (5, 15, 15), (7, 20, 20)), values)],
    columns=["task", "config", "N", "W", "G", "prompts", "compression", "compression_low", "compression_high",
             "step_tokens", "single_token_steps"])
