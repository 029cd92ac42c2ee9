"""The fixture checkpoints tools/make_fixtures.py builds (docs/fixtures.md): for each, the
transformers classes, the config (keyword arguments of the config class, i.e. what
config.json holds), the weight seed, and options:

  published      rewrite config.json in DeepSeek's published style (rope_theta + rope_scaling,
                 no transformers-derived fields) instead of transformers' own
  prompt_lengths prompt lengths (default make_fixtures.PROMPT_LENGTHS)
  routing_dump   record HF's expert choice per position (expected.json "routing")
  indexer_dump   record the V3.2 indexer's top-k rows (expected.json "indexer_topk")
  screen_decode  re-draw weights until HF's cached decode equals its own full forward
  fp8_only       build the fp8 twin (model-fp8/, model-fp8-dequant/) instead
  mtp_layers     append that many multi-token-prediction layers to the checkpoint
"""

YARN_V2 = {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64,
           "mscale": 0.707, "mscale_all_dim": 0.707, "beta_fast": 32, "beta_slow": 1}

# Each fixture: transformers classes, its config (as keyword arguments for the config
# class, i.e. what config.json holds), and whether config.json is rewritten in the
# published style (rope_theta + rope_scaling) instead of transformers' own style.
FIXTURES = {
    # DeepSeek-V2(-Lite) style: no q LoRA, softmax router, greedy top-k, YaRN with
    # mscale == mscale_all_dim (attention factor 1, softmax scale * mscale^2).
    "deepseek_v2": dict(
        model_cls="DeepseekV2ForCausalLM", config_cls="DeepseekV2Config", published=True,
        seed=1000,
        config=dict(
            vocab_size=512, hidden_size=128, intermediate_size=192, moe_intermediate_size=48,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=64, q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=32,
            v_head_dim=24, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=2,
            first_k_dense_replace=1, moe_layer_freq=1, topk_method="greedy",
            scoring_func="softmax", n_group=1, topk_group=1, norm_topk_prob=False,
            routed_scaling_factor=1.0, max_position_embeddings=512, rope_theta=10000.0,
            rope_scaling=YARN_V2, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1,
            tie_word_embeddings=False, attention_bias=False, hidden_act="silu")),
    # DeepSeek-V2 (full) style routing: group_limited_greedy, q LoRA, plain RoPE.
    "deepseek_v2_glg": dict(
        model_cls="DeepseekV2ForCausalLM", config_cls="DeepseekV2Config", published=False,
        seed=2000,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
            kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=16, qk_nope_head_dim=32,
            v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=3,
            first_k_dense_replace=1, topk_method="group_limited_greedy", n_group=4,
            topk_group=2, norm_topk_prob=False, routed_scaling_factor=2.0,
            max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # DeepSeek-V3 style: q LoRA, noaux_tc sigmoid routing with groups and a non-zero
    # e_score_correction_bias, YaRN with mscale != mscale_all_dim (so both the cos/sin
    # attention factor and the softmax scale change), interleaved RoPE.
    "deepseek_v3": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=3000,
        config=dict(
            vocab_size=512, hidden_size=128, intermediate_size=160, moe_intermediate_size=48,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=64, q_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
            v_head_dim=24, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
            n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, topk_method="noaux_tc", scoring_func="sigmoid",
            max_position_embeddings=512, rope_interleave=True, num_nextn_predict_layers=0,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                             "original_max_position_embeddings": 64, "mscale": 1.0,
                             "mscale_all_dim": 0.8, "beta_fast": 32, "beta_slow": 1},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # Head dims no CUDA kernel takes as they are (issue 14): v_head_dim 20, qk_nope 22,
    # rope 6, kv_lora_rank 36, 6 heads, no q LoRA. (HF's V2 RoPE views q_pe as complex
    # pairs, so it refuses an odd qk_nope_head_dim.) The engine pads each to a multiple of 8
    # (model/mla_dims.h); HF runs them as they are.
    "deepseek_v2_odd": dict(
        model_cls="DeepseekV2ForCausalLM", config_cls="DeepseekV2Config", published=False,
        seed=6000,
        config=dict(
            vocab_size=512, hidden_size=96, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=6,
            kv_lora_rank=36, q_lora_rank=None, qk_rope_head_dim=6, qk_nope_head_dim=22,
            v_head_dim=20, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1,
            norm_topk_prob=False, routed_scaling_factor=1.0, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # The CUDA-only divergence of issue 14: group-limited noaux_tc routing with top-3 of 8
    # experts (4 groups of 2, 2 groups kept, so 3 of the 4 kept experts), a random
    # e_score_correction_bias, YaRN factor 4 over 64 positions (the long prompts run past
    # the original context), q_lora_rank 40, interleaved RoPE, 3 layers; a 260-token prompt
    # as in the issue.
    "deepseek_v3_top3": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=7000, prompt_lengths=(1, 7, 64, 200, 260), routing_dump=True,
        config=dict(
            vocab_size=512, hidden_size=128, intermediate_size=160, moe_intermediate_size=48,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=64, q_lora_rank=40, qk_rope_head_dim=16, qk_nope_head_dim=32,
            v_head_dim=24, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=3,
            n_group=4, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, topk_method="noaux_tc", scoring_func="sigmoid",
            max_position_embeddings=512, rope_interleave=True, num_nextn_predict_layers=0,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 64, "mscale": 1.0,
                             "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # fp8 twin (own folder to keep each fixture small): a 2-layer V3 whose linear
    # weights are stored as e4m3 with 128x128 block scales in model-fp8/, and exactly
    # dequantized (fp32) in model-fp8-dequant/. Dims 160/192/80/96/48 give partial blocks.
    "deepseek_v3_fp8": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=5000, fp8_only=True,
        config=dict(
            vocab_size=512, hidden_size=128, intermediate_size=160, moe_intermediate_size=48,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=64, q_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
            v_head_dim=24, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, topk_method="noaux_tc", scoring_func="sigmoid",
            max_position_embeddings=512, rope_interleave=True, num_nextn_predict_layers=0,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
                             "original_max_position_embeddings": 64, "mscale": 1.0,
                             "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # DeepSeek-V3.2 style: V3 plus the DSA lightning indexer with index_topk (32)
    # below the longer prompts, so attention really is sparse there.
    "deepseek_v32": dict(
        model_cls="DeepseekV32ForCausalLM", config_cls="DeepseekV32Config", published=True,
        seed=4000, indexer_dump=True,
        config=dict(
            vocab_size=512, hidden_size=128, intermediate_size=160, moe_intermediate_size=48,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=64, q_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32,
            v_head_dim=24, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
            n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, topk_method="noaux_tc", scoring_func="sigmoid",
            index_topk=32, index_n_heads=8, index_head_dim=32, max_position_embeddings=512,
            num_nextn_predict_layers=0, rope_theta=10000.0,
            rope_scaling={"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64,
                          "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32,
                          "beta_slow": 1},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # The knobs the fixtures above keep fixed (docs/fixtures.md, "Knob fixtures"), V2 style:
    # two dense layers before one MoE layer (first_k_dense_replace 2), attention_bias with a
    # q LoRA (q_a_proj, kv_a_proj_with_mqa and o_proj biases), mlp_bias (dense MLP and shared
    # expert biases), llama3 RoPE, rms_norm_eps 1e-3, two EOS ids; published-style config.
    "deepseek_v2_knobs": dict(
        model_cls="DeepseekV2ForCausalLM", config_cls="DeepseekV2Config", published=True,
        seed=8000,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, qk_nope_head_dim=16,
            v_head_dim=16, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            first_k_dense_replace=2, moe_layer_freq=1, topk_method="greedy",
            scoring_func="softmax", n_group=1, topk_group=1, norm_topk_prob=False,
            routed_scaling_factor=1.5, max_position_embeddings=512, rope_theta=10000.0,
            rope_scaling={"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
            rms_norm_eps=1e-3, bos_token_id=0, eos_token_id=[1, 2],
            tie_word_embeddings=False, attention_bias=True, mlp_bias=True, hidden_act="silu")),
    # V3 style, published config: every layer MoE (first_k_dense_replace 0), no shared expert,
    # one expert group, norm_topk_prob false, no q LoRA with attention_bias (kv_a_proj and
    # o_proj biases), tied embeddings, rope_scaling null with rope_theta 50000, half-split RoPE
    # (rope_interleave false), rms_norm_eps 1e-2, hidden 80 over 6 heads (not a multiple), and
    # one MTP layer's weights in the checkpoint (num_nextn_predict_layers 1) that HF ignores.
    "deepseek_v3_knobs": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=True,
        seed=9000, mtp_layers=1,
        config=dict(
            vocab_size=512, hidden_size=80, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=6,
            kv_lora_rank=48, q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=16,
            v_head_dim=32, n_routed_experts=6, n_shared_experts=0, num_experts_per_tok=2,
            n_group=1, topk_group=1, first_k_dense_replace=0, norm_topk_prob=False,
            routed_scaling_factor=1.0, topk_method="noaux_tc", scoring_func="sigmoid",
            moe_layer_freq=1, max_position_embeddings=512, rope_theta=50000.0,
            rope_scaling=None, rope_interleave=False, num_nextn_predict_layers=1,
            rms_norm_eps=1e-2, bos_token_id=0, eos_token_id=1, tie_word_embeddings=True,
            attention_bias=True, hidden_act="silu")),
    # V3.2: mlp_layer_types sparse/dense/sparse (HF follows it over first_k_dense_replace),
    # all 4 expert groups kept (topk_group = n_group), 2 shared experts, norm_topk_prob false,
    # attention_bias, YaRN without mscale fields (cos/sin factor 0.1 ln 4 + 1, softmax
    # unscaled), index_head_dim 24 (rope 8 + 16 unrotated), index_topk 48.
    "deepseek_v32_knobs": dict(
        model_cls="DeepseekV32ForCausalLM", config_cls="DeepseekV32Config", published=False,
        seed=10000, indexer_dump=True, screen_decode=True,
        config=dict(
            vocab_size=512, hidden_size=96, intermediate_size=160, moe_intermediate_size=32,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=24,
            v_head_dim=16, n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3,
            n_group=4, topk_group=4, mlp_layer_types=["sparse", "dense", "sparse"],
            norm_topk_prob=False, routed_scaling_factor=1.0, index_topk=48, index_n_heads=8,
            index_head_dim=24, max_position_embeddings=512,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 128},
            rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
            attention_bias=True)),
    # V3 with no MoE layer at all (first_k_dense_replace = num_hidden_layers), linear RoPE
    # (factor 2) with mscale_all_dim (HF's yarn_apply_mscale scales the softmax for every
    # non-default type), bos null, two EOS ids.
    "deepseek_v3_dense": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=11000,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32,
            v_head_dim=32, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            n_group=1, topk_group=1, first_k_dense_replace=2, max_position_embeddings=512,
            rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0,
                             "mscale_all_dim": 1.0},
            rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=[1, 2],
            tie_word_embeddings=False)),
    # V3 with the YaRN knobs no fixture above moves, on half-split RoPE (rope_interleave
    # false): truncate false (the correction range [0.81, 2.62] of rope dim 16 over 256
    # original positions stays fractional), beta_fast 16 / beta_slow 2, an
    # explicit attention_factor 1.25 (cos/sin factor) with mscale_all_dim 0.9 (softmax scale);
    # every expert chosen (num_experts_per_tok = n_routed_experts = 4, both groups kept) with
    # norm_topk_prob and routed_scaling_factor 1.7; vocab 500 and hidden 72 (multiples of
    # neither 64 nor 128), 3 heads, 2 shared experts, bos 2 / eos 3.
    "deepseek_v3_yarn_knobs": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=12000,
        config=dict(
            vocab_size=500, hidden_size=72, intermediate_size=112, moe_intermediate_size=24,
            num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3,
            kv_lora_rank=40, q_lora_rank=24, qk_rope_head_dim=16, qk_nope_head_dim=16,
            v_head_dim=24, n_routed_experts=4, n_shared_experts=2, num_experts_per_tok=4,
            n_group=2, topk_group=2, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=1.7, max_position_embeddings=1024, rope_interleave=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 256, "truncate": False,
                             "beta_fast": 16, "beta_slow": 2, "attention_factor": 1.25,
                             "mscale_all_dim": 0.9},
            rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=3, tie_word_embeddings=False)),
    # hidden_act other than silu: HF applies ACT2FN[hidden_act](gate) * up in the dense MLP,
    # the shared experts and every routed expert. V2 with the tanh-approximated GELU
    # (gelu_pytorch_tanh: torch's gelu(approximate="tanh")), plain RoPE, greedy softmax routing.
    "deepseek_v2_gelu_tanh": dict(
        model_cls="DeepseekV2ForCausalLM", config_cls="DeepseekV2Config", published=False,
        seed=13000,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=16,
            v_head_dim=16, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1,
            norm_topk_prob=False, routed_scaling_factor=1.0, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
            hidden_act="gelu_pytorch_tanh")),
    # V3 with the exact (erf) GELU: q LoRA, noaux_tc over 2 groups of 2 experts with
    # topk_group 1, norm_topk_prob, routed_scaling_factor 2.5, 2 shared experts.
    "deepseek_v3_gelu": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=14000,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16,
            v_head_dim=16, n_routed_experts=4, n_shared_experts=2, num_experts_per_tok=2,
            n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, max_position_embeddings=512, rope_interleave=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
            hidden_act="gelu")),
    # hidden_size and intermediate sizes that are not multiples of 8 (the CUDA kernels' 16-byte
    # rows): the engine stores them rounded up with zeros in the padding (model/model_widths.h)
    # and divides its RMSNorms by the real hidden size; HF runs them as they are. V3: hidden 28
    # over 7 heads, dense intermediate 20, experts' 12 (one shared expert: 12), q_lora_rank 12
    # (not padded), vocab 257 (the serving tests' prompts use ids up to 251), noaux_tc over 2
    # groups.
    "deepseek_v3_pad": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=15000,
        config=dict(
            vocab_size=257, hidden_size=28, intermediate_size=20, moe_intermediate_size=12,
            num_hidden_layers=2, num_attention_heads=7, num_key_value_heads=7,
            kv_lora_rank=16, q_lora_rank=12, qk_rope_head_dim=8, qk_nope_head_dim=8,
            v_head_dim=8, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=2.5, max_position_embeddings=512, rope_interleave=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # V2 with hidden 36 over 4 heads, dense intermediate 44, experts' 12 (3 shared experts: 36;
    # each of them divides by 4 ranks), attention_bias (o_proj's bias rows padded) and mlp_bias
    # (gate/up/down biases padded), tied embeddings (the LM head reads the padded embedding),
    # greedy softmax routing.
    "deepseek_v2_pad": dict(
        model_cls="DeepseekV2ForCausalLM", config_cls="DeepseekV2Config", published=False,
        seed=16000,
        config=dict(
            vocab_size=256, hidden_size=36, intermediate_size=44, moe_intermediate_size=12,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16,
            v_head_dim=16, n_routed_experts=4, n_shared_experts=3, num_experts_per_tok=2,
            first_k_dense_replace=1, topk_method="greedy", n_group=1, topk_group=1,
            norm_topk_prob=False, routed_scaling_factor=1.0, max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=True,
            attention_bias=True, mlp_bias=True)),
    # V3.2 with hidden 44 (the indexer's wk and weights_proj read it), dense intermediate 36,
    # experts' 20, q_lora_rank 20, 8 indexer heads, index_topk 32 (sparse past 32 tokens),
    # vocab 300.
    "deepseek_v32_pad": dict(
        model_cls="DeepseekV32ForCausalLM", config_cls="DeepseekV32Config", published=False,
        seed=17000, screen_decode=True,
        config=dict(
            vocab_size=300, hidden_size=44, intermediate_size=36, moe_intermediate_size=20,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=16, q_lora_rank=20, qk_rope_head_dim=8, qk_nope_head_dim=8,
            v_head_dim=8, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
            n_group=1, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
            routed_scaling_factor=1.0, index_topk=32, index_n_heads=8, index_head_dim=16,
            max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # Values HF reads in its own way, on V3 (config.json as transformers saves it): nulls that
    # HF tests for truth, so they act as false where an absent field is true: rope_interleave
    # null (half-split RoPE) and YaRN truncate null (correction range of rope dim 16 over 256
    # original positions kept fractional), norm_topk_prob null (weights not normalised); and
    # fields HF's V3 ignores: topk_method greedy and scoring_func softmax (it always runs
    # noaux_tc over sigmoid scores: 2 groups of 3, 1 kept, top-2), moe_layer_freq 2 (every layer
    # from first_k_dense_replace is MoE), mlp_bias true (its MLPs have no bias). YaRN mscale 0.707
    # with mscale_all_dim 1 (cos/sin factor below 1, softmax scaled).
    "deepseek_v3_nulls": dict(
        model_cls="DeepseekV3ForCausalLM", config_cls="DeepseekV3Config", published=False,
        seed=18000,
        config=dict(
            vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=32, q_lora_rank=24, qk_rope_head_dim=16, qk_nope_head_dim=16,
            v_head_dim=16, n_routed_experts=6, n_shared_experts=1, num_experts_per_tok=2,
            n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=None,
            routed_scaling_factor=2.0, topk_method="greedy", scoring_func="softmax",
            moe_layer_freq=2, mlp_bias=True, max_position_embeddings=1024,
            rope_interleave=None,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                             "original_max_position_embeddings": 256, "truncate": None,
                             "mscale": 0.707, "mscale_all_dim": 1.0},
            rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)),
    # Dynamic NTK RoPE on V2, published style (rope_scaling {"type": "dynamic"}): HF's table
    # only grows past max_position_embeddings (512, beyond every prompt), so the frequencies are
    # the default ones, but mscale_all_dim 1 still scales the softmax by mscale(4, 1)^2
    # (yarn_apply_mscale). With the fields HF's V2 ignores: norm_topk_prob true (its router never
    # normalises), scoring_func sigmoid (always softmax), n_group 4 / topk_group 1 with greedy
    # routing (groups unused), rope_interleave false (V2 always interleaves), moe_layer_freq 2.
    "deepseek_v2_dynamic": dict(
        model_cls="DeepseekV2ForCausalLM", config_cls="DeepseekV2Config", published=True,
        seed=19000,
        config=dict(
            vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
            kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=16,
            v_head_dim=16, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
            first_k_dense_replace=1, moe_layer_freq=2, topk_method="greedy",
            scoring_func="sigmoid", n_group=4, topk_group=1, norm_topk_prob=True,
            routed_scaling_factor=1.0, max_position_embeddings=512, rope_theta=10000.0,
            rope_scaling={"type": "dynamic", "factor": 4.0, "mscale_all_dim": 1.0},
            rope_interleave=False, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1,
            tie_word_embeddings=False, hidden_act="silu")),
}
