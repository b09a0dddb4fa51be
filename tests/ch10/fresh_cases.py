"""The fresh collection's cases for chapter 10's four self-checks, with the reviewer's verdicts.

``WRONG``: (answer, check, source, true cause, verdicts). ``verdicts`` maps the ``CheckFailure.bug``
ids seen for that answer (None: only a generic difference or a relayed crash) to the reviewer's
judgement of the message, ``"yes"`` when it names the true cause in the chapter's words, else
``"no: why"``. An id not listed is "unreviewed" (the checks changed): read the message and add it.
The judgements were made by reading each message, never the checks' code or catalogue; those marked
FIXED were added after the checks were fixed (branch ch10fix, 2026-11-28), by reading the new
message against the source's cause, and the one "yes" of each answer is the id its test expects.

``PROBES``: grader-style inputs (another device, defaults never passed, long inputs, dtypes), each
with the id a check must reject it with and what the reviewer saw on 2026-11-28 (the last five were
added with the fixes)."""

from tests.ch10 import buggy_fresh as b
from tests.ch10 import buggy_fresh_tables as t
from tests.ch10 import probes_fresh as p

BLOCK, DECODER = "check_transformer_block", "check_decoder_block"
TABLE, MASK = "check_sinusoidal_positions", "check_packed_causal_mask"
YES = "yes"
GENERIC = "no: only the largest difference is shown"
FIXED = "yes (ch10fix)"

