"""Per-family fields for lab.studies.tiny_architectures, where the generic shrinking cannot satisfy a config's own rules
(ratios its validators check, derived head sizes, sub-configs that must agree). Keyed by the model type of the config
(or sub-config) they apply to; sizes follow lab.studies.tiny_architectures' HIDDEN = 32, HEADS = 4, LAYERS = 2."""

from __future__ import annotations

MAMBA = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=16, mamba_chunk_size=16, mamba_n_groups=1)
OVERRIDES: dict[str, dict] = {
    "granitemoehybrid": dict(MAMBA, layer_types=["linear_attention", "full_attention"]),
    "mamba2": dict(num_heads=4, head_dim=16, n_groups=1, state_size=16, chunk_size=16),
    "jamba": dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"]), "bamba": dict(MAMBA, attn_layer_indices=[1]),
    "zamba2": dict(n_mamba_heads=4, mamba_headdim=16, attention_head_dim=16, attention_hidden_size=64,
                   mamba_d_state=16, hybrid_layer_ids=[1]),
    "zamba": dict(n_mamba_heads=2, attention_head_dim=16, attention_hidden_size=64, mamba_dt_rank=4,
                  attn_layer_period=2, attn_layer_offset=1, num_hidden_layers=4,
                  layers_block_type=["mamba", "hybrid"] * 2),
    "step3p7": dict(sliding_window=4096), "musicgen_decoder": dict(num_codebooks=1),
    "musicgen_melody_decoder": dict(num_codebooks=1), "lfm2_moe": dict(layer_types=["conv", "full_attention"]),
    "zaya": dict(num_experts_per_tok=1), "reformer": dict(is_decoder=True, axial_pos_embds=False),
    "dots3_note_text": dict(head_dim=16),
    "diffusion_gemma_text": dict(num_experts=4, top_k_experts=2, moe_intermediate_size=64),
    "molmo2_adapter": dict(vision_feature_layer=[1, 0]), "mistral_large4_text": dict(kv_source_layers=[0, 1]),
    "mistral4": dict(head_dim=16), "longcat_flash": dict(head_dim=8, qk_head_dim=16),
}

PIXELS = "needs extra inputs: pixel_values (an image)"
UNRUNNABLE: dict[str, str] = {  # why plain generate cannot run from input_ids alone (checked by hand on each type)
    **dict.fromkeys(("blip", "blip-2", "instructblip", "kosmos-2", "pp_formulanet", "vision-encoder-decoder"), PIXELS),
    "instructblipvideo": "needs extra inputs: pixel_values (video frames)",
    "idefics": "needs extra inputs: pixel_values, image_encoder_embeddings or perceiver_embeddings",
    "pix2struct": "needs extra inputs: flattened_patches (an image)", "udop": "needs extra inputs: bbox (layout boxes)",
    "speecht5": "needs extra inputs: speaker_embeddings",
    "voxtral_realtime": "needs extra inputs: input_features (audio)",
    "qwen2_5_omni": "needs extra inputs: a speaker map (loaded with pretrained weights) for its talker",
    **dict.fromkeys(("pocket_tts", "gradium_phonon_tts"),
                    "needs extra inputs: a processor's prompt ending at `audio_bos_token_id` (audio frames follow)"),
    "vibevoice": "needs an extra package: diffusers (its default noise scheduler)",
    **dict.fromkeys(("fastspeech2_conformer", "vits", "pi0"), "no token generate: the class has no `generate`"),
    **dict.fromkeys(("bark", "fastspeech2_conformer_with_hifigan"),
                    "no token generate: `generate` makes audio from a processor's inputs, not tokens"),
    "blt": "transformers bug: plain generate reads `num_hidden_layers`, which BltConfig lacks",
    **dict.fromkeys(("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"),
                    "transformers bug: plain generate reads `vision_start_token_id`, which the thinker config lacks"),
    "step3p7": "transformers bug: sliding-attention layers but no `sliding_window` in its config",
}
