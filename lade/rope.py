"""Where a lookahead step may place tokens so that it computes what plain decoding computes: a position table's end,
and scaled RoPE whose frequencies follow a forward's positions.

transformers (5.x, `dynamic_rope_update` in modeling_rope_utils) picks a rotary module's inverse frequencies at every
forward from seq_len = max(position_ids) + 1 over the whole batch, for two RoPE types:
- "longrope" (Phi-3/3.5 128k, Phi-4-mini): the long factors when seq_len > original_max_position_embeddings, else the
  short ones; nothing is kept between forwards.
- "dynamic" (dynamic NTK): state kept on the module across forwards and calls: when seq_len passes
  max_seq_len_cached (initially max_position_embeddings), the frequencies are recomputed for seq_len and seq_len
  becomes max_seq_len_cached; a forward with seq_len below max_position_embeddings after such growth resets them.
Every other type transformers ships ("default", "linear", "yarn", "llama3", "proportional") fixes its frequencies
when the model is built: position-independent, exact with any step.

Plain decoding feeds token p in a forward of its own (seq_len p + 1), and the cache keeps each token's keys under the
frequencies of the forward that fed it. A lookahead step whose last token sits at t also places drafts after t, so
its seq_len is larger. The rule: a step places nothing past the last position whose plain forward runs on the
frequencies plain decoding gives the step's last token.
- longrope: below the original length drafts end at original_max_position_embeddings - 1; from the last token at
  that position on, every plain forward is long: unbounded.
- dynamic: drafts end at max_seq_len_cached - 1 (read live: lade's steps never grow it); past it every plain forward
  computes new frequencies, so the step feeds its last token alone: exactly plain decoding's forward.
- Phi-3, PhiMoE and Phi-4-multimodal `generate` also drops the cache and re-encodes the whole sequence the first time
  it holds more than config.original_max_position_embeddings tokens while the cache holds at most that many (their
  prepare_inputs_for_generation): lade stops its steps at that length and re-encodes there too (`reencodes`).
A batch shares one seq_len across its rows, which lade's rows (each at its own length) cannot follow once plain
decoding changes frequencies or re-encodes mid-run: `check_batch` refuses such batches up front.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from .compat import dynamic_rope_cached, dynamic_rope_original, dynamic_rope_state
from .vocabulary import position_limit

POSITION_DEPENDENT = ("dynamic", "longrope")  # the RoPE types whose frequencies follow a forward's positions
# model types whose generate re-encodes the sequence at config.original_max_position_embeddings (see above)
REENCODING = ("phi3", "phimoe", "phi4_multimodal")


@dataclass(frozen=True)
class ScaledRope:
    """One position-dependent rotary embedding of a model (a layer type's, for per-layer RoPE)."""

    module: torch.nn.Module
    kind: str  # "dynamic" | "longrope"
    layer_type: str | None

    @property
    def original(self) -> int:
        """longrope: original_max_position_embeddings; dynamic: max_position_embeddings (where growth resets)."""
        if self.kind == "dynamic":
            return dynamic_rope_original(self.module)
        params = self.module.config.rope_parameters
        return int((params[self.layer_type] if self.layer_type else params)["original_max_position_embeddings"])

    @property
    def cached(self) -> int:
        """dynamic: the seq_len the current frequencies were computed for (they hold up to it)."""
        return dynamic_rope_cached(self.module, self.layer_type)

    def last_position(self, last: int) -> int | None:
        """The largest position a step whose last token sits at `last` may place (None: no bound)."""
        if self.kind == "longrope":
            return self.original - 1 if last < self.original else None
        return max(last, self.cached - 1)

    def stays(self, longest: int, shortest: int, final: int) -> bool:
        """Whether a batch's plain run keeps one set of frequencies, and lade's steps with it: prompts of `longest`
        and `shortest` real tokens, plain's last forward at seq_len `final`."""
        if self.kind == "longrope":
            return final <= self.original or shortest > self.original  # all short, or every row long from the start
        cached, original = self.cached, self.original
        after = longest if longest > cached else original if longest < original < cached else cached  # after prefill
        # no growth; no reset by a row shorter than the original length while grown frequencies are in force
        return final <= after and (after == original or shortest + 1 >= original)


def scaled_ropes(model) -> list[ScaledRope]:
    """The model's rotary embeddings whose frequencies follow the positions of each forward (what transformers'
    dynamic_rope_update acts on: a type containing "dynamic", or "longrope")."""
    found = []
    for module in model.modules():
        types = getattr(module, "rope_type", None)
        pairs = types.items() if isinstance(types, dict) else [(None, types)] if isinstance(types, str) else []
        found += [ScaledRope(module, "dynamic" if "dynamic" in kind else kind, layer_type) for layer_type, kind in pairs
                  if isinstance(kind, str) and ("dynamic" in kind or kind == "longrope")]
    return found


def reencode_length(model) -> int | None:
    """The length past which `generate` re-encodes the whole sequence once (REENCODING types), else None."""
    config = model.config
    length = getattr(config, "original_max_position_embeddings", None)
    return length if config.model_type in REENCODING and isinstance(length, int) else None


def key_table(model) -> int | None:
    """The most keys one forward may hold where attention masks with a fixed causal buffer indexed by key count
    (Bark's `bias` of block_size x block_size), None where masks are built for each call."""
    sizes = [buffer.shape[-1] for name, buffer in model.named_buffers()
             if name.rpartition(".")[2] == "bias" and buffer.dtype == torch.bool and buffer.dim() == 4
             and buffer.shape[-1] == buffer.shape[-2]]
    return min(sizes, default=None)


@dataclass
class Positions:
    """One model's position rule for one generate call (build it with `Positions.of`)."""

    table: int | None  # a position table's size (None: no table)
    ropes: list[ScaledRope]
    reencode: int | None  # reencode_length
    keys: int | None = None  # the most keys one forward may hold (key_table), None: no bound

    @classmethod
    def of(cls, model) -> "Positions":
        return cls(position_limit(model), scaled_ropes(model), reencode_length(model), key_table(model))

    def room(self, cached: int) -> int | None:
        """The most tokens one forward may feed after `cached` cache slots (None: no bound)."""
        return None if self.keys is None else max(0, self.keys - cached)

    def last_position(self, last: int, pad: int = 0) -> int | None:
        """The largest logical position a step may place when the row's last token sits at `last` after `pad` slots
        of left padding (None: no bound)."""
        bounds = [r.last_position(last) for r in self.ropes]
        bounds.append(self.table - 1 if self.table is not None else None)
        if self.reencode is not None and pad + last < self.reencode:  # stop at the length generate re-encodes at
            bounds.append(self.reencode - 1 - pad)
        bounds = [b for b in bounds if b is not None]
        return min(bounds) if bounds else None

    def reencodes(self, length: int, cached: int) -> bool:
        """Whether plain `generate` re-encodes a sequence of `length` slots (padding included) whose cache holds
        `cached` slots, instead of feeding the slots after them."""
        return self.reencode is not None and cached > 0 and length > self.reencode >= cached


def check_batch(model, input_ids: torch.Tensor, pads: list[int], gen: GenerationConfig) -> None:
    """Refuse a batch (input_ids [B, P] left-padded, pads: each row's left padding) whose plain run changes RoPE
    frequencies or re-encodes mid-run."""
    longest, shortest = input_ids.shape[1] - min(pads), input_ids.shape[1] - max(pads)
    final = gen.max_length - min(pads) - 1  # plain's last forward feeds the longest row's token at final - 1
    for rope in scaled_ropes(model):
        if not rope.stays(longest, shortest, final):
            raise ValueError(
                f"rope_type '{rope.kind}' changes the RoPE frequencies with the batch's longest position (at "
                f"{rope.original} positions here), and this batch's plain run would cross that point; lade's rows "
                f"advance separately and cannot follow it: pass one prompt at a time, or keep the longest prompt plus "
                f"max_new_tokens within {rope.original} tokens"
            )
    length = reencode_length(model)
    if length is not None and input_ids.shape[1] <= length < gen.max_length - 1:
        raise ValueError(
            f"{model.config.model_type} generate re-encodes the whole batch once it passes {length} tokens "
            f"(original_max_position_embeddings), which lade's rows, advancing separately, cannot follow: pass one "
            f"prompt at a time, or keep the prompt width plus max_new_tokens within {length + 1} tokens"
        )


@contextmanager
def frequencies_kept(model):
    """Restore the dynamic-NTK state of the model's rotary embeddings on exit (lade's own timing forwards may reset
    it; plain decoding starts from the state the caller left)."""
    modules = {id(r.module): r.module for r in scaled_ropes(model) if r.kind == "dynamic"}.values()
    saved = [(m, dict(m.named_buffers(recurse=False)), dynamic_rope_state(m)) for m in modules]
    try:
        yield
    finally:
        for module, buffers, attributes in saved:
            for name, value in [*buffers.items(), *attributes.items()]:
                setattr(module, name, value)
