"""Mistakes of chapter 08: attention that learns (training step, sampling, KV cache)."""

from . import mistake

# ----------------------------------------------------------------- attention that learns (08)
mistake("step_loss_not_returned",
        "train_step must return the batch's loss as a number, so that the training loop can record it.",
        "end with `return loss.item()`.")
mistake("step_no_backward",
        "loss.backward() was never called (no gradient reached the weights), so the optimizer had "
        "nothing to apply and the weights stayed as they were.",
        "after computing the loss: optimizer.zero_grad(), loss.backward(), optimizer.step().")
mistake("step_zero_grad_before_step",
        "The gradients were computed, but cleared again before the optimizer used them: "
        "optimizer.zero_grad() sits between loss.backward() and optimizer.step(), so every step "
        "changes nothing.",
        "the order is zero_grad(), backward(), step(): clear, compute, apply.")
mistake("step_no_optimizer_step",
        "The gradients were computed but never applied: optimizer.step() is missing, so the "
        "weights never change and the loss never falls.",
        "call optimizer.step() after loss.backward().")
mistake("grad_not_zeroed",
        "Your first step is right, the later ones are not: the gradients are never cleared. "
        "loss.backward() *adds* to the .grad left by the previous step, so each update follows the "
        "sum of all gradients so far (a classic slip in PyTorch training loops).",
        "call optimizer.zero_grad() once per step, before loss.backward().")
mistake("loss_on_probabilities",
        "You applied a softmax before F.cross_entropy. The cross-entropy applies log-softmax itself, "
        "so it must get the raw logits; a softmax first squashes the scores into 0..1, the loss "
        "barely moves and training crawls.",
        "F.cross_entropy(logits.flatten(0, 1), targets.flatten()) on the model's output as it is.")
mistake("loss_summed",
        "Your loss is the sum over all positions instead of the mean (reduction='sum'). The updates "
        "then grow with the batch size and the number of tokens, and the printed loss is not "
        "comparable with ln(vocab).",
        "keep F.cross_entropy's default reduction, the mean.")
mistake("loss_shifted_again",
        "You shifted the targets again (logits[:, :-1] against targets[:, 1:]). The targets given to "
        "train_step are already the right ones for each position, so the model learns to predict the "
        "token two steps ahead instead of the next one.",
        "use all positions: F.cross_entropy(logits.flatten(0, 1), targets.flatten()).")
mistake("sample_not_ids",
        "The chosen tokens must be integer ids (they index the vocabulary and the embedding table).",
        "argmax and torch.multinomial both return int64 ids: return them without converting.")
mistake("greedy_not_argmax",
        "At temperature 0 the choice must be greedy: in each row, the index of the largest logit.",
        "if temperature == 0: return logits.argmax(dim=-1).")
mistake("greedy_divides_by_zero",
        "At temperature 0 you divided the logits by 0, which gives inf and NaN probabilities. "
        "Temperature 0 is the name for the limit: greedy choice.",
        "treat temperature == 0 separately: return logits.argmax(dim=-1).")
mistake("generator_ignored",
        "Your draws do not come from the generator you were given (torch.multinomial without "
        "generator=, or torch.distributions, which always uses the global one), so a seeded "
        "generation is not repeatable.",
        "torch.multinomial(probs, num_samples=1, generator=generator).")
mistake("always_greedy",
        "You always return the most likely token, whatever the temperature: that is greedy choice, "
        "not sampling.",
        "for temperature > 0, draw with torch.multinomial from softmax(logits / temperature).")
mistake("temperature_after_softmax",
        "The frequencies follow softmax(logits), as if the temperature were 1: you divided the "
        "probabilities by the temperature after the softmax, and torch.multinomial renormalises them, "
        "which undoes the division.",
        "divide the logits, before the softmax: torch.softmax(logits / temperature, dim=-1).")
mistake("temperature_multiplied",
        "You multiplied the logits by the temperature instead of dividing: a high temperature then "
        "sharpens the distribution and a low one flattens it, the opposite of what it should do.",
        "torch.softmax(logits / temperature, dim=-1).")
mistake("sample_softmax_over_batch",
        "Your softmax normalises over the batch (dim=0) instead of over the vocabulary: each row's "
        "probabilities no longer come from that row's logits.",
        "torch.softmax(logits / temperature, dim=-1): one distribution per row.")
mistake("sampled_from_logits",
        "You drew from the logits (or log-probabilities) as if they were probabilities. "
        "torch.multinomial needs non-negative weights: negative logits make it fail, and positive "
        "ones give a far flatter distribution than the softmax.",
        "probs = torch.softmax(logits / temperature, dim=-1), then torch.multinomial(probs, 1, generator=generator).")
mistake("cache_not_returned",
        "attend_with_cache must return a pair (output, cache), so that the next call gets the grown cache.",
        "return attn.out_proj(context), (keys, values).")
mistake("cache_attend_before_append",
        "Your new tokens attend to the cached keys only, without their own: the cache is appended "
        "after attending, so the newest token never sees itself (the full layer lets every token see "
        "itself).",
        "torch.cat the new keys and values to the cache first, then compute the scores against all of them.")
mistake("cache_not_accumulated",
        "Your returned cache holds only the keys and values of the latest call, so every later token "
        "forgets all but the last few tokens.",
        "return the concatenated tensors: (torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)).")
mistake("cache_mask_top_left",
        "You masked with the first rows of the causal mask (mask[:m, :t]), which belong to positions "
        "0 .. m - 1. The new tokens sit at positions past .. past + m - 1, so they were hidden from "
        "most of the cache.",
        "take the rows of the new positions: attn.mask[past:past + m, :past + m].")
mistake("cache_chunk_unmasked",
        "You attended without a mask. For one new token that is right (it may see the whole cache), "
        "but when several new tokens arrive together (the prompt), each sees the ones after it.",
        "mask with rows past .. past + m - 1 of attn.mask: attn.mask[past:past + m, :past + m].")
mistake("cache_not_scaled",
        "Your scores are not divided by sqrt(head_dim), unlike the full layer's.",
        "scores = q @ keys.transpose(2, 3) / attn.head_dim ** 0.5.")
mistake("cache_values_from_keys",
        "Your values are projected with W_key: the cached 'values' are copies of the keys.",
        "v = attn.W_value(x_new), split into heads like the keys.")
mistake("cache_heads_interleaved",
        "You merged the heads back with a reshape of (b, heads, m, head_dim) and no transpose. For one "
        "new token that happens to be right, but with several the heads' rows get interleaved.",
        "(weights @ values).transpose(1, 2).reshape(b, m, num_heads * head_dim).")
mistake("cache_no_out_proj",
        "You returned the merged heads without the output projection attn.out_proj, which the full "
        "layer applies.",
        "return attn.out_proj(context), (keys, values).")
mistake("cache_recomputes_keys",
        "The outputs are right, but W_key projected {rows} rows for new tokens arriving {chunks} per "
        "call: the keys of cached tokens were computed again. A KV cache projects only the new tokens.",
        "apply W_query, W_key and W_value to x_new only; take the old keys and values from the cache.")
