"""Mistakes of chapters 06-07: text to logits, online softmax."""

from . import mistake

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
mistake("tiny_gpt_attention_skipped",
        "Your logits are the head applied straight to the embeddings: the attention layer is built but "
        "never used, so every position predicts from its own token alone.",
        "logits = self.head(self.attn(self.embed(token_ids))).")
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
