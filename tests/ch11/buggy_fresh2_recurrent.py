"""The second fresh set, exercises 4 to 6 (linear attention one token at a time, in chunks, and the
gated delta rule): wrong answers from public repositories and issue threads, adapted minimally to
the exercise's interface, the bug kept as the source has it. Each docstring: the source, the bug in
one sentence, the cause a teacher would name. The verdicts: ``cases_fresh2.py``."""

import torch
import torch.nn.functional as F

import course_utils as cu

feature_map = cu.chapters.feature_map


# ---------------------------------------------------------------- exercise 4: the recurrence


def linrec_state_updated_in_place(q, k, v, state=None):
    """BlinkDL/ChatRWKV, RWKV_in_150_lines.py (RWKV_RNN.time_mixing): the recurrent state handed in
    is written in place (``state[5*i+2] = e1 * aa + e2 * v`` ...), so the caller's state object is
    the new one. Adapted: ``S += ...`` and ``z += ...`` on the tensors of the state passed in. Cause:
    the caller's state is modified in place (a second call from the same state starts elsewhere)."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    if state is None:
        S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    else:
        S, z = state
    outs = []
    for t in range(n):
        S += fk[:, :, t, :, None] * v[:, :, t, None, :]
        z += fk[:, :, t]
        outs.append(
            (fq[:, :, t, None, :] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True)
        )
    return torch.stack(outs, dim=2), (S, z)


_KEPT = {}


def linrec_state_kept_between_calls(q, k, v, state=None):
    """JerryYin777/Cross-Layer-Attention, Cross-Layer_Attention.py (CLAEncoderLayer.forward): the
    keys and values are stored on the module (``self.prev_kv``) on the first call and reused on every
    later call, whatever the input. Adapted to the recurrence: the final state is kept between calls
    and used when no state is handed in. Cause: a state left over from another text leaks into the
    next call (each call must start from the state it is given, or zeros)."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    key = (b, h, dk, v.shape[-1])
    if state is None and key in _KEPT:
        state = _KEPT[key]
    if state is None:
        S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    else:
        S, z = state
    outs = []
    for t in range(n):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
        outs.append(
            (fq[:, :, t, None, :] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True)
        )
    _KEPT[key] = (S, z)
    return torch.stack(outs, dim=2), (S, z)


def linrec_no_normaliser(q, k, v, state=None):
    """flashinfer-ai/flashinfer-bench, PR #156 (docs/op_type_schema and the gated-delta reference) and
    most linear-attention kernels write ``output = q @ state`` with no denominator; the chapter's
    linear attention divides by phi(q) . z. Adapted: S updated and read, z carried but never used.
    Cause: the normaliser phi(q_t) . z_t left out (un-normalised linear attention)."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    if state is None:
        S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    else:
        S, z = state
    outs = []
    for t in range(n):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
        outs.append((fq[:, :, t, None, :] @ S).squeeze(-2))
    return torch.stack(outs, dim=2), (S, z)


def linrec_state_made_on_cpu(q, k, v, state=None):
    """A linear_attention loop in the code index (index id of the search result: "def
    linear_attention(Q, K, V) ... S = torch.zeros([Q.shape[0], Q.shape[2], K.shape[3], V.shape[3]])",
    repository not named by the index): the state is made with torch.zeros and no device or dtype.
    Cause: the zero state is a CPU float32 tensor, which meets a GPU input (and rounds float64)."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    if state is None:
        S, z = torch.zeros(b, h, dk, v.shape[-1]), torch.zeros(b, h, dk)
    else:
        S, z = state
    outs = []
    for t in range(n):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
        outs.append(
            (fq[:, :, t, None, :] @ S).squeeze(-2) / (fq[:, :, t] * z).sum(-1, keepdim=True)
        )
    return torch.stack(outs, dim=2), (S, z)


