"""Mistakes of chapters 01-03: scores, softmax, scaling, projections, causal masks."""

from . import SCALE_HINT, SOFTMAX_AXIS_HINT, mistake

# ----------------------------------------------------------------- scores, softmax, weights (01)
mistake("scores_no_sum",
        "You returned the element-wise products query * x_i without adding them up: a dot product "
        "is the *sum* of those products, one number per token.",
        "sum over the embedding dimension, or use `inputs @ query`.")
mistake("scores_sum_over_tokens",
        "You summed the products over the tokens (dim 0) instead of over the embedding dimension, "
        "so you get one number per embedding dimension, not one per token.",
        "sum over the last dimension: `(inputs * query).sum(dim=-1)`.")
mistake("scores_cosine",
        "Your scores are cosine similarities (dot products of unit-length vectors). Attention "
        "scores here are plain dot products: do not normalise the vectors.",
        "drop the division by the vector lengths.")
mistake("scores_all_pairs",
        "You computed the scores of every token with every other token (an n x n matrix); this "
        "function scores one query against all tokens.",
        "use the single `query` vector: `inputs @ query`.")
mistake("divide_by_sum",
        "You normalised by dividing by the sum instead of using the softmax: that breaks on "
        "negative scores (weights below 0 or above 1) and does not use exp.",
        "exponentiate first: torch.softmax(x, dim=-1), or exp(x) / exp(x).sum(dim=-1, keepdim=True).")
mistake("softmax_no_normalise",
        "You returned exp(x) without dividing by the sum, so the weights do not add up to 1.",
        "divide by `x.exp().sum(dim=-1, keepdim=True)`.")
mistake("softmax_overflow",
        "Your softmax returns NaN or inf for large scores (e.g. 1000): exp(1000) overflows float32. "
        "This is the naive softmax's weakness.",
        "subtract each row's maximum before exp: softmax(x) == softmax(x - x.max(dim=-1, keepdim=True).values).")
mistake("softmax_global_max",
        "You subtracted the maximum of the *whole* tensor instead of each row's maximum. A row whose "
        "scores are all far below the global maximum then underflows: exp gives 0 everywhere and "
        "the row becomes 0/0 = NaN.",
        "subtract the row maximum: x - x.max(dim=-1, keepdim=True).values.")
mistake("softmax_no_keepdim",
        "On a 2-d input the division by the row sums broadcast the wrong way: without keepdim=True "
        "a (n,) sum is divided across columns, not rows.",
        "use `.sum(dim=-1, keepdim=True)`.")
mistake("softmax_over_queries",
        "Your softmax normalises over the queries (down each column of the score matrix: dim=0 of "
        "(n, n), dim=1 of (batch, n, n), dim=2 of (batch, heads, n, n)) instead of over the keys: "
        "each column adds up to 1 instead of each row. Nothing crashes, because the shape is the "
        "same either way.", SOFTMAX_AXIS_HINT)
mistake("softmax_over_heads",
        "Your softmax normalises over the heads (dim=1 of the (batch, heads, n, n) scores): the heads "
        "compete for weight instead of each query's row adding up to 1.", SOFTMAX_AXIS_HINT)
mistake("softmax_over_batch",
        "Your softmax normalises over the batch (dim=0): different sequences compete for weight, and "
        "each query's row no longer adds up to 1.", SOFTMAX_AXIS_HINT)
mistake("raw_scores_as_weights",
        "You returned the raw scores inputs @ inputs.T; attention weights are those scores after a "
        "softmax over each row.", "apply torch.softmax(scores, dim=-1).")
mistake("context_transposed_weights",
        "Your context vector i mixes the tokens with column i of the weights instead of row i: either "
        "the weights were normalised down the columns (softmax over dim=0) or you multiplied by "
        "weights.T. (With dot-product scores the score matrix is symmetric, so both mistakes give "
        "the same numbers.)", "use torch.softmax(scores, dim=-1), then weights @ inputs.")
mistake("context_from_raw_scores",
        "You mixed the inputs with the raw scores instead of the softmax weights, so the context "
        "vectors are not weighted averages.",
        "normalise the scores with torch.softmax(scores, dim=-1) first.")

# ----------------------------------------------------------------- scaling and projections (02)
mistake("no_scaling",
        "You did not scale the scores before the softmax. Dot products of d_k-wide vectors grow with "
        "d_k, which pushes the softmax towards one-hot rows (and tiny gradients).", SCALE_HINT)
