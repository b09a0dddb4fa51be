"""Mistakes of chapters 04-05: the mask buffer, length, dropout, multi-head."""

from . import VALUE_ERROR_HINT, mistake

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
        "crashes with 'Expected all tensors to be on the same device'. (The check ran your code as if "
        "its input were on another device: {error}.)",
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