def linrec_denominator_clamped(q, k, v, state=None):
    """lucidrains/linear-attention-transformer, linear_attention_transformer.py at 24ecf20
    (causal_linear_attn, "tweak eps for causal linear attn"): ``D_inv = 1. / einsum(...).clamp(min =
    eps)`` with eps = 1e-3. Adapted to the recurrence. Cause: the normaliser phi(q) . z clamped at
    1e-3, which changes every output whose true normaliser is smaller (queries with large negative
    entries, phi = elu + 1 near 0); exact otherwise."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    if state is None:
        S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    else:
        S, z = state
    outs = []
    for t in range(n):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
        bottom = (fq[:, :, t] * z).sum(-1, keepdim=True).clamp(min=1e-3)
        outs.append((fq[:, :, t, None, :] @ S).squeeze(-2) / bottom)
    return torch.stack(outs, dim=2), (S, z)


# ---------------------------------------------------------------- exercise 5: chunk by chunk


def linchunk_earlier_chunks_only(q, k, v, chunk):
    """lucidrains/linear-attention-transformer, linear_attention_transformer.py at 24ecf20
    (causal_linear_attn): with bucket_size > 1 the cumulative context is padded by one bucket and cut
    (``F.pad(context, ..., (1, 0))``), so a bucket reads only the state of the buckets before it;
    the library leaves within-bucket mixing to separate local-attention heads. Adapted with the
    chapter's feature map and chunk = bucket_size. Cause: the intra-chunk quadratic part is missing,
    a token sees neither itself nor the earlier tokens of its chunk."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    outs = []
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        if chunk > 1:
            top, bottom = cq @ S, cq @ z[..., None]
        else:
            S, z = S + ck.mT @ cv, z + ck.sum(2)
            top, bottom = cq @ S, cq @ z[..., None]
        outs.append(top / bottom.clamp(min=1e-3))
        if chunk > 1:
            S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(outs, dim=2)


def linchunk_length_must_divide(q, k, v, chunk):
    """lucidrains/linear-attention-transformer, same function: ``assert bucket_size == 0 or (n %
    bucket_size) == 0, f'sequence length {n} must be divisible by the bucket size ...'``; the chunked
    computation is otherwise right here. Cause: a last chunk shorter than the others is refused (the
    exercise asks for it)."""
    assert chunk == 0 or q.shape[2] % chunk == 0, (
        f"sequence length {q.shape[2]} must be divisible by the bucket size {chunk} for causal "
        "linear attention"
    )
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    outs = []
    for lo in range(0, n, chunk):
        cq, ck, cv = fq[:, :, lo : lo + chunk], fk[:, :, lo : lo + chunk], v[:, :, lo : lo + chunk]
        scores = (cq @ ck.mT).tril()
        outs.append((scores @ cv + cq @ S) / (scores.sum(-1, keepdim=True) + cq @ z[..., None]))
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(outs, dim=2)


