#include "tilefmha/types.hpp"

#include "tilefmha/error.hpp"

namespace tilefmha {

template <class E>
E parse_enum(std::string_view text) {
  if (auto value = try_parse_enum<E>(text)) return *value;
  std::string accepted;
  for (auto name : EnumNames<E>::names) {
    if (!accepted.empty()) accepted += ", ";
    accepted += name;
  }
  throw Error(ErrorKind::invalid_argument, "unknown " + std::string(EnumNames<E>::type_name) +
                                               " '" + std::string(text) +
                                               "' (accepted: " + accepted + ")");
}

template Family parse_enum<Family>(std::string_view);
template DType parse_enum<DType>(std::string_view);
template Mode parse_enum<Mode>(std::string_view);
template MaskKind parse_enum<MaskKind>(std::string_view);
template MaskAlign parse_enum<MaskAlign>(std::string_view);
template BiasKind parse_enum<BiasKind>(std::string_view);
template RopeKind parse_enum<RopeKind>(std::string_view);
template PageTableKind parse_enum<PageTableKind>(std::string_view);
template KvLayout parse_enum<KvLayout>(std::string_view);
template Fp8ScaleKind parse_enum<Fp8ScaleKind>(std::string_view);
template Arch parse_enum<Arch>(std::string_view);
template Pipeline parse_enum<Pipeline>(std::string_view);

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::fp32: return 4;
    case DType::fp16: return 2;
    case DType::bf16: return 2;
    case DType::fp8_e4m3: return 1;
    case DType::fp8_e5m2: return 1;
    case DType::int32: return 4;
    case DType::int64: return 8;
    case DType::uint8: return 1;
  }
  return 0;
}

bool is_fp8(DType dtype) {
  return dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2;
}

DType default_out_dtype(DType dtype) {
  return is_fp8(dtype) ? DType::bf16 : dtype;
}

bool is_attention_dtype(DType dtype) {
  return dtype == DType::fp32 || dtype == DType::fp16 || dtype == DType::bf16 || is_fp8(dtype);
}

}  // namespace tilefmha
