"""Up-front checks: refuse what lookahead decoding cannot do exactly, with a message saying what to change, before
any model forward and before any streamer call."""

from __future__ import annotations

import inspect

import torch
from transformers import GenerationConfig, GenerationMixin
from transformers.cache_utils import Cache
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.logits_process import LogitsProcessorList, PrefixConstrainedLogitsProcessor
from transformers.generation.stopping_criteria import MaxLengthCriteria, MaxTimeCriteria, StoppingCriteriaList

from .adapters import ADAPTERS, adapter_for
from .cache import check_compactable, self_attention_cache
from .compat import mask_length, replaces_sample_loop
from .corpus import Corpus
from .drafters import drafter_names, registered
from .quantization import check_quantized_model
from .rope import check_batch as check_batch_rope
from .verify import check_processors
from .vocabulary import input_vocab
from .windows import check_window

TOKEN_DTYPES = (torch.long, torch.int32)  # what an embedding takes as indices
RECURRENT_LAYER_TYPES = {"linear_attention", "mamba", "conv", "hybrid", "hybrid_sliding"}  # config.layer_types
RECURRENT_MODEL_TYPES = {"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"}  # recurrent without layer_types
ALIBI_MODEL_TYPES = {"bloom", "mpt"}  # ALiBi without an `alibi` config flag
OWN_GENERATE = {  # model type -> how its class's own `generate` decodes without transformers' loop or custom_generate
    **dict.fromkeys(("musicgen", "musicgen_decoder", "musicgen_melody", "musicgen_melody_decoder"),
                    "MusicGen's generate lays its codebooks out in a delay pattern and runs its own decoding loop"),
}
POSITIONS_REFUSED = {  # model type -> why its forward cannot place a step's tokens at their logical positions
    "imagegpt": "ImageGPTModel.forward flattens the attention mask to 2-D, where lade's 4-D tree mask cannot reach "
                "its attention",
    "openai-gpt": "OpenAIGPTModel.forward takes only a 2-D padding mask, which it expands itself, so lade's 4-D "
                  "tree mask cannot reach its attention",
    "xlm": "XLMModel.forward builds its own causal mask from a 2-D padding mask (get_masks), so lade's 4-D tree mask "
           "cannot reach its attention",
    "blt": "BLT groups its bytes into patches inside each forward (entropy patching of the forward's own input), so "
           "a step's drafts would be patched unlike plain decoding's one token per forward",
    "reformer": "Reformer's LSH and local attention sort and chunk the sequence and mask by key index, so lade's "
                "4-D tree mask cannot reach its attention",
    "kosmos-2.5": "its generate drops position_ids and its text model recomputes positions from padding_idx and the "
                  "token ids",
}
OFFLOADED = ("an offloaded cache keeps its layers on the CPU between forwards and copies them back asynchronously, "
             "while lade moves each step's accepted KV entries within the cache")
CACHE_IMPLEMENTATIONS_REFUSED = {  # cache_implementation -> why lade cannot decode with it
    "offloaded": OFFLOADED,
    "offloaded_static": OFFLOADED,
    "paged": "transformers runs continuous batching for it and never calls lade's decoding",
}

OTHER_MODES = {  # what to change to get greedy, sampled or beam-search decoding
    GenerationMode.ASSISTED_GENERATION: "lade replaces prompt lookup / assisted decoding; drop "
                                        "prompt_lookup_num_tokens / assistant_model",
    GenerationMode.BEAM_SAMPLE: "lade's beam search is deterministic: set do_sample=False (beam search) or "
                                "num_beams=1 (sampling)",
    GenerationMode.GROUP_BEAM_SEARCH: "lade does not do diverse (group) beam search: drop num_beam_groups (plain beam "
                                      "search) or set num_beams=1",
    GenerationMode.CONSTRAINED_BEAM_SEARCH: "lade does not do constrained beam search: drop constraints / "
                                            "force_words_ids",
    GenerationMode.CONTRASTIVE_SEARCH: "drop penalty_alpha",
    GenerationMode.DOLA_GENERATION: "drop dola_layers",
}


