"""The torch.library operators of tilefmha (tilefmha._torch_ops) on CPU tensors, through the CPU
reference: torch.autograd.gradcheck of their autograd formulas, torch.library.opcheck of their
schemas and fake implementations, agreement with the eager autograd.Function path, and
torch.compile(fullgraph=True) with the aot_eager backend (no C++ compiler needed). Skipped
without PyTorch.

The CPU reference takes fp32, fp16 and bf16 (no float64), so gradcheck runs in fp32: the
reference accumulates in double and rounds once, so central differences with a step of 1e-3
are good to about 1e-4, well inside the tolerances below.
"""

import warnings

import numpy as np
import pytest

from gpu_support import torch

pytestmark = pytest.mark.skipif(
    torch is None or not hasattr(getattr(torch, "library", None), "custom_op"),
    reason="PyTorch 2.4 or later (torch.library.custom_op) is not installed")

GRADCHECK = {"eps": 1e-3, "atol": 1e-3, "rtol": 1e-2}

# (id, features, with a bias that requires grad)
DENSE_CASES = [
    ("plain", {}, False),
    ("causal_softcap_scale", {"causal": True, "softcap": 1.5, "scale": 0.4}, False),
    ("bottom_right_window_sinks", {"window": (1, 0), "window_align": "bottom_right",
                                   "sink_tokens": 1}, False),
    ("bias", {"causal": "bottom_right"}, True),
    ("alibi_sink_logits", {"alibi_slopes": [0.5, 0.25], "sink_logits": [0.3, -0.2]}, False),
    ("dropout", {"dropout_p": 0.3, "seed": 11, "offset": 3}, False),
]


@pytest.fixture(scope="module")
def ops():
    from tilefmha import _torch_ops

    return _torch_ops


def draw(generator, *shape, dtype="float32"):
    return (torch.rand(shape, generator=generator, dtype=torch.float32) * 2 - 1).to(
        getattr(torch, dtype))


def dense_inputs(seed, bias=False, dtype="float32"):
    """GQA (2 query heads on 1 KV head), seqlen_q 3 against seqlen_k 4, head dim 8: q, k, v
    (and a [nhead_q, seqlen_q, seqlen_k] bias), each requiring grad."""
    generator = torch.Generator().manual_seed(seed)
    tensors = [draw(generator, 1, 3, 2, 8, dtype=dtype), draw(generator, 1, 4, 1, 8, dtype=dtype),
               draw(generator, 1, 4, 1, 8, dtype=dtype)]
    if bias:
        tensors.append(draw(generator, 2, 3, 4, dtype=dtype))
    return [t.requires_grad_() for t in tensors]


def gradcheck(function, inputs):
    with warnings.catch_warnings():
        # gradcheck warns that its inputs are not float64; the CPU reference has no float64.
        warnings.simplefilter("ignore", UserWarning)
        return torch.autograd.gradcheck(function, inputs, **GRADCHECK)


@pytest.mark.parametrize("case", DENSE_CASES, ids=[case[0] for case in DENSE_CASES])
def test_gradcheck_of_the_dense_operator(ops, case):
    _, features, with_bias = case
    inputs = dense_inputs(1, bias=with_bias)

    def through_operator(q, k, v, bias=None):
        return ops.attention(q, k, v, bias=bias, **features)[0]

    assert gradcheck(through_operator, inputs)


def test_gradcheck_of_the_varlen_operator(ops):
    generator = torch.Generator().manual_seed(2)
    cu_q, cu_k = torch.tensor([0, 2, 5]), torch.tensor([0, 3, 4])  # second sequence: 3 x 1
    q = draw(generator, 5, 2, 8).requires_grad_()
    k, v = (draw(generator, 4, 1, 8).requires_grad_() for _ in range(2))

    def through_operator(q, k, v):
        return ops.attention_varlen(q, k, v, cu_q, cu_k, causal="bottom_right", softcap=2.0)[0]

    assert gradcheck(through_operator, [q, k, v])


