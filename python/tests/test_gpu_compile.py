"""tilefmha.torch under torch.compile and CUDA graphs on the GPU: compiled (fullgraph, inductor)
forward and backward against eager mode, dense (bf16, causal or not, GQA) and varlen;
torch.library.opcheck of the operators (tilefmha._torch_ops); eager and compiled forward +
backward captured in a CUDA graph and replayed on new inputs. Skipped (and reported as skipped)
without PyTorch, a CUDA GPU or a usable driver."""

import pytest

from gpu_support import gpu_skip_reason, torch

pytestmark = pytest.mark.skipif(bool(gpu_skip_reason()), reason=gpu_skip_reason() or "GPU")

# (id, batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, features)
CASES = [
    ("plain_d64", 2, 4, 4, 128, 128, 64, {}),
    ("causal_gqa_d128", 2, 8, 2, 96, 160, 128, {"causal": True}),
    ("bottom_right_window_softcap_gqa_d64", 1, 6, 3, 77, 130, 64,
     {"window": (32, 0), "window_align": "bottom_right", "softcap": 4.0}),
]


def draw(generator, *shape, dtype=None):
    return (torch.rand(shape, generator=generator, device="cuda") * 2 - 1).to(
        dtype or torch.bfloat16)


def leaves(tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def assert_close(actual, expected, name):
    """bf16 results of the same kernels: equal but for the order of the backward's dQ atomics
    and bf16 rounding of the loss gradient; bounds relative to the largest value."""
    expected = expected.float()
    bound = 2e-2 * float(expected.abs().max()) + 1e-3
    torch.testing.assert_close(actual.float(), expected, rtol=2e-2, atol=bound,
                               msg=lambda m: f"{name}: {m}")


def dense_problem(case, seed):
    _, batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim, features = case
    generator = torch.Generator(device="cuda").manual_seed(seed)
    q = draw(generator, batch, seqlen_q, nhead_q, hdim)
    k = draw(generator, batch, seqlen_k, nhead_k, hdim)
    v = draw(generator, batch, seqlen_k, nhead_k, hdim)
    weight = draw(generator, batch, seqlen_q, nhead_q, hdim, dtype=torch.float32)
    return (q, k, v), weight, features


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_compiled_forward_and_backward_match_eager(case):
    import torch._dynamo

    from tilefmha.torch import attention

    inputs, weight, features = dense_problem(case, sum(map(ord, case[0])))

    def loss(q, k, v):
        o = attention(q, k, v, **features)
        return (o.float() * weight).sum(), o

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True)
    eager_inputs, compiled_inputs = leaves(inputs), leaves(inputs)
    expected, expected_o = loss(*eager_inputs)
    expected.backward()
    for attempt in range(2):  # the second call runs the cached compiled graph
        for x in compiled_inputs:
            x.grad = None
        got, got_o = compiled(*compiled_inputs)
        got.backward()
        assert torch.equal(got_o, expected_o), "the forward runs the same kernel"
        for name, eager, traced in zip("qkv", eager_inputs, compiled_inputs):
            assert traced.grad is not None and traced.grad.is_cuda
            assert float(traced.grad.float().abs().max()) > 0
            assert_close(traced.grad, eager.grad, "d" + name)


def test_compiled_dynamic_shapes_reuse_one_graph():
    """dynamic=True: the fake implementations take symbolic lengths, so a second sequence
    length runs through the graph compiled for the first (the backend is not called again)."""
    import torch._dynamo
    import torch._dynamo.testing

    from tilefmha.torch import attention

    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def loss(q, k, v):
        return attention(q, k, v, causal=True).float().square().sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, dynamic=True, backend=counter)
    generator = torch.Generator(device="cuda").manual_seed(21)
    compiles = []
    # Lengths unlike the other dimensions: dynamo's duck sizing would tie a length equal to the
    # head dim to it, and the next length would then recompile.
    for seqlen in (96, 200):
        inputs = [draw(generator, 1, seqlen, 4, 64) for _ in range(3)]
        eager_inputs, compiled_inputs = leaves(inputs), leaves(inputs)
        loss(*eager_inputs).backward()
        compiled(*compiled_inputs).backward()
        compiles.append(counter.frame_count)
        for name, eager, traced in zip("qkv", eager_inputs, compiled_inputs):
            assert_close(traced.grad, eager.grad, f"d{name} at seqlen {seqlen}")
    assert compiles[0] >= 1 and compiles[1] == compiles[0], compiles
    # The graph in use calls the operator.
    assert any("tilefmha.attention_forward" in str(node.target)
               for node in counter.graphs[-1].graph.nodes)


@pytest.mark.parametrize("starts", ["cpu_tensors", "lists"])
def test_compiled_varlen_matches_eager(starts):
    import torch._dynamo

    from tilefmha.torch import attention_varlen

    lengths_q, lengths_k = [40, 0, 130, 1], [35, 20, 200, 64]
    cu_q, cu_k = ([0], [0])
    for n_q, n_k in zip(lengths_q, lengths_k):
        cu_q.append(cu_q[-1] + n_q)
        cu_k.append(cu_k[-1] + n_k)
    if starts == "cpu_tensors":
        cu_q, cu_k = torch.tensor(cu_q), torch.tensor(cu_k)
    generator = torch.Generator(device="cuda").manual_seed(22)
    inputs = [draw(generator, 171, 8, 128), draw(generator, 319, 2, 128),
              draw(generator, 319, 2, 128)]
    weight = draw(generator, 171, 8, 128, dtype=torch.float32)

    def loss(q, k, v):
        o, lse = attention_varlen(q, k, v, cu_q, cu_k, causal="bottom_right", return_lse=True)
        return (o.float() * weight).sum(), o, lse

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True)
    eager_inputs, compiled_inputs = leaves(inputs), leaves(inputs)
    expected, expected_o, expected_lse = loss(*eager_inputs)
    expected.backward()
    got, got_o, got_lse = compiled(*compiled_inputs)
    got.backward()
    assert torch.equal(got_o, expected_o) and torch.equal(got_lse, expected_lse)
    assert got_lse.shape == (8, 171)
    for name, eager, traced in zip("qkv", eager_inputs, compiled_inputs):
        assert_close(traced.grad, eager.grad, "d" + name)


