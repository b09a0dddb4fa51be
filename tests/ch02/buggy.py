"""Right and wrong answers to chapter 02's exercises, each wrong one a mistake students make."""

import torch
from torch import nn


# --------------------------------------------------------------------------- SelfAttention_v1
# Sources: the book's SelfAttention_v1 (section 3.4.2) with one typical slip each (scaling, axis,
# keys from queries, initialisation other than torch.rand, plain tensors instead of nn.Parameter).
class V1Right(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v


class V1NoScaling(V1Right):
    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.T, dim=-1) @ v


class V1SoftmaxDim0(V1Right):
    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=0) @ v


class V1ScaleByDin(V1Right):
    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.T / x.shape[-1] ** 0.5, dim=-1) @ v


class V1KeysFromQueries(V1Right):
    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_query, x @ self.W_value
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v


class V1ReturnsWeights(V1Right):
    def forward(self, x):
        q, k = x @ self.W_query, x @ self.W_key
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1)


class V1ScaleAfterSoftmax(V1Right):
    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.T, dim=-1) / k.shape[-1] ** 0.5 @ v


class V1PlainTensors(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = torch.rand(d_in, d_out)
        self.W_key = torch.rand(d_in, d_out)
        self.W_value = torch.rand(d_in, d_out)

    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v


class V1StoredTransposed(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_out, d_in))
        self.W_key = nn.Parameter(torch.rand(d_out, d_in))
        self.W_value = nn.Parameter(torch.rand(d_out, d_in))

    def forward(self, x):
        q, k, v = x @ self.W_query.T, x @ self.W_key.T, x @ self.W_value.T
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v


class V1RandnInit(V1Right):
    def __init__(self, d_in, d_out):
        nn.Module.__init__(self)
        self.W_query = nn.Parameter(torch.randn(d_in, d_out))
        self.W_key = nn.Parameter(torch.randn(d_in, d_out))
        self.W_value = nn.Parameter(torch.randn(d_in, d_out))


class V1KeyFirst(V1Right):
    def __init__(self, d_in, d_out):
        nn.Module.__init__(self)
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))


class V1Frozen(V1Right):
    """The book's section 3.4.1 weights, nn.Parameter(torch.rand(d_in, d_out), requires_grad=False),
    copied into the class (the book freezes them only to keep its printouts short). The check crashed
    on this before 2026-11-24."""

    def __init__(self, d_in, d_out):
        nn.Module.__init__(self)
        self.W_query = nn.Parameter(torch.rand(d_in, d_out), requires_grad=False)
        self.W_key = nn.Parameter(torch.rand(d_in, d_out), requires_grad=False)
        self.W_value = nn.Parameter(torch.rand(d_in, d_out), requires_grad=False)