def check_token_generation(model) -> None:
    """Refuse a model whose generate is not transformers' token-by-token loop (before anything reads its config)."""
    model_type = model.config.model_type
    if not isinstance(model, GenerationMixin):
        raise ValueError(f"model type '{model_type}': {type(model).__name__}'s generate is not transformers' "
                         "token-by-token decoding (GenerationMixin; DiffusionGemma decodes blocks by diffusion), so "
                         "lookahead decoding does not apply; decode it with its own generate")
    if model_type in OWN_GENERATE:
        raise ValueError(f"model type '{model_type}': {OWN_GENERATE[model_type]}, which takes no custom_generate, so "
                         "lookahead decoding does not apply; decode it with its own generate")
    if replaces_sample_loop(model):
        raise ValueError(f"model type '{model_type}': {type(model).__name__} replaces transformers' decoding loop "
                         "(`_sample`) with its own (CSM, Higgs Audio: several audio codes per step), which a lookahead "
                         "step cannot reproduce; decode it with plain generate")


def check_model(model) -> None:
    model_type = model.config.model_type
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ValueError(f"the {model_type} model's weights are on the meta device (not loaded): load real weights "
                         "(from_pretrained without an empty-weights context) before decoding")
    check_token_generation(model)
    if is_recurrent(model):
        raise ValueError(
            f"model type '{model_type}' keeps a recurrent state (Mamba, RWKV or linear-attention layers): a lookahead "
            "step feeds draft tokens into that state, which cannot drop them again when they are rejected, so lade "
            "cannot decode it exactly; decode it with plain generate"
        )
    if model.config.is_encoder_decoder:
        adapter_for(model)  # raises a clear error for encoder-decoder types without a position adapter
    else:
        check_positions(model)
    check_quantized_model(model)


def check_positions(model) -> None:
    """Refuse decoder-only models whose tokens cannot be placed at the step's logical positions, naming the reason."""
    model_type, name = model.config.model_type, type(model).__name__
    if model_type in POSITIONS_REFUSED:
        raise ValueError(f"model type '{model_type}': {POSITIONS_REFUSED[model_type]}; lade cannot place a lookahead "
                         "step's tokens as plain decoding places them: decode it with plain generate")
    if getattr(model.config, "alibi", False) or model_type in ALIBI_MODEL_TYPES:
        turn_off = " or set alibi=False" if hasattr(model.config, "alibi") else ""
        raise ValueError(f"model type '{model_type}' places tokens with ALiBi, a bias computed from each key's index "
                         "in the cache rather than from position_ids, so tokens that share a logical position cannot "
                         f"be placed; decode it with plain generate{turn_off}")
    if "position_ids" not in inspect.signature(model.forward).parameters:
        family = model_type in ADAPTERS and model.config.is_decoder
        what = (f"lade decodes '{model_type}' as an encoder-decoder model (its ForConditionalGeneration class, through "
                "a position adapter); decode this decoder alone with plain generate") if family else \
            "decode it with plain generate"
        raise ValueError(f"model type '{model_type}': {name}.forward takes no position_ids, so tokens that share a "
                         f"logical position cannot be placed; {what}")


def is_recurrent(model) -> bool:
    """Whether any layer of the model carries a recurrent state instead of (or beside) a per-token KV cache."""
    config = model.config.get_text_config(decoder=True)
    layer_types = set(getattr(config, "layer_types", None) or ())
    return config.model_type in RECURRENT_MODEL_TYPES or bool(layer_types & RECURRENT_LAYER_TYPES)


def check_cache_implementation(name: str | None) -> None:
    """Refuse the cache implementations lade cannot decode with (before transformers builds the cache)."""
    if name in CACHE_IMPLEMENTATIONS_REFUSED:
        raise ValueError(f"cache_implementation={name!r} is not supported: {CACHE_IMPLEMENTATIONS_REFUSED[name]}; drop "
                         "cache_implementation (lade decodes with a DynamicCache)")


def check_no_inputs_embeds(kwargs: dict) -> None:
    if kwargs.get("inputs_embeds") is not None:
        raise ValueError("lade decodes from token ids: pass input_ids instead of inputs_embeds")