def linchunk_no_normaliser(q, k, v, chunk):
    """OpenNLPLab/lightning-attention, lightning_attn/ops/torch/linear_attention.py (linear_attn, the
    reference the Lightning Attention kernels are tested against): ``qk = q @ k^T`` times a
    lower-triangular mask, ``o = qk @ v``, no division; its chunked kernels keep the same
    un-normalised form (intra-chunk part plus the carried kv state). Adapted with the chapter's
    feature map. Cause: the normaliser (intra-chunk row sums plus phi(q) . z) left out."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S = q.new_zeros(b, h, dk, v.shape[-1])
    outs = []
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        outs.append((cq @ ck.mT).tril() @ cv + cq @ S)
        S = S + ck.mT @ cv
    return torch.cat(outs, dim=2)


def linchunk_denominator_clamped(q, k, v, chunk):
    """lucidrains/linear-attention-transformer, the same ``.clamp(min = eps)`` (eps = 1e-3), in the
    chunked form it was written for. Cause: the normaliser clamped at 1e-3 (see
    linrec_denominator_clamped); exact when every normaliser is above it."""
    b, h, n, dk = q.shape
    fq, fk = feature_map(q), feature_map(k)
    S, z = q.new_zeros(b, h, dk, v.shape[-1]), q.new_zeros(b, h, dk)
    outs = []
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cq, ck, cv = fq[:, :, lo:hi], fk[:, :, lo:hi], v[:, :, lo:hi]
        scores = (cq @ ck.mT).tril()
        bottom = (scores.sum(-1, keepdim=True) + cq @ z[..., None]).clamp(min=1e-3)
        outs.append((scores @ cv + cq @ S) / bottom)
        S, z = S + ck.mT @ cv, z + ck.sum(2)
    return torch.cat(outs, dim=2)


# ---------------------------------------------------------------- exercise 6: gated delta rule


def delta_state_read_transposed(q, k, v, alpha, beta, state=None):
    """gittensor-ai-lab/sparkinfer, PR #615 "GDN prefill state is handed to two decode kernels
    transposed": the prefill scan writes the state as [v_head][col][row] and two decode kernels index
    it the other way, "so on those paths every linear layer starts decoding from S^T instead of S".
    Adapted: the memory handed in is read as its transpose, the memory returned is right. Cause: a
    state continued from another call is read with keys and values swapped (S^T)."""
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state.transpose(-1, -2)
    outs = []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]
        S = alpha[:, :, t, None, None] * S
        error = vt - (S @ kt[..., None]).squeeze(-1)
        S = S + beta[:, :, t, None, None] * error[..., None] * kt[:, :, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


def delta_query_scaled(q, k, v, alpha, beta, state=None):
    """openvinotoolkit/openvino, PR #34529 (the GatedDeltaNet operation's spec, from Qwen3-Next's
    torch_recurrent_gated_delta_rule): "the query vectors ... Scaled internally by 1 / sqrt(head_size)";
    the exercise's rule reads o_t = S_t q_t. A port of the model's code brings the scale along.
    Cause: an extra 1/sqrt(dk) on the query (the output is scaled down)."""
    b, h, n, dk = k.shape
    q = q / dk**0.5
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]
        S = alpha[:, :, t, None, None] * S
        error = vt - (S @ kt[..., None]).squeeze(-1)
        S = S + beta[:, :, t, None, None] * error[..., None] * kt[:, :, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


def delta_alpha_as_log_gate(q, k, v, alpha, beta, state=None):
    """vllm-project/vllm-ascend, vllm_ascend/models/qwen3_next.py (torch_chunk_gated_delta_rule), as
    in Qwen3-Next's own code: the gate arrives as g = log(alpha) and the state decays by
    ``g.exp()``. Ported to the exercise, whose alpha is the decay itself: ``S * alpha.exp()``. Cause:
    the gate treated as a log-decay (the memory grows by e^alpha instead of decaying by alpha)."""
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]
        S = S * alpha[:, :, t, None, None].exp()
        error = vt - (S @ kt[..., None]).squeeze(-1)
        S = S + beta[:, :, t, None, None] * error[..., None] * kt[:, :, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


def delta_qk_l2norm_in_kernel(q, k, v, alpha, beta, state=None):
    """vllm-project/vllm-ascend, same file: ``if use_qk_l2norm_in_kernel: query = F.normalize(query,
    p=2, dim=-1); key = F.normalize(key, ...)`` (Qwen3-Next normalises both inside the kernel). The
    exercise's keys are already of unit length, its queries are not: normalising the query changes
    the output. Cause: the query normalised to unit length (o_t = S_t q_t / |q_t|)."""
    q, k = F.normalize(q, p=2, dim=-1), F.normalize(k, p=2, dim=-1)
    b, h, n, dk = k.shape
    S = k.new_zeros(b, h, v.shape[-1], dk) if state is None else state
    outs = []
    for t in range(n):
        kt, vt = k[:, :, t], v[:, :, t]
        S = alpha[:, :, t, None, None] * S
        error = vt - (S @ kt[..., None]).squeeze(-1)
        S = S + beta[:, :, t, None, None] * error[..., None] * kt[:, :, None, :]
        outs.append((S @ q[:, :, t, :, None]).squeeze(-1))
    return torch.stack(outs, dim=2), S


CHECK = {
    **dict.fromkeys(
        [
            "linrec_state_updated_in_place",
            "linrec_state_kept_between_calls",
            "linrec_no_normaliser",
            "linrec_state_made_on_cpu",
            "linrec_denominator_clamped",
        ],
        "check_linear_attention_recurrent",
    ),
    **dict.fromkeys(
        [
            "linchunk_earlier_chunks_only",
            "linchunk_length_must_divide",
            "linchunk_no_normaliser",
            "linchunk_denominator_clamped",
        ],
        "check_linear_attention_chunked",
    ),
    **dict.fromkeys(
        [
            "delta_state_read_transposed",
            "delta_query_scaled",
            "delta_alpha_as_log_gate",
            "delta_qk_l2norm_in_kernel",
        ],
        "check_gated_delta_rule",
    ),
}