def _opcheck(op, args):
    results = torch.library.opcheck(op, args)
    assert results and set(results.values()) <= {"SUCCESS", "SKIPPED"}, results


def test_opcheck_of_the_operators_on_the_gpu():
    from tilefmha import _torch_ops as ops

    generator = torch.Generator(device="cuda").manual_seed(23)
    q, k, v = leaves([draw(generator, 1, 64, 4, 64), draw(generator, 1, 80, 2, 64),
                      draw(generator, 1, 80, 2, 64)])
    # deterministic: bitwise-repeatable dQ, so that opcheck's repeated runs agree exactly.
    arguments = ops._scalar_arguments(True, None, "top_left", 0, 0.0, None, 0.0, 0, 0, True)
    _opcheck(torch.ops.tilefmha.attention_forward.default,
             (q, k, v, None, None, None) + arguments)
    o, lse = torch.ops.tilefmha.attention_forward(q, k, v, None, None, None, *arguments)
    do = draw(generator, *o.shape)
    detached = [x.detach() for x in (q, k, v, o)]
    _opcheck(torch.ops.tilefmha.attention_backward.default,
             (*detached, lse, do, None, None, None) + arguments + (False, False))

    cu_q, cu_k = torch.tensor([0, 30, 30, 64]), torch.tensor([0, 50, 60, 80])
    qv, kv, vv = leaves([x[0] for x in (q, k, v)])
    _opcheck(torch.ops.tilefmha.attention_varlen_forward.default,
             (qv, kv, vv, cu_q, cu_k) + arguments)
    o, lse = torch.ops.tilefmha.attention_varlen_forward(qv, kv, vv, cu_q, cu_k, *arguments)
    detached = [x.detach() for x in (qv, kv, vv, o)]
    _opcheck(torch.ops.tilefmha.attention_varlen_backward.default,
             (*detached, lse, do[0], cu_q, cu_k) + arguments)


def _warm_then_capture(step):
    """(graph, outputs): step() run a few times on a side stream (planning, JIT compiling and
    torch.compile's first calls stay outside the capture), then captured once."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_forward_and_backward_replay_in_a_cuda_graph(mode):
    """One training step's attention (forward, then torch.autograd.grad) captured in a CUDA
    graph: replays give eager mode's results, also after new values are written into the
    captured inputs."""
    import torch._dynamo

    from tilefmha.torch import attention

    generator = torch.Generator(device="cuda").manual_seed(24)
    q, k, v = leaves([draw(generator, 2, 128, 8, 64), draw(generator, 2, 192, 2, 64),
                      draw(generator, 2, 192, 2, 64)])
    weight = draw(generator, 2, 128, 8, 64, dtype=torch.float32)

    def loss(q, k, v):
        o = attention(q, k, v, causal="bottom_right", deterministic=True)
        return (o.float() * weight).sum(), o

    torch._dynamo.reset()
    forward = torch.compile(loss, fullgraph=True) if mode == "compiled" else loss

    def step():
        total, o = forward(q, k, v)
        return (o,) + torch.autograd.grad(total, (q, k, v))

    def eager_step():
        inputs = leaves([q, k, v])
        total, o = loss(*inputs)
        return (o,) + torch.autograd.grad(total, inputs)

    graph, outputs = _warm_then_capture(step)
    for round_ in range(2):
        if round_:
            with torch.no_grad():
                for x in (q, k, v):
                    x.copy_(draw(generator, *x.shape))
        expected = eager_step()
        graph.replay()
        torch.cuda.synchronize()
        for name, got, want in zip(("o", "dq", "dk", "dv"), outputs, expected):
            # deterministic=True: the replay and the eager call add dQ in the same order.
            assert torch.equal(got, want), f"{name} differs after replay {round_}"


def test_reduce_overhead_mode_matches_eager():
    """mode="reduce-overhead": inductor records the compiled forward and backward, the operator
    calls included, in CUDA graphs of its own and replays them on later calls."""
    import torch._dynamo

    from tilefmha.torch import attention

    generator = torch.Generator(device="cuda").manual_seed(25)
    inputs = [draw(generator, 2, 160, 8, 128), draw(generator, 2, 160, 4, 128),
              draw(generator, 2, 160, 4, 128)]
    weight = draw(generator, 2, 160, 8, 128, dtype=torch.float32)

    def loss(q, k, v):
        return (attention(q, k, v, causal=True, deterministic=True).float() * weight).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, mode="reduce-overhead")
    eager_inputs = leaves(inputs)
    loss(*eager_inputs).backward()
    for _ in range(4):  # warm-up, recording, then replays
        torch.compiler.cudagraph_mark_step_begin()
        compiled_inputs = leaves(inputs)
        compiled(*compiled_inputs).backward()
        for name, eager, traced in zip("qkv", eager_inputs, compiled_inputs):
            assert_close(traced.grad, eager.grad, "d" + name)
