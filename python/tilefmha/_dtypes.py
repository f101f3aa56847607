"""Engine data types of arrays and tensors, and bf16 and fp8 for NumPy (which has neither).

bf16 data lives in NumPy as uint16 arrays holding the bit patterns (the upper half of a
float32); ``bf16_from_float32`` and ``bf16_to_float32`` convert, rounding to nearest even.
fp8 data lives in NumPy as uint8 arrays of codes (OCP e4m3fn or e5m2); ``fp8_from_float32`` and
``fp8_to_float32`` convert. Arrays of the ``bfloat16``, ``float8_e4m3fn`` and ``float8_e5m2``
dtypes of ml_dtypes are accepted as they are.
"""

import numpy as np

ATTENTION_DTYPES = ("fp32", "fp16", "bf16")
FP8_DTYPES = ("fp8_e4m3", "fp8_e5m2")

# Names a caller may use for the `dtype=` argument.
_DTYPE_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp8_e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2",
}

# Storage dtype name (NumPy, ml_dtypes or PyTorch, without "torch.") -> engine dtype. uint16 is
# bf16, and uint8 fp8 codes, only when the caller says so.
_STORED_AS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
              "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}

# Storage names of ml_dtypes' types: outputs beside them are ml_dtypes arrays too.
_ML_DTYPES_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
_HOST_STORAGE = {"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}

_FORWARD_FUNCTIONS = ("attention, attention_varlen, paged_attention, batch_prefill, append_kv "
                      "and append_kv_and_attend")


def require_tensor(x, field):
    """Raises TypeError naming `field` unless x is an array or tensor (has a dtype and a shape):
    a list or None would otherwise fail later with an AttributeError naming nothing."""
    if not (hasattr(x, "dtype") and hasattr(x, "shape")):
        raise TypeError(f"{field} must be a NumPy array or a tensor (PyTorch, DLPack), got "
                        f"{type(x).__name__}")


def storage_name(x):
    """'float32', 'float16', 'bfloat16', 'uint16'... for a NumPy array or a PyTorch tensor."""
    return str(x.dtype).removeprefix("torch.")


def canonical_dtype(dtype, field="dtype"):
    """The engine name ('fp32', 'fp16', 'bf16', 'fp8_e4m3', 'fp8_e5m2') of a `dtype=` argument
    (or of another argument naming a dtype, `field`)."""
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPE_ALIASES:
        raise ValueError(f"{field} = {dtype!r} is not supported; use 'fp32', 'fp16', 'bf16', "
                         "'fp8_e4m3' or 'fp8_e5m2'")
    return _DTYPE_ALIASES[name]


def attention_dtype(q, dtype=None, field="q", fp8=False):
    """The engine dtype of a call from its first data tensor (`field`, usually q) and the
    optional `dtype=` override. `fp8`: the call takes fp8 inputs (the forward functions).

    uint16 arrays are read as bf16 bit patterns only with dtype='bf16', and uint8 arrays as fp8
    codes only with dtype='fp8_e4m3' or 'fp8_e5m2', so that integer data is never taken for
    either by accident.
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
    if stored == "uint8" and fp8:
        if requested not in FP8_DTYPES:
            raise ValueError(
                f"{field}.dtype = uint8: pass dtype='fp8_e4m3' or dtype='fp8_e5m2' to read "
                "uint8 arrays as fp8 codes")
        return requested
    if stored not in _STORED_AS:
        fp8_note = ", or fp8 (PyTorch float8_e4m3fn / float8_e5m2, ml_dtypes, or NumPy uint8 " \
                   "codes with dtype='fp8_e4m3' or 'fp8_e5m2')" if fp8 else ""
        raise ValueError(
            f"{field}.dtype = {stored} is not supported; use float32, float16 or bf16 "
            f"(PyTorch bfloat16, or NumPy uint16 bit patterns with dtype='bf16'){fp8_note}")
    inferred = _STORED_AS[stored]
    if inferred in FP8_DTYPES and not fp8:
        raise ValueError(f"{field}.dtype = {stored}: fp8 inputs are taken by {_FORWARD_FUNCTIONS} "
                         "only")
    if requested is not None and requested != inferred:
        raise ValueError(f"dtype = {dtype!r} but {field} holds {stored} ({inferred}) data")
    return inferred


def require_same_dtype(engine_dtype, dtype, **tensors):
    """Raises ValueError naming the first of `tensors` whose data is not of q's engine dtype (an
    fp8 call: q, k and v share one fp8 format, which the engine cannot tell apart in uint8)."""
    for field, x in tensors.items():
        require_tensor(x, field)
        # `dtype` names what uint8 codes hold; other storage names its own dtype.
        found = attention_dtype(x, dtype if storage_name(x) == "uint8" else None, field,
                                fp8=True)
        if found != engine_dtype:
            raise ValueError(f"{field} holds {found} data but q holds {engine_dtype}: q, k and v "
                             "must share one fp8 format")


def host_storage(engine_dtype, like):
    """The NumPy dtype of a host output in `engine_dtype` beside input array `like`: bf16 is
    uint16 bit patterns, or ml_dtypes' bfloat16 beside ml_dtypes inputs."""
    if engine_dtype == "bf16" and like.dtype.name in _ML_DTYPES_NAMES:
        import ml_dtypes  # already imported: `like` is one of its arrays

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_HOST_STORAGE[engine_dtype])


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


