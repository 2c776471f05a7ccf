"""lade's lookahead decoding as a transformers custom generation method.

    model.generate(input_ids, attention_mask=mask, custom_generate="<this repository's folder or Hub id>",
                   trust_remote_code=True, lookahead_config=lade.LookaheadConfig(...) or "auto", max_new_tokens=128)

transformers (5.24) loads this file and calls `generate(model=..., **every argument of model.generate)`; lade then
decodes through its own custom_generate callable, so every generate argument keeps its meaning (see lade.generate).
"""

import inspect

from transformers.generation.utils import GenerationMixin

import lade

# model.generate's own parameters: handed over even when unset (None), unlike the keyword arguments a caller passed
SIGNATURE = set(inspect.signature(GenerationMixin.generate).parameters) - {"self", "kwargs"}


def generate(model, inputs=None, lookahead_config=None, **kwargs):
    input_ids = kwargs.pop("input_ids", None) if inputs is None else inputs
    passed = {name: value for name, value in kwargs.items() if name not in SIGNATURE or value is not None}
    return lade.generate(model, input_ids, lookahead_config, **passed)
