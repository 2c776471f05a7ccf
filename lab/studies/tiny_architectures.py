"""Tiny random models of every generative model type transformers ships, built from each type's default config
with small dimensions (as transformers' own model testers size theirs), for lab.studies.architecture_sweep.

A type is listed from transformers' auto mappings (causal LM, causal image modeling, seq2seq LM, image-text-to-text,
multimodal LM, text to waveform or spectrogram); its model class is the first of those that names it. Building it
can fail (a package it needs is missing, its config cannot be made small this way): `build` raises NotBuildable with
the reason.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers
from transformers import CONFIG_MAPPING, PretrainedConfig
from transformers.models.auto import modeling_auto

from lab.studies.tiny_overrides import GENERATION, OVERRIDES

MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_CAUSAL_IMAGE_MODELING_MAPPING_NAMES",
            "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
            "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "MODEL_FOR_TEXT_TO_WAVEFORM_MAPPING_NAMES",
            "MODEL_FOR_TEXT_TO_SPECTROGRAM_MAPPING_NAMES")
HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 32, 64, 2, 4, 2, 8
SIZES = {  # config field -> tiny value, set wherever a config (or one of its sub-configs) has the field
    **dict.fromkeys(("hidden_size", "n_embd", "d_model", "embed_dim", "dim", "hidden_dim", "n_embed"), HIDDEN),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff",
                     "ffn_hidden_size"), FFN),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers",
                     "layers", "num_decoder_layers", "depth"), LAYERS),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
                     "decoder_attention_heads", "attention_heads"), HEADS),
    **dict.fromkeys(("num_key_value_heads", "n_head_kv", "num_kv_heads"), KV_HEADS),
    "head_dim": HEAD_DIM, "moe_intermediate_size": FFN, "shared_expert_intermediate_size": FFN,
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts"), 4),
    **dict.fromkeys(("num_experts_per_tok", "num_experts_per_token"), 2), "linear_num_heads": HEADS,
    "linear_head_dim": HEAD_DIM, **dict.fromkeys(("attention_hidden_size", "backbone_hidden_size", "out_hidden_size",
                                                  "text_hidden_size", "condition_dim", "audio_hidden_size"), HIDDEN),
    "num_expert_group": 1, "unpadded_vocab_size": 99, "qk_head_dim": 2 * HEAD_DIM, "first_k_dense_replace": 1,
    "vocab_size": 99, "rotary_dim": 4,
    **dict.fromkeys(("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"), HEAD_DIM),  # multi-head latent attention
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), 16), **dict.fromkeys(("n_group", "topk_group"), 1),
}
LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers")
KEEP_SUB_CONFIGS = {"codec_config"}  # audio codecs whose convolutions need their own sizes (CSM's Mimi)
UNSET_SIZES = ("num_key_value_heads", "num_experts_per_tok")  # also set where the default is None
SPECIAL_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 0}


def generative_types() -> dict[str, str]:
    """model type -> the class name plain `generate` runs for it (the first mapping that names the type)."""
    types: dict[str, str] = {}
    for name in MAPPINGS:
        for model_type, class_name in getattr(modeling_auto, name, {}).items():
            types.setdefault(model_type, class_name if isinstance(class_name, str) else class_name[0])
    return dict(sorted(types.items()))


class NotBuildable(Exception):
    """A model type the sweep cannot build without extra packages or inputs (the message says why)."""


def tiny_config(config: PretrainedConfig) -> PretrainedConfig:
    """A copy of `config` (and of each sub-config) with SIZES set where it has the fields; no dropout."""
    missing = object()
    fields = {**{key: value for key, value in SIZES.items() if type(_field(config, key, missing)) is int
                 or key in UNSET_SIZES and key in vars(config) and _field(config, key, missing) is None},
              **{key: type(value)(0) for key, value in vars(config).items() if (key.endswith("dropout")
                 or key.endswith("pdrop")) and type(value) in (int, float)},
              **{key: value for key, value in SPECIAL_IDS.items() if _field(config, key, missing) is None
                 or type(_field(config, key, missing)) is int}}
    for key in [key for key in fields if isinstance(getattr(type(config), key, None), property)]:
        del fields[key]  # derived by the config itself
    if config.model_type == "gpt_neo":  # its attention_types list must cover num_layers
        fields["attention_types"] = [[["global", "local"], LAYERS // 2]]
        fields["attention_layers"] = ["global", "local"] * (LAYERS // 2)
    if config.is_encoder_decoder:
        fields["decoder_start_token_id"] = 0
    for key in getattr(config, "sub_configs", {}):
        sub = getattr(config, key, None)
        if isinstance(sub, PretrainedConfig) and key not in KEEP_SUB_CONFIGS:
            fields[key] = tiny_config(sub)
    layers = next((getattr(config, key) for key in LAYER_COUNTS if isinstance(getattr(config, key, None), int)), 0)
    for key, kinds in vars(config).items():  # per-layer lists: one entry per tiny layer
        if isinstance(kinds, list) and kinds and (key.endswith("layer_types") or len(kinds) == layers > LAYERS
                                                  and len(set(map(repr, kinds))) <= LAYERS):  # else kept whole
            distinct = list(dict.fromkeys(map(repr, kinds)))  # every distinct kind first (hybrids keep attention)
            fields[key] = ([kinds[[repr(k) for k in kinds].index(d)] for d in distinct] + kinds * LAYERS)[:LAYERS]
    if "per_layer_config" in config.to_dict():
        fields["per_layer_config"] = {}  # per-layer sizes (Gemma 4's global head_dim, ...) made uniform
    if "head_dim" in vars(config) and vars(config)["head_dim"] is None:
        fields["head_dim"] = HEAD_DIM  # left None, some models (Ministral) fail rather than derive it
    if "kv_lora_rank" in vars(config) and "num_key_value_heads" in fields:  # latent attention: a key head per query
        fields["num_key_value_heads"] = HEADS
    if vars(config).get("num_kv_shared_layers") == layers > 0:  # every layer reads another model's cache
        fields["num_kv_shared_layers"] = LAYERS
    if "d_head" in vars(config):
        fields["d_head"] = HIDDEN // HEADS
    rope_parameters = getattr(config, "rope_parameters", None) or {}
    if "vocab_size" in vars(config) and "rope_type" in rope_parameters and "mrope_section" in _modeling_source(config):
        head = fields.get("head_dim") or getattr(config, "head_dim", None) or HIDDEN // HEADS
        rope = rope_parameters  # sections cover half the rotary dims
        half = int(head * rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0))) // 2
        fields["rope_parameters"] = {**rope, "mrope_section": [half - 2 * (half // 4), half // 4, half // 4]}
    fields.update(OVERRIDES.get(config.model_type or type(config).__name__, {}))  # sub-configs without a type
    values = {**config.to_dict(), **fields}
    values.pop("model_type", None)
    values.pop("transformers_version", None)
    return type(config)(**values)


def _field(config: PretrainedConfig, key: str, default):
    """config.key, or its stored value where the config refuses a global read of a per-layer field."""
    try:
        return getattr(config, key, default)
    except RuntimeError:  # transformers' AmbiguousGlobalPerLayerAttributeError
        return vars(config).get(key, default)


def _modeling_source(config: PretrainedConfig) -> str:
    """The source of the modeling module beside `config`'s configuration module ("" if there is none)."""
    module = sys.modules[type(config).__module__]
    path = Path(module.__file__).with_name(Path(module.__file__).name.replace("configuration_", "modeling_"))
    return path.read_text() if path.exists() and path.name.startswith("modeling_") else ""