@pytest.mark.parametrize("case", DENSE_CASES, ids=[case[0] for case in DENSE_CASES])
def test_the_operator_matches_the_eager_function_bit_for_bit(ops, case):
    """Both paths run the same CPU reference on the same problem: the results are equal, and the
    eager path on plain tensors is still the autograd.Function (no dispatcher round trip)."""
    from tilefmha.torch import attention

    _, features, with_bias = case
    eager_inputs = dense_inputs(3, bias=with_bias)
    op_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]
    bias = eager_inputs[3] if with_bias else None
    o, lse = attention(*eager_inputs[:3], bias=bias, return_lse=True, **features)
    assert "AttentionFunction" in type(o.grad_fn).__name__
    op_bias = op_inputs[3] if with_bias else None
    o_op, lse_op = ops.attention(*op_inputs[:3], bias=op_bias, **features)
    assert "tilefmha" in type(o_op.grad_fn).__name__
    assert not lse_op.requires_grad
    assert torch.equal(o, o_op) and torch.equal(lse, lse_op)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(4))
    o.backward(do)
    o_op.backward(do)
    for eager, op in zip(eager_inputs, op_inputs):
        assert eager.grad is not None and torch.equal(eager.grad, op.grad)


def sink_inputs(seed):
    """dense_inputs and sink logits [0.4, -0.3] (one per query head), all requiring grad."""
    return dense_inputs(seed) + [torch.tensor([0.4, -0.3], requires_grad=True)]


def test_gradcheck_of_the_sink_logits_gradient(ops):
    # Bottom-right causal over seqlen_q 3 and seqlen_k 4: every row sees keys and the sink.
    def through_operator(q, k, v, sinks):
        return ops.attention(q, k, v, sink_logits=sinks, causal="bottom_right")[0]

    assert gradcheck(through_operator, sink_inputs(15))


def test_gradcheck_of_the_eager_sink_logits_gradient():
    from tilefmha.torch import attention

    def eager(q, k, v, sinks):
        return attention(q, k, v, sink_logits=sinks, softcap=2.0)

    assert gradcheck(eager, sink_inputs(16))


def test_the_operator_and_the_eager_function_give_the_same_sink_gradient(ops):
    from tilefmha.torch import attention

    eager_inputs = sink_inputs(17)
    op_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]
    o = attention(*eager_inputs[:3], sink_logits=eager_inputs[3], causal=True)
    o_op = ops.attention(*op_inputs[:3], sink_logits=op_inputs[3], causal=True)[0]
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(18))
    o.backward(do)
    o_op.backward(do)
    for eager, op in zip(eager_inputs, op_inputs):
        assert eager.grad is not None and torch.equal(eager.grad, op.grad)
    assert eager_inputs[3].grad.abs().max() > 1e-3


def test_a_sink_list_or_one_not_requiring_grad_gets_none():
    from tilefmha.torch import attention

    q, k, v = dense_inputs(19)
    sinks = torch.tensor([0.4, -0.3])
    attention(q, k, v, sink_logits=sinks).sum().backward()
    assert sinks.grad is None and q.grad is not None
    attention(q, k, v, sink_logits=[0.4, -0.3]).sum().backward()


def test_a_seed_above_int64_reaches_the_engine_unchanged(ops):
    """Schema ints are int64: the operator carries a uint64 seed as its two's complement."""
    from tilefmha.torch import attention

    q, k, v = dense_inputs(5)
    features = {"dropout_p": 0.5, "seed": 2**64 - 1, "offset": 2**63 + 5}
    eager = attention(q, k, v, **features)
    assert torch.equal(ops.attention(q, k, v, **features)[0], eager)
    assert not torch.equal(ops.attention(q, k, v, dropout_p=0.5, seed=1, offset=2**63 + 5)[0],
                           eager)
    with pytest.raises(ValueError, match="seed"):
        ops.attention(q, k, v, dropout_p=0.5, seed=2**64)