# The OCP fp8 formats: (exponent bits, mantissa bits, has infinities). e4m3 ("e4m3fn") has no
# infinity and one NaN per sign (S.1111.111); e5m2 is IEEE-like.
_FP8_FORMATS = {"fp8_e4m3": (4, 3, False), "fp8_e5m2": (5, 2, True)}


def _fp8_format(dtype):
    name = canonical_dtype(dtype)
    if name not in FP8_DTYPES:
        raise ValueError(f"dtype = {dtype!r} is not an fp8 format; use 'fp8_e4m3' or 'fp8_e5m2'")
    return name


def _fp8_values(name):
    """float64 values of the 256 codes of fp8 format `name` (NaN for the NaN codes)."""
    exp_bits, man_bits, has_inf = _FP8_FORMATS[name]
    codes = np.arange(256)
    exponent = (codes >> man_bits) & ((1 << exp_bits) - 1)
    mantissa = codes & ((1 << man_bits) - 1)
    bias = (1 << (exp_bits - 1)) - 1
    fraction = mantissa / (1 << man_bits)
    magnitude = np.where(exponent == 0, np.ldexp(fraction, 1 - bias),
                         np.ldexp(1.0 + fraction, exponent - bias))
    top = exponent == (1 << exp_bits) - 1
    if has_inf:
        magnitude = np.where(top, np.where(mantissa == 0, np.inf, np.nan), magnitude)
    else:
        magnitude = np.where(top & (mantissa == (1 << man_bits) - 1), np.nan, magnitude)
    return np.where(codes & 0x80, -magnitude, magnitude)


def fp8_from_float32(x, dtype="fp8_e4m3"):
    """uint8 codes of fp8 format `dtype` ('fp8_e4m3' or 'fp8_e5m2') for float32 values, rounded
    to nearest even. Magnitudes beyond the largest finite value (448 for e4m3, 57344 for e5m2,
    infinities too) saturate to it, as the engine's own quantization does; NaN stays NaN."""
    name = _fp8_format(dtype)
    values = np.asarray(x, dtype=np.float32).astype(np.float64)
    table = _fp8_values(name)[:128]
    finite = table[np.isfinite(table)]  # the finite non-negative values, ascending with the code
    magnitude = np.abs(values)
    upper = np.searchsorted(finite, magnitude).clip(1, len(finite) - 1)
    lower = upper - 1
    below, above = magnitude - finite[lower], finite[upper] - magnitude
    # Ties go to the even code, whose last mantissa bit is 0.
    codes = np.where((below < above) | ((below == above) & (lower % 2 == 0)), lower, upper)
    codes = codes | np.where(np.signbit(values), 0x80, 0)
    # 0x7F is a NaN in both formats and what the engine (and sm_89's cvt) writes for any NaN.
    return np.where(np.isnan(values), 0x7F, codes).astype(np.uint8)


def fp8_to_float32(codes, dtype="fp8_e4m3"):
    """float32 values of uint8 codes of fp8 format `dtype` (exact); ml_dtypes float8_e4m3fn and
    float8_e5m2 arrays convert as they are. Float data raises TypeError: it is not codes."""
    name = _fp8_format(dtype)
    array = np.asarray(codes)
    if _STORED_AS.get(array.dtype.name) in FP8_DTYPES:  # ml_dtypes: its own format
        return array.astype(np.float32)
    if array.dtype.kind in "iu" and (array.size == 0 or (array.min() >= 0
                                                          and array.max() <= 0xFF)):
        return _fp8_values(name).astype(np.float32)[array.astype(np.intp)]
    raise TypeError(f"codes.dtype = {array.dtype}: fp8_to_float32 takes uint8 fp8 codes (or "
                    "integers in [0, 255]); float data is not codes")