def build(model_type: str, class_name: str, seed: int = 0) -> torch.nn.Module:
    """A tiny random model of `model_type` (its class `class_name`) in eval mode; NotBuildable with the reason."""
    cls = getattr(transformers, class_name, None)
    if cls is None:
        raise NotBuildable(f"transformers exports no {class_name}")
    try:
        default = CONFIG_MAPPING[model_type]()
    except Exception as error:  # noqa: BLE001 - transformers' own default config of the type fails its checks
        cause = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise NotBuildable(f"transformers bug: its default config fails its own validation: {cause}"[:300]) from error
    try:
        config = tiny_config(default)
        if not isinstance(config, cls.config_class):  # a text-only class listed under a composite type
            config = next((sub for sub in map(config.__dict__.get, config.sub_configs)
                           if isinstance(sub, cls.config_class)), config)
        torch.manual_seed(seed)
        model = cls(config).eval()
        if getattr(config, "languages", None) and hasattr(model, "set_default_language"):  # X-MOD's adapters
            model.set_default_language(config.languages[0])
        if model_type in GENERATION:  # (classes without generate have no generation_config)
            model.generation_config.update(**GENERATION[model_type])
    except ImportError as error:
        cause = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise NotBuildable(f"needs an extra package: {cause}"[:300]) from error
    except Exception as error:  # noqa: BLE001 - any failure to build is recorded with its reason
        cause = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise NotBuildable(f"cannot be built at tiny size: {type(error).__name__}: {cause}"[:300]) from error
    return model


def prompt_vocab(model) -> int:
    """Ids below this bound are plain text tokens of the model (its text vocabulary, at most 100)."""
    from lade.vocabulary import input_vocab

    return max(4, min(100, input_vocab(model)))
