"""Per-family fields for lab.studies.tiny_architectures, where the generic shrinking cannot satisfy a config's own rules
(ratios its validators check, derived head sizes, sub-configs that must agree). Keyed by the model type of the config
(or sub-config) they apply to, or by its class name where a sub-config has no model type; sizes follow
lab.studies.tiny_architectures' HIDDEN = 32, HEADS = 4, LAYERS = 2."""

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
    "step3p7": dict(sliding_window=4096), "musicgen_decoder": dict(num_codebooks=1, decoder_start_token_id=98),
    "musicgen_melody_decoder": dict(num_codebooks=1, decoder_start_token_id=98),
    "lfm2_moe": dict(layer_types=["conv", "full_attention"]),
    "zaya": dict(num_experts_per_tok=1), "reformer": dict(is_decoder=True, axial_pos_embds=False),
    "dots3_note_text": dict(head_dim=16),
    "diffusion_gemma_text": dict(num_experts=4, top_k_experts=2, moe_intermediate_size=64),
    "molmo2_adapter": dict(vision_feature_layer=[1, 0]), "mistral_large4_text": dict(kv_source_layers=[0, 1]),
    "mistral4": dict(head_dim=16), "longcat_flash": dict(head_dim=8, qk_head_dim=16),
    # each below checked with `--only <type>`: built, and plain generate runs from input_ids
    "DbrxAttentionConfig": dict(rope_theta=10000.0, clip_qkv=8.0),  # its attention reads both, the default has neither
    "dots1": dict(n_routed_experts=4, n_shared_experts=1),
    "chameleon": dict(vocab_size=110, vocabulary_map={"<image>": 107, "IMGIMGAZ": 105, "IMGIMGBZ": 106}),
    "qwen3_omni_moe": dict(enable_audio_output=False),  # the thinker's text only (the talker needs a speaker map)
    "FunAsrNanoAdaptorConfig": dict(intermediate_size=8),  # text hidden_size // 4
    "dots3_note_vision_encoder": dict(adapter_in_dim=32, adapter_out_dim=32),
    "dots3_note_audio_encoder": dict(adapter_input_size=32, adapter_out_dim=32),
    "nemotron3_5_transcribe_word_timestamp": dict(blank_token_id=98),
    "muse_spark_audio": dict(patch_sizes=[16, 6], hidden_sizes=[32, 32], depths=[1, 1]),
    "glm5_next_text": dict(qk_rope_head_dim=0),  # its sparse-attention layers take no RoPE
    "deepseek_ocr2_text": dict(mlp_layer_types=["dense", "sparse"]),
    "granite4_vision": dict(deepstack_layer_map=[[0, 0], [1, 1]], spatial_target_layers=[0, 1, 0, 1],
                            downsample_rate="1/2",  # its Q-Former has vision hidden_size // 64 heads
                            vision_config=dict(model_type="clip_vision_model", hidden_size=64, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=4, image_size=32,
                                               patch_size=8)),
    "ernie4_5_vl_moe_text": dict(rope_parameters=dict(rope_type="default", rope_theta=500000.0,
                                                       mrope_section=[1, 1, 2])),  # height and width sections match
    "hrm_text": dict(H_cycles=1, L_cycles=1, L_bp_cycles=[1], num_layers_per_stack=1),  # layers = H (L + 1) per stack
    "xlstm": dict(hidden_size=128, embedding_dim=128, num_blocks=2),  # state sizes round hidden * factor up to 64
    "qwen4_exp_text": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=8, indexer_budget=8,
                           indexer_compress_ratio=4),
    "gemma3n_text": dict(num_hidden_layers=4, layer_types=["sliding_attention", "full_attention"] * 2,
                         num_kv_shared_layers=2, activation_sparsity_pattern=[0.0] * 4, intermediate_size=[64] * 4),
    "kyutai_speech_to_text": dict(num_codebooks=2, codebook_vocab_size=9, audio_pad_token_id=117),
    "apertus1p5": dict(image_token_offset=100, audio_token_offset=108), "apertus1p5_text": dict(vocab_size=116),
    **dict.fromkeys(("apertus1p5_vision_tokenizer", "wavtokenizer_encoder"), dict(codebook_size=8, codebook_dim=32)),
    "dory": dict(num_hidden_layers=3, n_input_layers=1, n_recurrent_layers=1, n_output_layers=1,
                 layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    "cohere_compass_text": dict(rope_parameters={"full_attention": dict(rope_type="default", rope_theta=10000.0)}),
}

GENERATION: dict[str, dict] = {  # generation_config fields a type's own `generate` reads without a default
    "musicgen": dict(num_return_sequences=1),
}

PIXELS = "needs extra inputs: pixel_values (an image)"
UNRUNNABLE: dict[str, str] = {  # why plain generate cannot run from input_ids alone (checked by hand on each type)
    **dict.fromkeys(("blip", "blip-2", "instructblip", "kosmos-2", "pp_formulanet", "vision-encoder-decoder"), PIXELS),
    "instructblipvideo": "needs extra inputs: pixel_values (video frames)",
    "idefics": "needs extra inputs: pixel_values, image_encoder_embeddings or perceiver_embeddings",
    "pix2struct": "needs extra inputs: flattened_patches (an image)", "udop": "needs extra inputs: bbox (layout boxes)",
    "speecht5": "needs extra inputs: speaker_embeddings",
    "kyutai_speech_to_text": "needs extra inputs: input_values (audio)",
    "gemma4_unified_assistant": "needs extra inputs: its target model's shared key/value states (it drafts for it)",
    "voxtral_realtime": "needs extra inputs: input_features (audio)",
    "qwen2_5_omni": "needs extra inputs: a speaker map (loaded with pretrained weights) for its talker",
    **dict.fromkeys(("pocket_tts", "gradium_phonon_tts"),
                    "needs extra inputs: a processor's prompt ending at `audio_bos_token_id` (audio frames follow)"),
    "vibevoice": "needs an extra package: diffusers (its default noise scheduler)",
    **dict.fromkeys(("fastspeech2_conformer", "vits", "pi0"), "no token generate: the class has no `generate`"),
    **dict.fromkeys(("bark", "fastspeech2_conformer_with_hifigan"),
                    "no token generate: `generate` makes audio from a processor's inputs, not tokens"),
    "blt": "transformers bug: plain generate reads `num_hidden_layers`, which BltConfig lacks",
    **dict.fromkeys(("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "qwen3_omni_moe"),
                    "transformers bug: plain generate reads `vision_start_token_id`, which the thinker config lacks"),
    "step3p7": "transformers bug: sliding-attention layers but no `sliding_window` in its config",
}
