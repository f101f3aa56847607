"""Merging attention states computed over disjoint key sets (the engine's merge_states).

With O_i normalized over key set i and LSE_i its log-sum-exp, attention over the union is
    LSE = log(sum_i exp(LSE_i)),  O = sum_i exp(LSE_i - LSE) * O_i.
Split-KV's combine does this inside one forward; context parallelism merges the states that
ranks computed over their shards of the keys the same way.
"""

from . import _core
from ._backends import select_backend
from ._dtypes import attention_dtype
from ._features import scalar_features
from ._shapes import given_output, require_rank

_WRITES = "the merged states need"  # for a caller-given output's shape message


def merge_states(o_states, lse_states, *, sink_logits=None, return_lse=True, out=None,
                 lse_out=None, backend="auto"):
    """Merges n attention states into one.

    o_states: [n, batch, seq, nhead, hdim] in float32, float16 or bfloat16 (any strides, hdim
    contiguous); lse_states: float32 [n, batch, nhead, seq], natural log, as attention(...,
    return_lse=True) returns them. A state with LSE = -inf saw no key: it carries no weight and
    its O is not read. sink_logits: optional float32 [nhead], a sink logit that joins the
    softmax denominator once.

    out, lse_out: optional outputs to write instead of allocating, o [batch, seq, nhead, hdim]
    of o_states' dtype and float32 lse [batch, nhead, seq] (any strides, hdim contiguous; they
    must not overlap the states). Context parallelism merges straight into slices of its output.

    Returns o [batch, seq, nhead, hdim] in o_states' dtype and, with return_lse, the merged
    float32 lse [batch, nhead, seq] (-inf where every state is -inf; O is 0 there).
    """
    be = select_backend(backend, o_states)
    dtype = attention_dtype(o_states, None, field="o_states")
    o_states = be.tensor(o_states, "o_states")
    lse_states = be.tensor(lse_states, "lse_states")
    require_rank(o_states, 5, "o_states", "[n, batch, seq, nhead, hdim]")
    require_rank(lse_states, 4, "lse_states", "[n, batch, nhead, seq]")
    n, batch, seq, heads, dim = (int(d) for d in o_states.shape)
    problem = _core.Problem("fwd_splitkv_combine")
    problem.set_dtype(dtype)
    # The combine reads no Q, K or V: the key length is only a placeholder.
    problem.set_shape(batch, heads, heads, seq, seq, dim, dim)
    problem.set_features(scalar_features(num_splits=n))
    # The engine's partials are [n, batch, nhead, seq, hdim]: a strided view, no copy.
    be.attach(problem, "split.o_acc", o_states.swapaxes(2, 3))
    be.attach(problem, "split.lse_acc", lse_states)
    if out is None:
        o = be.empty_like_layout(o_states[0], (batch, seq, heads, dim))
    else:
        o = given_output(be, out, "out", (batch, seq, heads, dim), _WRITES)
    be.attach(problem, "o", o, writable=True)
    lse = None
    if lse_out is not None and not return_lse:
        raise ValueError("lse_out is given but return_lse=False")
    if return_lse:
        if lse_out is None:
            lse = be.empty_float32((batch, heads, seq))
        else:
            lse = given_output(be, lse_out, "lse_out", (batch, heads, seq), _WRITES)
        be.attach(problem, "lse", lse, writable=True)
    if sink_logits is not None:
        be.attach(problem, "sink_logits", be.float32_array(sink_logits, "sink_logits"))
    be.run(problem)
    if return_lse:
        return be.result(o), be.result(lse)
    return be.result(o)
