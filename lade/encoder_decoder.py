"""How lade runs an encoder-decoder model: decoder-side lookahead over the encoder output generate computed.

transformers' generate runs the encoder and hands the decoding loop `input_ids` = the decoder prompt
(decoder start ids) and `encoder_outputs` / `attention_mask` (the encoder's) in model_kwargs. Each forward
here feeds the decoder tokens with their 4-D tree mask and places them at their logical positions through
the family's position adapter (lade.adapters), which lasts that forward in this thread only.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from .adapters import adapter_for
from .model_call import ModelCall


class EncoderDecoderCall(ModelCall):
    """Decoder forwards of an encoder-decoder model (the encoder is not run again); one sequence at a time."""

    def __init__(self, model, cache: Cache, attention: str, encoder_outputs,
                 encoder_attention_mask: torch.Tensor | None) -> None:
        super().__init__(model, cache, attention)
        if self.attention.name != "mask":
            raise ValueError(
                f"encoder-decoder lookahead runs through attention='mask' (eager/sdpa decoders), not "
                f"'{self.attention.name}': load the model with attn_implementation='sdpa'"
            )
        self.positions = adapter_for(model)
        self.decoder = model.get_decoder()
        self.encoder_outputs = encoder_outputs
        self.encoder_attention_mask = encoder_attention_mask  # [1, S] or None
        self._keeps_rows = False  # the LM head runs on every decoder row; ModelCall selects the kept ones

    def _forward(self, input_ids, position_ids, attention_mask, **kwargs) -> torch.Tensor:
        with self.positions(self.decoder, position_ids[0]):
            out = self.model(
                decoder_input_ids=input_ids, decoder_attention_mask=attention_mask,
                encoder_outputs=self.encoder_outputs, attention_mask=self.encoder_attention_mask,
                use_cache=True, return_dict=True, **{self._cache_kwarg: self.cache},
            )
        return out.logits.float()  # [1, q, V]