def test_bad_masks_fail_as_in_eager_mode(ops):
    q, k, v = dense_inputs(6)
    with pytest.raises(ValueError, match="causal"):
        ops.attention(q, k, v, causal="sideways")
    with pytest.raises(ValueError, match="exclude each other"):
        ops.attention(q, k, v, causal=True, window=(1, 1))


def test_bf16_and_transposed_layouts_keep_the_promised_strides(ops):
    """The fake implementations promise O in q's memory order and gradients in their inputs'
    order; the CPU reference's NumPy outputs are brought to that layout."""
    generator = torch.Generator().manual_seed(7)
    q = draw(generator, 1, 2, 3, 8, dtype="bfloat16").transpose(1, 2).requires_grad_()  # bhsd
    k = draw(generator, 1, 2, 4, 8, dtype="bfloat16").transpose(1, 2).requires_grad_()
    v = draw(generator, 1, 2, 4, 8, dtype="bfloat16").transpose(1, 2).requires_grad_()
    o, lse = ops.attention(q, k, v, causal=True)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape and o.stride() == q.stride()
    assert lse.dtype == torch.float32 and lse.shape == (1, 2, 3) and lse.is_contiguous()
    # torch.autograd.grad hands the operator's gradients over as they are (no accumulation
    # into .grad, which would impose the leaves' layout itself).
    gradients = torch.autograd.grad(o.float().sum(), (q, k, v))
    for x, gradient in zip((q, k, v), gradients):
        assert gradient.dtype == torch.bfloat16 and gradient.stride() == x.stride()


def opcheck(op, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        results = torch.library.opcheck(op, args)
    assert all(result == "SUCCESS" for result in results.values()), results


def scalars(ops, **features):
    return ops._scalar_arguments(features.pop("causal", False), features.pop("window", None),
                                 features.pop("window_align", "top_left"),
                                 features.pop("sink_tokens", 0), features.pop("softcap", 0.0),
                                 features.pop("scale", None), features.pop("dropout_p", 0.0),
                                 features.pop("seed", 0), features.pop("offset", 0),
                                 features.pop("deterministic", False))


@pytest.mark.parametrize("case", DENSE_CASES, ids=[case[0] for case in DENSE_CASES])
def test_opcheck_of_the_dense_operators(ops, case):
    _, features, with_bias = case
    features = dict(features)
    q, k, v, *rest = dense_inputs(8, bias=with_bias)
    bias = rest[0] if rest else None
    slopes = ops._float32_on(features.pop("alibi_slopes", None), q)
    sinks = ops._float32_on(features.pop("sink_logits", None), q)
    arguments = scalars(ops, **features)
    opcheck(torch.ops.tilefmha.attention_forward.default,
            (q, k, v, bias, slopes, sinks) + arguments)
    o, lse = torch.ops.tilefmha.attention_forward(q, k, v, bias, slopes, sinks, *arguments)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(9))
    opcheck(torch.ops.tilefmha.attention_backward.default,
            (q.detach(), k.detach(), v.detach(), o.detach(), lse, do,
             None if bias is None else bias.detach(), slopes, sinks) + arguments
            + (with_bias, sinks is not None))


def test_opcheck_of_the_varlen_operators(ops):
    generator = torch.Generator().manual_seed(10)
    cu_q, cu_k = torch.tensor([0, 2, 2, 5]), torch.tensor([0, 3, 4, 6])  # an empty sequence
    q = draw(generator, 5, 2, 8).requires_grad_()
    k, v = (draw(generator, 6, 1, 8).requires_grad_() for _ in range(2))
    arguments = scalars(ops, causal=True)
    opcheck(torch.ops.tilefmha.attention_varlen_forward.default,
            (q, k, v, cu_q, cu_k) + arguments)
    o, lse = torch.ops.tilefmha.attention_varlen_forward(q, k, v, cu_q, cu_k, *arguments)
    assert o.shape == (5, 2, 8) and lse.shape == (2, 5)
    do = torch.randn(o.shape, generator=generator)
    opcheck(torch.ops.tilefmha.attention_varlen_backward.default,
            (q.detach(), k.detach(), v.detach(), o.detach(), lse, do, cu_q, cu_k) + arguments)