def check_token_ids(model, ids: torch.Tensor, name: str = "input_ids") -> None:
    """A [B, P] tensor of torch.long or torch.int32 ids with P >= 1 and every id inside the model's vocabulary."""
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"{name} must be a torch.LongTensor of shape [batch, length], got {type(ids).__name__}")
    if ids.dim() != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise ValueError(f"{name} must have shape [batch, length] with length >= 1, got {tuple(ids.shape)}: "
                         "add a batch dimension with ids.unsqueeze(0), or pass a non-empty prompt")
    if ids.dtype not in TOKEN_DTYPES:
        raise ValueError(f"{name} must hold integer token ids as torch.long (or torch.int32, what an embedding takes), "
                         f"got dtype {ids.dtype}: convert them with {name}.long()")
    vocab = input_vocab(model)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"{name} holds ids in [{low}, {high}], outside the model's vocabulary [0, {vocab}): tokenize "
                         "with this model's tokenizer")


def check_mask_shape(attention_mask: torch.Tensor, input_ids: torch.Tensor) -> None:
    if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != tuple(input_ids.shape):
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else \
            type(attention_mask).__name__
        raise ValueError(f"attention_mask has shape {shape}, input_ids {tuple(input_ids.shape)}: pass the mask the "
                         "tokenizer returned with these ids")


def left_padding(attention_mask: torch.Tensor, input_ids: torch.Tensor) -> list[int]:
    """attention_mask: [B, P] of 0/1 -> each row's number of left-padding slots; refuse any other mask."""
    check_mask_shape(attention_mask, input_ids)
    mask = attention_mask.long()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
    empty = (mask.sum(-1) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"attention_mask row(s) {empty} are all zeros: those prompts hold no token to continue from; "
                         "drop them from the batch or give each at least one token (e.g. BOS)")
    if not bool((mask[:, 1:] >= mask[:, :-1]).all()) or not bool(mask[:, -1].all()):
        raise ValueError(
            "lade needs left-padded batches (padding only before each prompt): set tokenizer.padding_side='left'"
        )
    return (mask.shape[1] - mask.sum(-1)).tolist()


def check_generation(model, input_ids: torch.Tensor, gen: GenerationConfig, processors: LogitsProcessorList,
                     stopping_criteria: StoppingCriteriaList, model_kwargs: dict, cache: Cache, synced_gpus: bool,
                     streamer, assistant_model=None) -> list[int]:
    """Every refusal of lookahead generation (cache: the one decoding will use); returns each row's left padding."""
    check_model(model)
    check_no_inputs_embeds(model_kwargs)
    check_cache_implementation(gen.cache_implementation)
    check_token_ids(model, input_ids, "decoder_input_ids" if model.config.is_encoder_decoder else "input_ids")
    mode = gen.get_generation_mode(assistant_model or getattr(gen, "assistant_model", None))
    beams = mode == GenerationMode.BEAM_SEARCH
    if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE) and not beams:
        raise ValueError(f"lade decodes greedily, by sampling or by beam search, but these arguments ask for "
                         f"{mode.value}: {OTHER_MODES.get(mode, 'drop the arguments that select it')}")
    if gen.num_return_sequences != 1 and not beams:
        raise ValueError("lade returns one sequence per prompt outside beam search; set num_return_sequences=1")
    if gen.output_attentions or gen.output_hidden_states:
        raise ValueError("output_attentions / output_hidden_states are not available from lookahead steps")
    if synced_gpus:
        raise ValueError("synced_gpus (DeepSpeed ZeRO-3 / FSDP) is not supported by lade")
    if beams:
        _check_beams(gen, streamer, self_attention_cache(cache).get_seq_length())
    else:  # beam search calls the processors once per replayed step, exactly as plain beam search does
        check_processors(processors)
    pads = _check_padding(model, input_ids, gen, model_kwargs, beams)
    if getattr(self_attention_cache(cache), "offloading", False):
        check_cache_implementation("offloaded")
    check_compactable(cache, model.config.model_type)
    check_window(model, cache, gen, 1)  # again with the step's width once the configuration is known
    past = self_attention_cache(cache).get_seq_length()
    if past:
        if len(pads) > 1 or any(pads):
            raise ValueError("a cache passed in (prefix caching) works with one unpadded prompt: pass one prompt at a "
                             "time, or no past_key_values")
        if model.config.is_encoder_decoder:
            raise ValueError("lade does not continue an encoder-decoder cache: pass no past_key_values")
        if past >= input_ids.shape[1]:
            raise ValueError(f"the cache passed in holds {past} tokens, the prompt only {input_ids.shape[1]}: pass the "
                             "whole sequence the cache was built from plus at least one new token")
    if len(pads) > 1:
        if not beams:  # beam search replays plain beam search's batched calls: nothing to refuse per row
            _check_batch(gen, processors, stopping_criteria, streamer)
        check_batch_rope(model, input_ids, pads, gen)
    return pads


