"""The mistake catalogue: every mistake a self-check can name, defined once.

Each entry has an id (what tests assert), a diagnosis (what went wrong, in plain words) and
a hint (how to fix it). Diagnoses may hold ``{placeholders}`` that the check fills in.
Checks refer to mistakes only by id; ``tests/golden/check_messages.txt`` renders them all.

Chapters add their own section at the end of this file with :func:`mistake`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    """A known mistake: an id, what it means for the student, and how to fix it."""

    name: str
    diagnosis: str
    hint: str


MISTAKES: dict[str, Bug] = {}


def mistake(name: str, diagnosis: str, hint: str) -> Bug:
    """Define a mistake (each id exactly once) and return it."""
    if name in MISTAKES:
        raise KeyError(f"mistake {name!r} is defined twice")
    MISTAKES[name] = Bug(name, diagnosis, hint)
    return MISTAKES[name]


SOFTMAX_AXIS_HINT = "normalise over the keys, the last axis: torch.softmax(scores, dim=-1)."
SCALE_HINT = "divide the scores by sqrt(d_k), the width of the keys (keys.shape[-1] ** 0.5), before the softmax."
VALUE_ERROR_HINT = ("check the number of tokens against context_length first and raise a ValueError that "
                    "names both numbers: the course's one rule for an input that is too long.")

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

# ----------------------------------------------------------------- layers: mask buffer, length, dropout (04)
mistake("mask_not_sliced",
        "Your layer works on exactly context_length tokens but crashes on fewer: the (context_length, "
        "context_length) mask must be cut to the actual number of tokens before it is applied to the "
        "(n, n) scores.", "n = x.shape[1]; then use self.mask[:n, :n].")
mistake("mask_overwritten",
        "Your layer is right on the first call but wrong or crashing on a later, longer input: forward "
        "replaced the stored mask by a cut copy (self.mask = self.mask[:n, :n]), so the next call only "
        "has n x n of it left.",
        "never assign to self.mask in forward: use a local slice, mask = self.mask[:n, :n].")
mistake("mask_not_buffer",
        "Your mask is a plain tensor attribute (self.mask = ...), not a registered buffer: "
        "model.to(device) leaves it behind (a crash on a GPU) and state_dict() does not contain it.",
        "self.register_buffer('mask', torch.triu(torch.ones(context_length, context_length), diagonal=1)).")
mistake("mask_parameter",
        "Your mask is an nn.Parameter: parameters() hands it to the optimizer as if it were a weight to "
        "train. A fixed tensor that should move with the model is a buffer.",
        "self.register_buffer('mask', ...) instead of nn.Parameter(...).")
mistake("cpu_tensor_in_forward",
        "Your forward builds a tensor on the CPU (torch.arange(n), torch.ones(n, n), torch.triu(...) "
        "without device=...) and combines it with the input. It works on the CPU, but on a GPU it "
        "crashes with 'Expected all tensors to be on the same device'. (The check moved your layer "
        "and its input to another device to see this; the error was: {error})",
        "create it on the input's device: torch.arange(n, device=x.device), or use a registered buffer "
        "such as self.mask[:n, :n].")
mistake("no_length_check",
        "Your layer accepted more tokens than its context_length without complaint.", VALUE_ERROR_HINT)
mistake("length_error_not_value_error",
        "An input longer than context_length is refused, but with {error} instead of a ValueError.",
        VALUE_ERROR_HINT)
mistake("dropout_ignored",
        "Dropout is never applied in train mode: the attention weights reach the values unchanged.",
        "create self.dropout = nn.Dropout(dropout) in __init__ and use weights = self.dropout(weights) "
        "before multiplying with the values.")
mistake("dropout_unused",
        "You call dropout on the attention weights but then use the weights from before the call: its "
        "result is thrown away, so dropout is never applied in train mode.",
        "assign the result: weights = self.dropout(weights).")
mistake("dropout_in_eval",
        "Dropout is still active in eval mode (it ignores self.training): after model.eval() the output "
        "must be the plain, deterministic attention output.",
        "use nn.Dropout (it follows train() and eval()), or pass training=self.training to F.dropout "
        "(dropout_p=self.dropout if self.training else 0.0 for scaled_dot_product_attention).")
mistake("dropout_wrong_p",
        "Dropout uses a different probability than the `dropout` argument of the constructor.",
        "self.dropout = nn.Dropout(dropout), with the argument, not a fixed number.")
mistake("dropout_on_context",
        "Dropout is applied to the context vectors (after multiplying with the values) or to the "
        "layer's output. The course, like GPT-2, applies it to the attention weights.",
        "weights = self.dropout(weights) right after the softmax, then weights @ values.")
mistake("dropout_before_softmax",
        "Dropout is applied to the scores, before the softmax. The dropped scores become 0, and exp(0) "
        "= 1 still gives those tokens weight.", "apply dropout to the weights, after the softmax.")
mistake("dropout_on_projections",
        "Dropout is applied to the inputs or to the queries, keys or values, not to the attention "
        "weights.", "weights = self.dropout(weights) right after the softmax.")
mistake("inplace_breaks_autograd",
        "Your layer's output is right, but training it fails: backward() raised '{error}'. An in-place "
        "operation (nn.Dropout(inplace=True), `weights /= ...`, masked_fill_ on a tensor autograd still "
        "needs) overwrote a value the backward pass needs.",
        "use the out-of-place versions: nn.Dropout(p), scores = scores / ..., scores.masked_fill(...).")
mistake("gradient_blocked",
        "Your layer's output is right, but its gradients are not: {detail}. Something in forward cuts "
        "the graph (.detach(), .data, torch.no_grad(), .item() or a NumPy round trip), so training would "
        "not update those weights correctly.",
        "compute everything with torch operations on the tensors themselves; never .detach() in forward.")
mistake("input_modified",
        "Your code changed the tensor it was given (an in-place operation such as `scores /= ...`, "
        "`x.masked_fill_(...)` or `x[...] = ...`): the caller's {what} is different after the call.",
        "work on new tensors: scores = scores / ..., scores.masked_fill(...) (no trailing underscore).")
mistake("not_a_tensor",
        "{what} returned {kind} instead of a torch.Tensor.",
        "return the tensor itself (no list, NumPy array, tuple or print): e.g. `return weights @ values`.")
mistake("wrong_shape",
        "{what} returned a tensor of shape {got}, expected {expected}.",
        "follow the shapes step by step; the comments `# (b, n, d_out)` in the chapter show each one.")

# ----------------------------------------------------------------- multi-head (05)
mistake("view_without_transpose",
        "You split the heads by viewing (b, n, d_out) straight to (b, num_heads, n, head_dim). view "
        "keeps the memory order, so a 'head' then holds slices of several tokens mixed together instead "
        "of one slice of every token.", "view to (b, n, num_heads, head_dim), then .transpose(1, 2).")
mistake("merge_without_transpose",
        "You merged the heads by viewing (b, num_heads, n, head_dim) straight back to (b, n, d_out) "
        "without transposing first: rows of different tokens get glued together.",
        "context.transpose(1, 2).contiguous().view(b, n, d_out).")
mistake("heads_interleaved",
        "You merged the heads with the head and feature axes swapped ((b, n, head_dim, num_heads) "
        "flattened): the heads' columns come out interleaved instead of side by side.",
        "context.transpose(1, 2) gives (b, n, num_heads, head_dim); then .reshape(b, n, d_out).")
mistake("missing_contiguous",
        "view() cannot reshape the tensor that transpose() returns: transpose only swaps strides, so "
        "the data is no longer laid out contiguously in memory.",
        "call .contiguous() before .view(b, n, d_out), or use .reshape(b, n, d_out).")
mistake("head_dim_from_d_in",
        "Your head_dim is computed from d_in (the input width) instead of d_out: the projections are "
        "d_out wide, so each head gets d_out // num_heads of their columns.",
        "self.head_dim = d_out // num_heads.")
mistake("out_proj_unused",
        "Your class has out_proj but does not apply it: the merged heads are returned as they are.",
        "return self.out_proj(context) after merging the heads.")
mistake("out_proj_bias_follows_qkv_bias",
        "Your out_proj has no bias because it follows qkv_bias. qkv_bias is only about the query, key "
        "and value projections; the output projection always has a bias (GPT-2 size, d=768 and 12 "
        "heads: 2,360,064 parameters, not 2,359,296).", "self.out_proj = nn.Linear(d_out, d_out).")
mistake("parameter_count",
        "{detail}", "create exactly the layers of the chapter's class, each with the sizes and biases shown there.")
mistake("no_divisibility_check",
        "Your MultiHeadAttention accepts a d_out that num_heads does not divide (d_out=5, num_heads=2); "
        "head_dim = d_out // num_heads then silently drops columns, or the split crashes later with an "
        "unclear message.", "in __init__: if d_out % num_heads != 0: raise ValueError(...) naming both numbers.")
mistake("heads_python_list",
        "Your heads live in a plain Python list. nn.Module does not look inside lists, so their weights "
        "are missing from parameters() (the optimizer would never train them), from state_dict(), and "
        ".to(device) does not move them.", "self.heads = nn.ModuleList([...]).")
mistake("heads_shared",
        "Your heads are one and the same module repeated ([head] * num_heads): every head has the same "
        "weights, so the concatenated outputs are copies of each other.",
        "build a new CausalAttention per head: nn.ModuleList([CausalAttention(...) for _ in range(num_heads)]).")
mistake("heads_wrong_order",
        "You concatenated the heads in the wrong order (e.g. reversed): head 0's output must come first, "
        "so that out_proj and the weights of a state_dict line up with the right columns.",
        "torch.cat([head(x) for head in self.heads], dim=-1).")
mistake("concat_wrong_axis",
        "You concatenated the head outputs along the wrong axis: the batch or token axis grew instead of "
        "the feature axis.", "torch.cat([head(x) for head in self.heads], dim=-1).")
mistake("stacked_heads",
        "You stacked the head outputs into a new axis (torch.stack) instead of concatenating them along "
        "the features.", "torch.cat([head(x) for head in self.heads], dim=-1).")
mistake("wrapper_d_out_split",
        "In MultiHeadAttentionWrapper, d_out is the width of *each* head (the book's convention): the "
        "output is num_heads * d_out wide. You gave each head d_out // num_heads outputs.",
        "CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for every head.")
mistake("shape_prediction_wrong",
        "You predicted {predicted}, but the layer returns {got}. {why}",
        "the last axis is the layer's output width (d_out); the batch and token axes pass through unchanged.")

# ----------------------------------------------------------------- text to logits (06)
mistake("window_stride_ignored",
        "Your dataset ignores the stride: it starts a window at every token, as if stride were 1.",
        "window i starts at token i * stride; count the starts with "
        "len(range(0, len(token_ids) - context_length, stride)).")
mistake("window_step_by_context",
        "Your windows are spaced context_length tokens apart whatever the stride is: you stepped by "
        "context_length instead of by stride.", "use the stride as the step between window starts.")
mistake("window_extra",
        "Off by one: your dataset has one window too many. The last window's target would need the token "
        "*after* the final token of the text, which does not exist.",
        "a window starting at s needs tokens s .. s + context_length (inclusive, for the target), so s "
        "must stay below len(token_ids) - context_length.")
mistake("window_floor_count",
        "Your window count rounds down ((len - context_length) // stride), which loses the last window "
        "when the stride does not divide the remaining length evenly.",
        "count the starts instead: len(range(0, len(token_ids) - context_length, stride)).")
mistake("window_missing",
        "Off by one: your dataset has one window too few; the last valid window is missing.",
        "window starts run over range(0, len(token_ids) - context_length, stride).")
mistake("targets_not_shifted",
        "Your targets are not shifted: they equal the inputs. The target at position t must be the token "
        "that comes *next*, i.e. token t + 1.",
        "take the targets one token later: token_ids[s + 1 : s + context_length + 1].")
mistake("targets_swapped",
        "Your inputs and targets are swapped, so the shift goes the wrong way: the model would be asked "
        "to predict the *previous* token.",
        "inputs = token_ids[s : s + context_length], targets = token_ids[s + 1 : s + context_length + 1].")
mistake("targets_shifted_back",
        "Your targets are shifted the wrong way: they start one token *before* the inputs, so each "
        "target is the previous token instead of the next one.", "targets = token_ids[s + 1 : s + context_length + 1].")
mistake("window_stride_ignored_getitem",
        "Your window count uses the stride, but __getitem__ does not: window i starts at token i instead "
        "of token i * stride.", "in __getitem__, start at i * stride (or store the start positions in __init__).")
mistake("pos_sized_by_vocab",
        "Your positional table has vocab_size rows. Positions are 0, 1, ..., n - 1, so the table needs "
        "one row per *position*: context_length rows.", "nn.Embedding(context_length, d_model) for the positions.")
mistake("pos_not_sliced",
        "Your layer works when the input has exactly context_length tokens but fails on a shorter one: "
        "the positional embeddings are not cut to the input length n.",
        "look up positions torch.arange(n) (n = token_ids.shape[1]), not all context_length rows.")
mistake("positions_missing",
        "The positional embeddings are never added, so the model cannot tell 'dog bites man' from "
        "'man bites dog'.", "add them: token_embeddings + position_embeddings.")
mistake("positions_only",
        "Your output is the positional embeddings alone: the token embeddings are missing.",
        "return token_embeddings + position_embeddings.")
mistake("embeddings_multiplied",
        "You multiplied the token and positional embeddings; GPT adds them.", "use +, not *.")
mistake("embeddings_concatenated",
        "You concatenated the token and positional embeddings, which doubles the width; GPT adds them, "
        "so the output keeps d_model features.", "use token_embeddings + position_embeddings.")
mistake("last_positions",
        "For a short input you used the *last* n rows of the positional table; the first token is at "
        "position 0, so use the first n rows.", "positions are torch.arange(n).")
mistake("copy_wrong_direction",
        "Your function changed *our* layer's weights: it copied from nn.MultiheadAttention into ours "
        "instead of the other way round.", "write into theirs.in_proj_weight and theirs.out_proj; only read from ours.")
mistake("in_proj_order",
        "in_proj_weight holds the three projection matrices stacked in the order query, key, value; "
        "yours are stacked in a different order.",
        "torch.cat([ours.W_query.weight, ours.W_key.weight, ours.W_value.weight], dim=0).")
mistake("copy_transposed",
        "You copied transposed matrices. nn.Linear and nn.MultiheadAttention store weights the same way, "
        "(out_features, in_features), so no transpose is needed.", "copy the .weight tensors as they are.")
mistake("in_proj_not_copied",
        "theirs.in_proj_weight still holds its own random initial values: the query, key and value "
        "matrices were never copied into it.", "copy torch.cat([W_query, W_key, W_value]) into theirs.in_proj_weight.")
mistake("in_bias_not_copied",
        "Our layer has query/key/value biases (qkv_bias=True), but theirs.in_proj_bias was left as it was.",
        "copy torch.cat([b_query, b_key, b_value]) into theirs.in_proj_bias when ours has biases.")
mistake("in_bias_not_zero",
        "Our layer has no query/key/value biases (qkv_bias=False), so theirs.in_proj_bias must be all zeros.",
        "zero it: theirs.in_proj_bias.zero_() (inside torch.no_grad()).")
mistake("out_proj_not_copied",
        "theirs.out_proj.weight still holds its own initial values: the output projection was not copied.",
        "copy ours.out_proj.weight into theirs.out_proj.weight (and the bias too).")
mistake("out_proj_transposed",
        "You copied the output projection's weight transposed; both layers store it as (out_features, "
        "in_features).", "copy ours.out_proj.weight as it is.")
mistake("out_bias_not_copied",
        "theirs.out_proj.bias was not copied from ours.out_proj.bias.", "copy the bias as well as the weight.")
mistake("torch_mask_inverted",
        "Your mask uses the opposite convention. For nn.MultiheadAttention's attn_mask, True means 'do NOT "
        "attend' (the future, above the diagonal); True meaning 'attend' is the convention of "
        "scaled_dot_product_attention's boolean mask.",
        "True strictly above the diagonal: torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1).")
mistake("float_mask_ones",
        "Your mask is a float tensor of 0s and 1s. nn.MultiheadAttention *adds* a float mask to the "
        "scores, so a 1 just raises a score a little and blocks nothing.",
        "use a bool mask (True = do not attend), or a float mask with -inf where attention is forbidden and 0 elsewhere.")
mistake("tiny_gpt_not_causal",
        "Changing a later token changed the logits at an earlier position: your model lets tokens see the "
        "future, so it could cheat when predicting the next token.",
        "use a causal attention layer (cu.chapters.MultiHeadAttention masks the future) and do not mix positions elsewhere.")
mistake("tiny_gpt_head_bias",
        "Your output head has a bias. GPT-2's head maps d_model to vocab_size without one (its weight is "
        "tied to the token embeddings).", "self.head = nn.Linear(d_model, vocab_size, bias=False).")
mistake("logits_softmaxed",
        "Your model returns probabilities (a softmax over the vocabulary), not logits. The cross-entropy "
        "loss applies the softmax itself, so forward must return the raw scores.",
        "return self.head(h) without torch.softmax.")

# ----------------------------------------------------------------- online softmax (07)
mistake("block_local_positions",
        "Your mask compares positions *within* the block (0 .. block_size - 1) with the query's position "
        "in the whole sequence: key positions must include the block's start.",
        "use torch.arange(start, start + block_length) for the keys of the block.")
mistake("online_no_rescale",
        "When a block raises a query's running maximum, the sums gathered so far must shrink by "
        "exp(old_max - new_max); your running sum and output are not rescaled.",
        "multiply the running sum AND the running output by torch.exp(running_max - new_max) before "
        "adding the new block's terms.")
mistake("online_no_final_division",
        "You returned the running output without dividing by the running sum: the weights of each row do "
        "not add up to 1.", "return running_output / running_sum at the end.")
mistake("blockwise_full_scores",
        "{what} gives the right numbers, but it builds an ({n}, {n}) tensor: the full score matrix that "
        "blockwise attention exists to avoid.", "only ever compute q @ k_block.T, of shape (n, block_size).")
mistake("blockwise_uses_sdpa",
        "{what} gives the right numbers by calling {function}, which does all the work in one call: the "
        "exercise is to write the block loop and the online softmax yourself.",
        "loop over key blocks; keep a running maximum, a running sum and a running output per query.")
mistake("blockwise_full_row_softmax",
        "{what} gives the right numbers, but it takes a softmax over whole rows of {n} scores: the online "
        "softmax never sees a whole row at once.",
        "per block, use exp(scores - running_max) and update the running sum; divide once at the end.")

# ----------------------------------------------------------------- attention in today's LLMs (09)
mistake("window_not_bool",
        "The mask must be a bool tensor (True = may attend), as SDPA's attn_mask reads it; a float mask "
        "of 0s and 1s would be *added* to the scores instead of hiding anything.",
        "return the comparison itself, e.g. (distance >= 0) & (distance < window), without .float() or .int().")
mistake("window_inverted",
        "Your mask is inverted: True where the query must *not* look. That is nn.MultiheadAttention's "
        "convention; SDPA and this exercise read True as 'may attend'.",
        "return the allowed positions, 0 <= i - j < window, not the hidden ones (or apply ~ once more).")
mistake("window_cut_short",
        "Each query sees one key too few: window - 1 keys instead of window (itself plus window - 1 "
        "before it). The same off-by-one cut a sliding-window KV cache one token short in "
        "LLMs-from-scratch (#1008).",
        "a key j is allowed when 0 <= i - j < window: window values of i - j, from 0 to window - 1.")
mistake("window_one_too_many",
        "Each query sees one key too many: window + 1 keys (i - j <= window) instead of window. Mistral's "
        "Flash Attention path in Hugging Face transformers had this off-by-one (#29623): the model then "
        "attends further back than it was trained to.",
        "use a strict comparison: i - j < window.")
mistake("window_not_causal",
        "Your band is symmetric: it also lets a query see the window - 1 keys *after* it (|i - j| < window), "
        "so future tokens leak in.",
        "keep the causal half only: (i - j >= 0) & (i - j < window).")
mistake("window_top_left",
        "With fewer queries than keys you numbered the queries 0 .. n_queries - 1 (aligned to the top "
        "left, like SDPA's is_causal=True). The queries are the *newest* tokens, positions "
        "n_keys - n_queries .. n_keys - 1.",
        "query positions: torch.arange(n_keys - n_queries, n_keys); key positions: torch.arange(n_keys).")
mistake("mask_device_ignored",
        "The mask was not created on the requested device: asked for device='meta', it came back on "
        "another device. On a GPU this means a CPU mask meeting CUDA scores.",
        "pass device=device to every torch.arange / torch.ones that builds the mask.")
mistake("is_causal_top_left",
        "You used a causal mask aligned to the top left (SDPA's is_causal=True, or ones(n_q, n_k).tril()). "
        "With fewer queries than keys the new tokens then see only the first keys instead of all earlier "
        "ones (pytorch/pytorch#103082).",
        "build the bottom-right mask: sliding_window_mask(n_q, n_k, n_k, device=q.device), and pass it as attn_mask.")
mistake("cache_mask_missing",
        "You attended without a mask. That is right for a single new token (it may see every cached key), "
        "but with several new tokens each one sees the new tokens after it.",
        "mask the future even in cached steps: attn_mask=sliding_window_mask(n_q, n_k, n_k, device=q.device).")
mistake("padding_mask_inverted",
        "Your mask is inverted at the real tokens: they attend only to padding and future keys. This is "
        "what happens when nn.MultiheadAttention's masks (True = hidden) are given to SDPA (True = may attend).",
        "SDPA's bool attn_mask is True where a query may attend: causal & real key.")
mistake("padding_ignored",
        "The real tokens also attend to the padded keys (your mask hides the future but not the padding, "
        "or hides padded *queries* instead of padded keys). With left padding the padding sits before "
        "the text, so it leaks into every real token.",
        "combine the causal mask with the keys' mask: causal & real[:, None, None, :] (the last axis is the keys).")
mistake("padding_not_causal",
        "Your mask hides padded keys but not the future: each real token sees the real tokens after it.",
        "combine both: causal (n, n).tril() & real[:, None, None, :].")
mistake("padding_nan_rows",
        "The real tokens are right, but the output contains NaN (or inf) at padded query positions. A padded "
        "query that may see no key gets a row of -inf scores, and softmax of that row is 0/0 = NaN "
        "(pytorch/pytorch#103749, #110213); the NaN then spreads through later layers and the loss.",
        "let every query see at least itself (allowed | torch.eye(n, dtype=torch.bool)) or overwrite the "
        "padded rows afterwards: torch.where(real[:, None, :, None], context, 0.0).")
mistake("rope_layout_mixed",
        "You rotated interleaved pairs (0, 1), (2, 3), ... The exercise uses the split-halves layout, pairs "
        "(i, i + hd/2), as Hugging Face's Llama does. Both are RoPE, but weights trained with one layout give "
        "wrong scores with the other.",
        "first, second = x.chunk(2, dim=-1); rotate (first, second) with cos and sin of shape (n, hd/2).")
mistake("rope_rotation_reversed",
        "Your pairs turn the wrong way: (a cos + b sin, -a sin + b cos) rotates by minus the angle. Scores "
        "still depend only on distances, but on the opposite ones of a model trained the usual way.",
        "a pair (a, b) becomes (a cos - b sin, a sin + b cos).")
mistake("rope_frequency_exponent",
        "Your frequencies are off: pair i must turn by base ** (-2i / hd), the exponent running over the "
        "even numbers 0, 2, 4, ... divided by hd.",
        "use rope_angles(positions, hd, base), or base ** (-torch.arange(0, hd, 2) / hd).")
mistake("rope_positions_ignored",
        "You rotated by the token's index 0 .. n-1 instead of the positions passed in. In cached generation "
        "the new token's position is not 0.",
        "compute the angles from the positions argument: rope_angles(positions, hd, base).")
mistake("rope_base_ignored",
        "The base argument is ignored: with base=500,000 (Llama 3) your angles still use 10,000.",
        "pass base on: rope_angles(positions, hd, base).")
mistake("gqa_repeat_not_interleave",
        "Your heads are copied with repeat, which tiles the groups (0 1 0 1 ...): query head j then reads "
        "group j % g instead of j // n_rep. The shape is right, but every checkpoint (Llama, Mistral, "
        "Hugging Face's repeat_kv) expects consecutive query heads to share a group.",
        "kv.repeat_interleave(n_rep, dim=1): copies each group in place (0 0 1 1 ...).")
mistake("gqa_repeat_wrong_axis",
        "You copied along the wrong axis: the key/value heads are axis 1 of (b, g, n, hd), but your copies "
        "went along the tokens or the batch.",
        "kv.repeat_interleave(n_rep, dim=1).")