def test_compiled_dense_forward_and_backward_match_eager():
    """torch.compile(fullgraph=True) traces tilefmha.torch.attention into the operator: one
    graph, no break, the same values and gradients as eager mode."""
    import torch._dynamo

    from tilefmha.torch import attention

    def loss(q, k, v, bias):
        o = attention(q, k, v, bias=bias, causal=True, softcap=3.0)
        return (o * o).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    eager_inputs = dense_inputs(12, bias=True)
    compiled_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]
    expected = loss(*eager_inputs)
    expected.backward()
    got = compiled(*compiled_inputs)
    got.backward()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    for eager, traced in zip(eager_inputs, compiled_inputs):
        torch.testing.assert_close(traced.grad, eager.grad, rtol=1e-6, atol=1e-6)


def test_compiled_sink_logits_gradient_matches_eager():
    import torch._dynamo

    from tilefmha.torch import attention

    def loss(q, k, v, sinks):
        return (attention(q, k, v, sink_logits=sinks, causal=True) ** 2).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    eager_inputs = sink_inputs(20)
    compiled_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]
    loss(*eager_inputs).backward()
    compiled(*compiled_inputs).backward()
    for eager, traced in zip(eager_inputs, compiled_inputs):
        torch.testing.assert_close(traced.grad, eager.grad, rtol=1e-6, atol=1e-6)


def test_the_compiled_graph_holds_the_operator():
    import torch._dynamo

    from tilefmha.torch import attention, attention_varlen

    graphs = []

    def recording(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    def both(q, k, v, qv, kv, vv):
        dense = attention(q, k, v, window=(1, 1))
        packed = attention_varlen(qv, kv, vv, [0, 2, 5], [0, 3, 4], causal=True)
        return dense.sum() + packed.sum()

    torch._dynamo.reset()
    generator = torch.Generator().manual_seed(13)
    packed = (draw(generator, 5, 2, 8), draw(generator, 4, 1, 8), draw(generator, 4, 1, 8))
    torch.compile(both, fullgraph=True, backend=recording)(*dense_inputs(13), *packed)
    assert len(graphs) == 1
    # The targets are the operators (overload packets or their .default overloads).
    targets = [str(node.target) for node in graphs[0].graph.nodes]
    for name in ("tilefmha.attention_forward", "tilefmha.attention_varlen_forward"):
        assert sum(target.split(".default")[0] == name for target in targets) == 1, targets


@pytest.mark.parametrize("starts", ["tensors", "lists"])
def test_compiled_varlen_matches_eager(starts):
    import torch._dynamo

    from tilefmha.torch import attention_varlen

    lengths_q, lengths_k = [2, 0, 3], [3, 2, 1]
    cu_q, cu_k = ([0] + np.cumsum(n).tolist() for n in (lengths_q, lengths_k))
    if starts == "tensors":
        cu_q, cu_k = torch.tensor(cu_q), torch.tensor(cu_k)
    generator = torch.Generator().manual_seed(14)
    eager_inputs = [draw(generator, 5, 2, 8).requires_grad_(),
                    draw(generator, 6, 1, 8).requires_grad_(),
                    draw(generator, 6, 1, 8).requires_grad_()]
    compiled_inputs = [t.detach().clone().requires_grad_() for t in eager_inputs]

    def loss(q, k, v):
        o, lse = attention_varlen(q, k, v, cu_q, cu_k, causal="bottom_right", return_lse=True)
        return (o * o).sum(), lse

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    expected, expected_lse = loss(*eager_inputs)
    expected.backward()
    got, got_lse = compiled(*compiled_inputs)
    got.backward()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(got_lse, expected_lse)
    for eager, traced in zip(eager_inputs, compiled_inputs):
        torch.testing.assert_close(traced.grad, eager.grad, rtol=1e-6, atol=1e-6)