def _check_beams(gen: GenerationConfig, streamer, past: int) -> None:
    """What lade's beam search refuses (transformers refuses a streamer with beams too)."""
    if streamer is not None:
        raise ValueError("a streamer cannot be used with beam search (transformers refuses it too): drop the streamer "
                         "or set num_beams=1")
    if past:
        raise ValueError("lade's beam search does not continue a cache passed in: pass no past_key_values / cache, or "
                         "set num_beams=1")


def _check_padding(model, input_ids: torch.Tensor, gen: GenerationConfig, model_kwargs: dict,
                   beams: bool = False) -> list[int]:
    if model.config.is_encoder_decoder:
        if input_ids.shape[0] != 1 and not beams:  # beams all have one length: one row of decoder positions
            raise ValueError(f"lade decodes encoder-decoder models one input at a time; got batch size "
                             f"{input_ids.shape[0]} (pass one input)")
        mask = model_kwargs.get("decoder_attention_mask")
        if mask is not None and not bool(mask.all()):
            raise ValueError("lade does not support a padded decoder prompt: pass decoder ids with an all-ones mask")
        return [0] * input_ids.shape[0]
    length = mask_length(gen)  # generate drops an all-ones mask, keeping its length
    if length is not None and length not in (-1, input_ids.shape[1]):
        raise ValueError(f"attention_mask has length {length}, input_ids {input_ids.shape[1]}: pass the mask the "
                         "tokenizer returned with these ids")
    mask = model_kwargs.get("attention_mask")
    return [0] * input_ids.shape[0] if mask is None else left_padding(mask, input_ids)


def _check_batch(gen: GenerationConfig, processors: LogitsProcessorList, stopping_criteria: StoppingCriteriaList,
                 streamer) -> None:
    """What lookahead decoding refuses for several prompts at once."""
    if any(isinstance(p, PrefixConstrainedLogitsProcessor) for p in processors):
        raise ValueError(
            "prefix_allowed_tokens_fn takes a batch index, which lade's per-row verification cannot supply: "
            "pass one prompt at a time"
        )
    if streamer is not None:
        raise ValueError("a streamer takes one sequence: pass one prompt to stream lookahead output")
    if not any(hasattr(c, "eos_token_id") for c in stopping_criteria) and not all(
        isinstance(c, (MaxLengthCriteria, MaxTimeCriteria)) for c in stopping_criteria
    ):
        raise ValueError(
            "batched lookahead decoding with stop strings or custom stopping criteria needs an eos_token_id: without "
            "one, plain generate keeps decoding finished rows, which lade does not reproduce"
        )


def check_corpus(corpus: object, vocab_size: int, model_type: str | None, distributed: bool) -> None:
    """corpus= of a call (None: none): a Corpus of this model's vocabulary, decoded in one process."""
    if corpus is None:
        return
    if not isinstance(corpus, Corpus):
        raise ValueError(f"corpus must be a lade.Corpus (kept across calls), got {type(corpus).__name__}")
    if distributed:
        raise ValueError("corpus= drafts in one process: lookahead parallelism (lade.distributed) takes no corpus")
    corpus.check(vocab_size, model_type)


def check_corpus_draft(corpus: Corpus | None, config) -> None:
    """A clear error where the resolved config could not draft from the call's corpus (it is never ignored)."""
    if corpus is not None and (not config.enabled or not registered(config.draft).corpus):
        users = [name for name in drafter_names() if registered(name).corpus]
        what = "plain decoding (enabled=False)" if not config.enabled else f"draft={config.draft!r}"
        raise ValueError(f"{what} cannot draft from a corpus: use lookahead_config='auto' or a config with draft in "
                         f"{users}, or drop corpus=")