WRONG = [
    # exercise 1: the block
    (
        b.HowuhhNormedResidual,
        BLOCK,
        "Howuhh/faster-trajectory-transformer#3",
        "pre-norm attention residual taken from norm(x)",
        {
            None: GENERIC
            + "; the catalogue cites this very issue for block_residual_after_norm, which"
            " covers 'every sub-layer, or only before the FFN' but not the attention alone",
            "block_residual_after_norm": FIXED + ": the diagnosis now covers the attention alone",
        },
    ),
    (
        b.TorchNormFirst60593,
        BLOCK,
        "pytorch/pytorch#61165",
        "pre-norm residuals taken from norm(x), both sub-layers",
        {"block_residual_after_norm": YES},
    ),
    (
        b.CompactFFNNormedResidual,
        BLOCK,
        "SHI-Labs/Compact-Transformers#25",
        "pre-norm FFN residual taken from norm(x)",
        {"block_residual_after_norm": YES},
    ),
    (
        b.HkprojAlwaysPreNorm,
        BLOCK,
        "hkproj/pytorch-transformer#14",
        "post-norm (norm_first=False) computed as pre-norm",
        {"block_norm_placement": YES},
    ),
    (
        b.MlxPostNormFFNResidualFromInput,
        BLOCK,
        "ml-explore/mlx#1327",
        "post-norm FFN residual adds the block input",
        {"block_ffn_residual_from_input": YES},
    ),
    (
        b.BitNetDoubledAttention,
        BLOCK,
        "kyegomez/BitNet#32",
        "attention residual lost: x = a + a",
        {"block_residual_overwritten": YES},
    ),
    (
        b.MultimodalOverwrittenInput,
        BLOCK,
        "facebookresearch/multimodal#305",
        "both residuals lost: sub-layer output added to itself",
        {"block_residual_overwritten": YES},
    ),
    (
        b.CellFlowDiscardedFFN,
        BLOCK,
        "theislab/CellFlow#296",
        "FFN output discarded: x + dropout(x)",
        {None: GENERIC, "block_ffn_output_unused": FIXED},
    ),
    (
        b.HyunwoongDropoutAfterNorm,
        BLOCK,
        "hyunwoongko/transformer#8",
        "post-norm dropout after add & norm (training only)",
        {"block_dropout_after_residual": YES},
    ),
    (
        b.BertPytorchExtraDropout,
        BLOCK,
        "codertimo/BERT-pytorch#85",
        "extra dropout on the block's output (training only)",
        {"block_output_dropped": YES},
    ),
    (
        b.KeitakuritaNormedSublayer,
        BLOCK,
        "keitakurita/Practical_NLP_in_PyTorch@42af144",
        "x + norm(f(x)): norm on the sub-layer's output",
        {"block_norm_on_branch": YES},
    ),
    (
        b.DiffusionPlannerRawKeys,
        BLOCK,
        "tier4/Diffusion-Planner#239",
        "pre-norm: keys and values from the raw x",
        {"block_keys_not_normalised": YES},
    ),
    (
        b.MlxDropoutInsideFFN,
        BLOCK,
        "ml-explore/mlx@4417e37ed",
        "FFN dropout inside the FFN, none on its output (training only)",
        {"block_dropout_elsewhere": YES},
    ),
    # exercise 3: the decoder block
    (
        b.MlxUnusedNorm2,
        DECODER,
        "ml-explore/mlx#210",
        "pre-norm cross-attention on the raw x (norm2 unused)",
        {"decoder_cross_not_normalised": YES},
    ),
    (
        b.MlxPostNormLn1Twice,
        DECODER,
        "ml-explore/mlx#1636 and #3382",
        "post-norm: norm1 reused after cross-attention; cross queries from the raw self-attention",
        {None: GENERIC, "decoder_norm1_reused_raw_queries": FIXED + ": both causes named"},
    ),
    (
        b.MlxCrossQueryFromSublayer,
        DECODER,
        "ml-explore/mlx#3382",
        "post-norm cross-attention queries from the self-attention's output",
        {"decoder_cross_queries_from_sublayer": YES},
    ),
    (
        b.KeitakuritaNoMemory,
        DECODER,
        "keitakurita/Practical_NLP_in_PyTorch#1",
        "cross-attention ignores the memory (keys and values from the decoder)",
        {
            None: GENERIC,
            "decoder_memory_unused": FIXED + " (found by behaviour: memory changed, output not)",
        },
    ),
    (
        b.MaxjcohenSelfAttentionTwice,
        DECODER,
        "maxjcohen/transformer#23",
        "cross-attention computed with self_attn's weights (cross_attn unused)",
        {None: GENERIC, "decoder_cross_uses_self_attn": FIXED},
    ),
    (
        b.SlpResidualFromMemory,
        DECODER,
        "georgepar/slp#26",
        "cross-attention residual adds the memory",
        {"decoder_cross_residual_from_memory": YES},
    ),
    (
        b.Gpt2DiscardedMemoryMask,
        DECODER,
        "huggingface/transformers#47946",
        "memory padding mask dropped",
        {"decoder_padding_ignored": YES},
    ),
    (
        b.RexrexSwappedCross,
        DECODER,
        "rexrex9/nlp_torchtext#2",
        "cross-attention queries from memory, keys and values from x",
        {"decoder_cross_swapped": YES},
    ),
    (
        b.HyunwoongDecoderDropoutAfterNorm,
        DECODER,
        "hyunwoongko/transformer@c19810c",
        "post-norm dropout after add & norm (training only)",
        {"block_dropout_after_residual": YES},
    ),
    # exercise 2: the sinusoidal table
    (
        t.dongjunlee_exponent_per_feature,
        TABLE,
        "DongjunLee/transformer-tensorflow#6",
        "exponent per feature, not per pair",
        {"sinusoid_frequency_per_feature": YES},
    ),
    (
        t.jadore_padding_row,
        TABLE,
        "jadore801120/attention-is-all-you-need-pytorch#32",
        "row 0 kept at zeros (padding); exponent per feature",
        {
            "sinusoid_cos_missing": "no: it blames missing cosines or sin/cos chosen by rows; the zero row"
            " is a deliberate padding row, and the exponent per feature is not mentioned",
            "sinusoid_padding_row": FIXED + ": the padding row, then the frequency per feature",
        },
    ),
    (
        t.maxjcohen_base_1000,
        TABLE,
        "maxjcohen/transformer#62",
        "base 1000; cosine exponents shifted by one feature",
        {
            "sinusoid_frequency_per_feature": YES
            + " (the shifted cosines; base 1000 not mentioned; FIXED: the sines' own frequencies"
            " are now shown beside the paper's)"
        },
    ),
    (
        t.samlynn_double_exponent,
        TABLE,
        "SamLynnEvans/Transformer#25",
        "exponent doubled; cosine one step further",
        {
            "sinusoid_frequency_per_feature": YES
            + " (the cosine's own frequency; doubling unmentioned; FIXED: the sines' own"
            " frequencies are now shown beside the paper's)"
        },
    ),
    (
        t.brianpulfer_rows,
        TABLE,
        "BrianPulfer/PapersReimplementations#9",
        "sin/cos chosen by position, not by feature",
        {"sinusoid_cos_missing": YES},
    ),
    (
        t.brianpulfer_fixed_still_doubled,
        TABLE,
        "BrianPulfer/PapersReimplementations@5114bab",
        "exponent doubled (4i/d)",
        {"sinusoid_wrong_frequencies": YES},
    ),
    (
        t.loftr_precedence,
        TABLE,
        "zju3dv/LoFTR#41",
        "frequencies exp(-2i) by operator precedence; positions start at 1",
        {None: GENERIC, "sinusoid_wrong_frequencies": FIXED + ": cites LoFTR#41, then positions"},
    ),
    (
        t.warner_context_size,
        TABLE,
        "warner-benjamin/commented-transformers#1",
        "exponent divided by n instead of d",
        {"sinusoid_wrong_frequencies": YES},
    ),
    (
        t.annotated_divides,
        TABLE,
        "harvardnlp/annotated-transformer#131",
        "frequencies inverted (position / div_term)",
        {"sinusoid_wrong_frequencies": YES},
    ),
    (
        t.tatp22_concatenated,
        TABLE,
        "tatp22/multidim-positional-encoding#20",
        "sines and cosines in halves, not interleaved",
        {"sinusoid_halves": YES},
    ),
    # exercise 4: the packed mask
    (
        t.wrinklefree_positions_only,
        MASK,
        "DeepOpt-com/WrinkleFree-Monorepo#53",
        "plain causal mask",
        {"packed_leaks_across_documents": YES},
    ),
    (
        t.xformers_to_drops_causal,
        MASK,
        "facebookresearch/xformers#1185",
        "block-diagonal but not causal",
        {"packed_not_causal": YES},
    ),
    (
        t.rasbt_true_means_hidden,
        MASK,
        "rasbt/LLMs-from-scratch#1062",
        "True = hidden",
        {"packed_inverted": YES},
    ),
    (
        t.llama4_float_to_bool,
        MASK,
        "huggingface/transformers#38094",
        "additive mask cast to bool: True = hidden",
        {"packed_inverted": YES},
    ),
    (
        t.attention_gym_first_row,
        MASK,
        "meta-pytorch/attention-gym#98",
        "row 0's documents for every row",
        {"packed_first_row_only": YES},
    ),
    (
        t.axolotl_batch_of_one,
        MASK,
        "axolotl-ai-cloud/axolotl#1375",
        "packing ignored for more than one row",
        {
            "packed_leaks_across_documents": YES
            + " (plain causal on the two-row input it shows; it"
            " does not say that one row works)"
        },
    ),
    (
        t.tinytorch_additive,
        MASK,
        "harvard-edge/cs249r_book#1785",
        "float 0/-inf mask instead of bool",
        {
            "packed_not_bool": YES
            + " (but its reason, 'a mask of 0s and 1s would hide nothing', is"
            " wrong for a 0/-inf mask, which SDPA would apply correctly; FIXED: an additive mask"
            " now gets its own reason)"
        },
    ),
    (
        t.pbloem_offset_zero,
        MASK,
        "pbloem/former#10",
        "diagonal hidden",
        {"packed_self_hidden": YES},
    ),
    (
        t.sdpa_docstring_cpu_mask,
        MASK,
        "pytorch/pytorch#166117",
        "triangle made on the CPU",
        {"cpu_tensor_in_forward": YES},
    ),
]