class V1Stub(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        raise NotImplementedError()


# --------------------------------------------------------------------------- SelfAttention_v2
# Sources: the book's SelfAttention_v2 with one typical slip each (operator precedence in the scale,
# bias always on, values from W_key, transposed scores, nn.Linear's arguments swapped).
class V2Right(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v


class V2Precedence(V2Right):
    """The chapter's spot-the-bug class: `** 1/2` is `(d_k ** 1) / 2`."""

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scale = k.shape[-1] ** 1 / 2
        return torch.softmax(q @ k.T / scale, dim=-1) @ v


class V2AlwaysBias(V2Right):
    def __init__(self, d_in, d_out, qkv_bias=False):
        nn.Module.__init__(self)
        self.W_query = nn.Linear(d_in, d_out)
        self.W_key = nn.Linear(d_in, d_out)
        self.W_value = nn.Linear(d_in, d_out)


class V2ValuesFromKeys(V2Right):
    def forward(self, x):
        q, k = self.W_query(x), self.W_key(x)
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ k


class V2ScoresTransposed(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(k @ q.T / k.shape[-1] ** 0.5, dim=-1) @ v


class V2MixesInputs(V2Right):
    def forward(self, x):
        q, k = self.W_query(x), self.W_key(x)
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ x


class V2SwappedLinearArgs(V2Right):
    def __init__(self, d_in, d_out, qkv_bias=False):
        nn.Module.__init__(self)
        self.W_query = nn.Linear(d_out, d_in, bias=qkv_bias)
        self.W_key = nn.Linear(d_out, d_in, bias=qkv_bias)
        self.W_value = nn.Linear(d_out, d_in, bias=qkv_bias)


class V2ValueFirst(V2Right):
    def __init__(self, d_in, d_out, qkv_bias=False):
        nn.Module.__init__(self)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)


class V2OtherNames(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v


# --------------------------------------------------------------------------- weight transfer
# Sources: the book's exercise 3.1 (v2 weights into v1): forgetting the transpose is the slip the
# exercise is about; shared Parameters and missing no_grad are typical porting slips.
def transfer_right(v1, v2):
    with torch.no_grad():
        v1.W_query.copy_(v2.W_query.weight.T)
        v1.W_key.copy_(v2.W_key.weight.T)
        v1.W_value.copy_(v2.W_value.weight.T)


def transfer_with_data(v1, v2):
    """Also right: replacing the Parameters with fresh copies."""
    v1.W_query = nn.Parameter(v2.W_query.weight.T.clone())
    v1.W_key = nn.Parameter(v2.W_key.weight.T.clone())
    v1.W_value = nn.Parameter(v2.W_value.weight.T.clone())


def transfer_no_transpose(v1, v2):
    with torch.no_grad():
        v1.W_query.copy_(v2.W_query.weight)
        v1.W_key.copy_(v2.W_key.weight)
        v1.W_value.copy_(v2.W_value.weight)


def transfer_no_transpose_data(v1, v2):
    v1.W_query.data = v2.W_query.weight.data.clone()
    v1.W_key.data = v2.W_key.weight.data.clone()
    v1.W_value.data = v2.W_value.weight.data.clone()


def transfer_swapped_qk(v1, v2):
    with torch.no_grad():
        v1.W_query.copy_(v2.W_key.weight.T)
        v1.W_key.copy_(v2.W_query.weight.T)
        v1.W_value.copy_(v2.W_value.weight.T)


def transfer_forgot_value(v1, v2):
    with torch.no_grad():
        v1.W_query.copy_(v2.W_query.weight.T)
        v1.W_key.copy_(v2.W_key.weight.T)


def transfer_reversed(v1, v2):
    with torch.no_grad():
        v2.W_query.weight.copy_(v1.W_query.T)
        v2.W_key.weight.copy_(v1.W_key.T)
        v2.W_value.weight.copy_(v1.W_value.T)


def transfer_no_grad_missing(v1, v2):
    v1.W_query.copy_(v2.W_query.weight.T)
    v1.W_key.copy_(v2.W_key.weight.T)
    v1.W_value.copy_(v2.W_value.weight.T)


def transfer_shared(v1, v2):
    v1.W_query = nn.Parameter(v2.W_query.weight.T)
    v1.W_key = nn.Parameter(v2.W_key.weight.T)
    v1.W_value = nn.Parameter(v2.W_value.weight.T)


def transfer_transposes_source_in_place(v1, v2):
    """`.t_()` (PyTorch's in-place transpose, the underscore slip) turns v2's own weights around."""
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(v1, name).copy_(getattr(v2, name).weight.t_())


def transfer_deletes_the_parameter(v1, v2):
    """The forum workaround for "cannot assign 'torch.FloatTensor' as parameter": delete the
    Parameter, then assign the tensor (v1 is left with plain tensors that no optimizer sees)."""
    for name in ("W_query", "W_key", "W_value"):
        delattr(v1, name)
        setattr(v1, name, getattr(v2, name).weight.T.detach().clone())


def transfer_keeps_a_batch_axis(v1, v2):
    """A `[None]` left from batched code: each matrix becomes (1, d_in, d_out) (written for the course)."""
    for name in ("W_query", "W_key", "W_value"):
        setattr(v1, name, nn.Parameter(getattr(v2, name).weight.T[None].clone()))


def transfer_frozen(v1, v2):
    """The book's section 3.4.1 style, nn.Parameter(..., requires_grad=False), used for the copy."""
    for name in ("W_query", "W_key", "W_value"):
        weight = getattr(v2, name).weight.T.detach().clone()
        setattr(v1, name, nn.Parameter(weight, requires_grad=False))


def transfer_rebuilds_v2_layers(v1, v2):
    """Constructed (no public copy found): the copy is right, then v2's layers are rebuilt around
    their own weights "so that both models are fresh", with nn.Linear's default bias=True, the
    default SelfAttention_v2's qkv_bias=False exists to switch off. The three matrices all match,
    only the outputs show the random biases."""
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            old = getattr(v2, name)
            getattr(v1, name).copy_(old.weight.T)
            layer = nn.Linear(old.in_features, old.out_features)  # bias=True by default
            layer.weight.copy_(old.weight)
            setattr(v2, name, layer)


def transfer_to_float64(v1, v2):
    """Constructed: the numbers copied through a Python list, torch.tensor(..., dtype=torch.float64)
    as in NumPy habits; the values are right, but v1 now computes in float64 and a float32 input
    makes its forward fail."""
    for name in ("W_query", "W_key", "W_value"):
        values = getattr(v2, name).weight.T.tolist()
        setattr(v1, name, nn.Parameter(torch.tensor(values, dtype=torch.float64)))


# --------------------------------------------------------------------------- batched
# Sources: the 2-d code of section 3.4 run on a batch: .T on 3-d tensors (PyTorch's own deprecation
# warning), softmax over dim=1/dim=0, typical slips.
class BatchedRight(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, dim=-1) @ v


class BatchedDotT(V2Right):
    """The 2-d forward unchanged: `.T` on (b, n, d_out) keys."""


class BatchedSoftmaxDim1(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, dim=1) @ v


class BatchedSoftmaxDim0(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, dim=0) @ v


class BatchedNoScaling(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v


class BatchedKeysFromQueries(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_query(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(1, 2) / k.shape[-1] ** 0.5, dim=-1) @ v


class V2PrecedenceInline(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.T / k.shape[-1] ** 1 / 2, dim=-1) @ v


class BatchedNameError(V2Right):
    """A typo in forward (keyz for keys): must be reported as the NameError it is, not as the .T bug."""

    def forward(self, x):
        q, keys, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ keyz.transpose(1, 2) / keys.shape[-1] ** 0.5, dim=-1) @ v  # noqa: F821


# Round two. V2ScaleNegativeExponent: rasbt/LLMs-from-scratch#856, `attn_scores / keys.shape[-1] ** -0.5`
# in a bonus notebook (a division by d_k ** -0.5 multiplies by sqrt(d_k)). V2KeysValuesSwapped: written
# to the pattern of unpacking the projections in the wrong order (q, v, k = ...).
class V2ScaleNegativeExponent(V2Right):
    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.T / k.shape[-1] ** -0.5, dim=-1) @ v


class V2KeysValuesSwapped(V2Right):
    def forward(self, x):
        q, v, k = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.T / k.shape[-1] ** 0.5, dim=-1) @ v