mistake("scale_precedence",
        "Your scores are not divided by sqrt(d_k): `d_k ** 1/2` does not take a square root. In Python "
        "** binds tighter than /, so `d_k ** 1/2` is `(d_k ** 1) / 2` = d_k / 2. (For d_k = 4, d_k / 2 "
        "happens to equal sqrt(d_k), which is why a single test can miss this.)",
        "write `d_k ** 0.5` (or `math.sqrt(d_k)`), or put the exponent in brackets: `d_k ** (1/2)`.")
mistake("scale_d_k",
        "You divided the scores by d_k itself instead of by its square root sqrt(d_k).", SCALE_HINT)
mistake("scale_d_in",
        "You scaled by sqrt(d_in), the width of the *inputs*, instead of sqrt(d_k), the width of the "
        "keys. The two only agree when d_in == d_k.", SCALE_HINT)
mistake("scale_d_out",
        "You divided the scores by sqrt(d_out), the width of all heads together. Each head's scores "
        "are dot products of head_dim numbers, so the scale is sqrt(head_dim).",
        "divide by self.head_dim ** 0.5 (or keys.shape[-1] ** 0.5 after the split).")
mistake("scale_after_softmax",
        "You divided the attention weights by sqrt(d_k) *after* the softmax, so the rows no longer add "
        "up to 1. The scaling belongs to the scores, before the softmax.", SCALE_HINT)
mistake("keys_from_query",
        "Your keys come from the query projection (W_query) instead of W_key, so the scores compare "
        "queries with queries and W_key is never used.", "keys = self.W_key(x).")
mistake("values_from_query",
        "Your values come from the query projection (W_query) instead of W_value, so the context "
        "vectors mix queries and W_value is never used.", "values = self.W_value(x).")
mistake("values_from_key",
        "Your values are made with the *key* weights (W_key where W_value belongs): the context "
        "vectors mix the keys instead of the values.", "values = self.W_value(x).")
mistake("keys_values_from_query",
        "Your keys and your values both come from the query projection (W_query): W_key and W_value "
        "are never used.", "keys = self.W_key(x) and values = self.W_value(x).")
mistake("scores_transposed",
        "Your scores are transposed (keys @ queries.T): row i holds how much every query attends to "
        "key i, instead of what query i gives to every key.",
        "scores = queries @ keys.transpose(-2, -1) (queries first).")
mistake("context_from_inputs",
        "You mixed the raw inputs x with the attention weights instead of the values: the context "
        "vectors must be weights @ values.", "return attention_weights @ values.")
mistake("returns_weights",
        "You returned the attention weights (n x n) instead of the context vectors (weights @ values).",
        "finish with `return attn_weights @ values`.")
mistake("dot_t_on_batch",
        "Your forward uses `.T` on a 3-d tensor. On a batch of shape (b, n, d_out), `.T` reverses *all* "
        "axes to (d_out, n, b) instead of swapping the last two, so the scores are wrong or the matrix "
        "product fails. (PyTorch deprecates `.T` on tensors that are not 2-d.)",
        "use keys.transpose(1, 2) (or keys.transpose(-2, -1), or keys.mT): it swaps only the token "
        "and feature axes of every sequence in the batch.")
mistake("qkv_bias_ignored",
        "The qkv_bias argument is not passed on to the query/key/value layers: nn.Linear has a bias by "
        "default, so it must be told qkv_bias.",
        "nn.Linear(d_in, d_out, bias=qkv_bias) for W_query, W_key and W_value.")
mistake("transfer_no_transpose",
        "You copied the nn.Linear weights without transposing them. nn.Linear stores its weight as "
        "(d_out, d_in) and computes x @ weight.T, while SelfAttention_v1 computes x @ W with W of shape "
        "(d_in, d_out): the matrix to copy is weight.T. (With d_in == d_out the copy even succeeds "
        "silently, with the wrong numbers.)",
        "v1.W_query.copy_(v2.W_query.weight.T), likewise for key and value, inside torch.no_grad().")
mistake("transfer_swapped",
        "You copied the right matrices into the wrong places: {detail}. Each of v1's matrices must "
        "receive the weights of the layer with the same role.", "query <- W_query, key <- W_key, value <- W_value.")
mistake("transfer_missing",
        "{detail} still holds its own initial weights: it was never copied.",
        "copy all three: W_query, W_key and W_value.")
mistake("transfer_reversed",
        "You copied in the wrong direction: the source model's weights changed (they now hold the "
        "target's), and the target kept its own.",
        "fn(target, source) writes into its first argument and only reads from the second.")
mistake("transfer_changed_source",
        "Your function changed the weights of the model it copies *from*. It must only read from it.",
        "read the source's .weight, do not assign to it.")