PROBES = [
    # (answer, check, what it does, the id a check must name, seen on 2026-11-28)
    (
        p.mask_built_on_cpu,
        MASK,
        "mask built from lengths on the CPU, never on doc_ids's device",
        "result_on_cpu",
        "accepted, with 'made on the input's device' in its success line",
    ),
    (
        p.mask_via_cpu_copy,
        MASK,
        "doc_ids.cpu() then a CPU mask returned",
        "result_on_cpu",
        "accepted",
    ),
    (
        p.DecoderKeyPaddingIdiom,
        DECODER,
        "~memory_real in forward: TypeError when it is None",
        "decoder_memory_real_default",
        "accepted: memory_real=None (the signature's default) is never passed",
    ),
    (
        p.DecoderDefaultMaskOnCpu,
        DECODER,
        "default all-real mask made without device when None",
        "cpu_tensor_in_forward",
        "accepted: memory_real=None is never passed",
    ),
    (
        p.table_sliced_from_512_rows,
        TABLE,
        "table built for max_len=512 rows and sliced",
        "sinusoid_table_too_short",
        "accepted: the largest table tried has 50 rows",
    ),
    (
        p.table_float64,
        TABLE,
        "float64 table where float32 is asked",
        "sinusoid_not_float",
        "accepted",
    ),
    (
        p.BlockInPlaceResidual,
        BLOCK,
        "x += ... changes the caller's x",
        "input_modified",
        "rejected: input_modified",
    ),
    (
        p.mask_shifts_ids_in_place,
        MASK,
        "doc_ids -= min changes the caller's ids",
        "input_modified",
        "rejected: input_modified",
    ),
    (
        p.DecoderCachesMemory,
        DECODER,
        "memory cached on self at the first call",
        "state_between_calls",
        "rejected: state_between_calls",
    ),
    (
        p.BlockSdpaMaskOnCpu,
        BLOCK,
        "SDPA with a causal mask made without device",
        "cpu_tensor_in_forward",
        "rejected: cpu_tensor_in_forward",
    ),
    (
        p.BlockBiasBeforeDropout,
        BLOCK,
        "an extra __init__ parameter before dropout",
        "block_dropout_argument_lost",
        "rejected as block_dropout_missing (the reviewer: misleading)",
    ),
    (
        p.table_seeds_the_global_rng,
        TABLE,
        "torch.manual_seed(0) inside the function",
        "random_state_changed",
        "not tried (added with the fixes)",
    ),
    (
        p.LayerNormOnePass,
        "check_layer_norm",
        "one-pass variance, wrong for a large mean",
        "ln_variance_cancels",
        "not tried (added with the fixes)",
    ),
    (
        p.gelu_tanh_from_exp,
        "check_gelu",
        "tanh written with exp: NaN past |z| = 88",
        "layer_overflows",
        "not tried (added with the fixes)",
    ),
    (
        p.SwiGLUSiluFromExp,
        "check_swiglu",
        "SiLU as g / (1 + exp(-g)): NaN gradients for large negative gates",
        "layer_overflows",
        "not tried (added with the fixes)",
    ),
]
