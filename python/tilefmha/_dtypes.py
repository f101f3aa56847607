"""Engine data types of arrays and tensors, and bf16 for NumPy (which has no bfloat16).

bf16 data lives in NumPy as uint16 arrays holding the bit patterns (the upper half of a
float32); ``bf16_from_float32`` and ``bf16_to_float32`` convert, rounding to nearest even.
Arrays of the ``bfloat16`` dtype of ml_dtypes are accepted as they are.
"""

import numpy as np

ATTENTION_DTYPES = ("fp32", "fp16", "bf16")

# Names a caller may use for the `dtype=` argument.
_DTYPE_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
}

# Storage dtype name (NumPy or PyTorch, without "torch.") -> engine dtype. uint16 is bf16 only
# when the caller says so.
_STORED_AS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


def require_tensor(x, field):
    """Raises TypeError naming `field` unless x is an array or tensor (has a dtype and a shape):
    a list or None would otherwise fail later with an AttributeError naming nothing."""
    if not (hasattr(x, "dtype") and hasattr(x, "shape")):
        raise TypeError(f"{field} must be a NumPy array or a tensor (PyTorch, DLPack), got "
                        f"{type(x).__name__}")


def storage_name(x):
    """'float32', 'float16', 'bfloat16', 'uint16'... for a NumPy array or a PyTorch tensor."""
    return str(x.dtype).removeprefix("torch.")


def canonical_dtype(dtype):
    """The engine name ('fp32', 'fp16', 'bf16') of a `dtype=` argument."""
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPE_ALIASES:
        raise ValueError(f"dtype = {dtype!r} is not supported; use 'fp32', 'fp16' or 'bf16'")
    return _DTYPE_ALIASES[name]


def attention_dtype(q, dtype=None, field="q"):
    """The engine dtype of a call from its first data tensor (`field`, usually q) and the
    optional `dtype=` override.

    uint16 arrays are read as bf16 bit patterns only with dtype='bf16', so that integer data is
    never taken for bf16 by accident.
    """
    require_tensor(q, field)
    stored = storage_name(q)
    requested = None if dtype is None else canonical_dtype(dtype)
    if stored == "uint16":
        if requested != "bf16":
            raise ValueError(
                f"{field}.dtype = uint16: pass dtype='bf16' to read uint16 arrays as bf16 bit "
                "patterns")
        return "bf16"
    if stored not in _STORED_AS:
        raise ValueError(
            f"{field}.dtype = {stored} is not supported; use float32, float16 or bf16 "
            "(PyTorch bfloat16, or NumPy uint16 bit patterns with dtype='bf16')")
    inferred = _STORED_AS[stored]
    if requested is not None and requested != inferred:
        raise ValueError(f"dtype = {dtype!r} but {field} holds {stored} ({inferred}) data")
    return inferred


def bf16_from_float32(x):
    """uint16 bf16 bit patterns of float32 values, rounded to nearest even (NaN stays NaN)."""
    values = np.asarray(x, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    quiet_nan = ((bits >> 16) & 0x8000).astype(np.uint16) | np.uint16(0x7FC0)
    return np.where(np.isnan(values), quiet_nan, rounded)


def bf16_to_float32(bits):
    """float32 values of uint16 bf16 bit patterns (exact); ml_dtypes bfloat16 arrays convert as
    they are. Any other dtype raises TypeError: casting float data to uint16 would read values
    as bit patterns and return garbage."""
    array = np.asarray(bits)
    if array.dtype.name == "bfloat16":
        return array.astype(np.float32)
    if array.dtype == np.uint16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    if array.dtype.kind in "iu" and (array.size == 0 or (array.min() >= 0
                                                          and array.max() <= 0xFFFF)):
        return (array.astype(np.uint32) << 16).view(np.float32)
    raise TypeError(f"bits.dtype = {array.dtype}: bf16_to_float32 takes uint16 bf16 bit "
                    "patterns (or integers in [0, 65535]); float data is not bit patterns")