mistake("shared_parameter",
        "{detail} shares its memory or its Parameter object with the other model (e.g. "
        "nn.Parameter(v2.W_query.weight.T), or theirs.out_proj.weight = ours.out_proj.weight): "
        "training either model would silently change the other too.",
        "copy the numbers: target.copy_(source) under torch.no_grad(), or use .clone().")
mistake("copy_without_no_grad",
        "Your function copies into a parameter in place while autograd is recording, which PyTorch "
        "forbids for parameters (leaf tensors that require grad).",
        "wrap the copies in `with torch.no_grad():`.")
mistake("transfer_frozen",
        "{detail} no longer requires gradients after the copy, so the model could not be trained.",
        "copy with .copy_() under torch.no_grad(); keep the Parameters as they are.")

# ----------------------------------------------------------------- causal masks (03)
mistake("mask_diagonal",
        "Your mask also hides the diagonal (torch.triu(..., diagonal=0)): no token may see itself, and "
        "the first token sees nothing at all, so its row is all -inf and the softmax returns NaN.",
        "mask only the keys strictly after the query: torch.triu(..., diagonal=1).")
mistake("mask_past",
        "Your mask hides the *past* instead of the future (the tril/triu mix-up, or key < query where "
        "key > query belongs): each token sees itself and every later token.",
        "the future of query i is the keys j > i, above the diagonal: torch.triu(..., diagonal=1).")
mistake("keep_mask",
        "Your mask is True where a token may look (the lower triangle, diagonal included): a *keep* "
        "mask. masked_fill(mask, -inf) overwrites the positions where the mask is True, so it hides "
        "what should be seen (rows of all -inf become NaN).",
        "invert it (~mask), or build the fill mask directly with torch.triu(..., diagonal=1).")
mistake("mask_float",
        "Your mask has the right pattern but dtype {dtype}. masked_fill needs a bool mask (True = fill), "
        "and a float 0/1 mask is easy to misuse.",
        "add dtype=torch.bool to torch.ones, or call .bool() on the result.")
mistake("mask_fixed_size",
        "Your mask does not depend on n: asked for n={n}, it has shape {shape}.",
        "build it from n: torch.ones(n, n, ...).")
mistake("no_renormalise",
        "You zeroed the future weights after the softmax but did not renormalise: the rows no longer "
        "sum to 1 (row i keeps only the share of weight it gave to tokens 0..i).",
        "divide each row by its sum: weights / weights.sum(dim=-1, keepdim=True).")
mistake("renormalise_wrong_dim",
        "You renormalised the masked weights by sums over dim=1. On a 2-d (n, n) matrix that is the "
        "row, but on a batch (b, n, n) dim=1 runs down the columns, so the rows no longer add up to 1.",
        "sum over the last axis: weights / weights.sum(dim=-1, keepdim=True).")
mistake("mask_zero_fill",
        "You filled the masked scores with 0 instead of -inf. A score of 0 is not 'ignore me': exp(0) "
        "= 1, so future tokens still get weight.", "masked_fill(mask, -torch.inf): exp(-inf) = 0 exactly.")
mistake("minus_inf_in_weights",
        "You wrote -inf into the *weights* after the softmax. -inf belongs in the scores, before the "
        "softmax, which then turns it into an exact 0.", "masked_fill the scores first, then softmax.")
mistake("mask_after_softmax",
        "You applied the mask after the softmax without renormalising: the future entries are gone, "
        "but each row no longer adds up to 1 (or holds -inf).",
        "fill the masked *scores* with -inf before the softmax; the softmax then gives them exactly 0 "
        "and still normalises each row.")
mistake("mask_missing",
        "There is no causal mask: every token also attends to the tokens after it (the future), which "
        "a language model must not see.",
        "scores.masked_fill(self.mask[:n, :n], -torch.inf) before the softmax, with mask = "
        "torch.triu(torch.ones(context_length, context_length), diagonal=1).bool().")
mistake("mask_leak",
        "Your mask starts one diagonal too high (torch.triu(..., diagonal=2)): every token also sees "
        "the next token, so the future leaks in.", "use torch.triu(..., diagonal=1).")
mistake("sdpa_mask_inverted",
        "You gave scaled_dot_product_attention a mask that is True on the future, as "
        "nn.MultiheadAttention and masked_fill expect. For SDPA a boolean mask means the opposite: "
        "True = may attend. Each token then sees only the future (the last row sees nothing: NaN).",
        "pass ~mask (True on and below the diagonal), or use is_causal=True without a mask.")
