#include "io/npy.hpp"

#include <array>
#include <bit>
#include <cctype>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include "tilefmha/error.hpp"
#include "tilefmha/tensor.hpp"

namespace tilefmha::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".npy I/O copies little-endian element bytes as they are");

constexpr std::array<unsigned char, 6> kMagic = {0x93, 'N', 'U', 'M', 'P', 'Y'};
// NumPy aligns the start of the data to 64 bytes; readers accept any alignment.
constexpr size_t kHeaderAlignment = 64;

struct DescrName {
  DType dtype;
  std::string_view descr;
};
constexpr std::array<DescrName, 5> kDescrs = {{
    {DType::fp32, "<f4"},
    {DType::fp16, "<f2"},
    {DType::int32, "<i4"},
    {DType::int64, "<i8"},
    {DType::uint8, "|u1"},
}};

std::optional<std::string_view> descr_of(DType dtype) {
  for (const auto& entry : kDescrs)
    if (entry.dtype == dtype) return entry.descr;
  return std::nullopt;
}

[[noreturn]] void fail(std::string_view name, const std::string& what) {
  throw Error(ErrorKind::io, std::string(name) + ": " + what);
}

// The header dictionary, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// A small parser for exactly the Python literal subset NumPy writes there.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  struct Fields {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<std::vector<int64_t>> shape;
  };

  Fields parse() {
    Fields fields;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = parse_string();
      expect(':');
      if (key == "descr") {
        set_once(fields.descr, parse_string(), key);
      } else if (key == "fortran_order") {
        set_once(fields.fortran_order, parse_bool(), key);
      } else if (key == "shape") {
        set_once(fields.shape, parse_shape(), key);
      } else {
        bad("unexpected header key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') bad("expected ',' or '}'");
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) bad("trailing characters after the header dictionary");
    if (!fields.descr || !fields.fortran_order || !fields.shape)
      fail(name_,
           "header lacks one of 'descr', 'fortran_order', 'shape': '" + std::string(text_) + "'");
    return fields;
  }

 private:
  template <class T>
  void set_once(std::optional<T>& slot, T value, const std::string& key) {
    if (slot) bad("header key '" + key + "' appears twice");
    slot = std::move(value);
  }

  [[noreturn]] void bad(const std::string& what) const {
    fail(name_, "corrupt header (" + what + " at column " + std::to_string(pos_) + "): '" +
                    std::string(text_) + "'");
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void expect(char c) {
    skip_space();
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }

  std::string parse_string() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }

  bool parse_bool() {
    skip_space();
    for (const bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    bad("expected True or False");
  }

  int64_t parse_dimension() {
    skip_space();
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const int digit = text_[pos_] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) bad("dimension overflows");
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) bad("expected a non-negative dimension");
    // Python 2 era files may write long integers as 3L.
    if (peek() == 'L') ++pos_;
    return value;
  }

  std::vector<int64_t> parse_shape() {
    expect('(');
    std::vector<int64_t> shape;
    while (true) {
      skip_space();
      if (peek() == ')') break;
      shape.push_back(parse_dimension());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') bad("expected ',' or ')' in the shape");
    }
    ++pos_;
    return shape;
  }

  std::string_view text_;
  std::string_view name_;
  size_t pos_ = 0;
};

DType dtype_of_descr(const std::string& descr, std::string_view name) {
  for (const auto& entry : kDescrs)
    if (entry.descr == descr) return entry.dtype;
  std::string accepted;
  for (const auto& entry : kDescrs) {
    if (!accepted.empty()) accepted += ", ";
    accepted.append("'").append(entry.descr).append("'");
  }
  fail(name, "unsupported dtype descr '" + descr + "' (accepted: " + accepted +
                 "; only little-endian data is read)");
}

// Element count of a shape, or nullopt when it overflows int64.
std::optional<int64_t> element_count(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / dim) return std::nullopt;
    count *= dim;
  }
  return count;
}

uint32_t read_little_endian(std::span<const std::byte> bytes) {
  uint32_t value = 0;
  for (size_t i = bytes.size(); i-- > 0;)
    value = (value << 8) | std::to_integer<uint32_t>(bytes[i]);
  return value;
}

}  // namespace

int64_t NpyArray::numel() const {
  return element_count(shape).value_or(0);
}

bool npy_supports(DType dtype) {
  return descr_of(dtype).has_value();
}

NpyArray parse_npy(std::span<const std::byte> file, std::string_view name) {
  constexpr size_t kPreamble = kMagic.size() + 2;
  if (file.size() < kPreamble + 2 || std::memcmp(file.data(), kMagic.data(), kMagic.size()) != 0)
    fail(name, "not a .npy file (missing the \\x93NUMPY magic string or truncated before it)");
  const int major = std::to_integer<int>(file[6]);
  const int minor = std::to_integer<int>(file[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(name, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (accepted: 1.0, 2.0, 3.0)");
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (file.size() < kPreamble + length_bytes) fail(name, "truncated header length");
  const size_t header_length = read_little_endian(file.subspan(kPreamble, length_bytes));
  const size_t data_start = kPreamble + length_bytes + header_length;
  if (file.size() < data_start)
    fail(name, "truncated header: it claims " + std::to_string(header_length) +
                   " bytes but the file has " + std::to_string(file.size()) + " in all");
  const std::string_view header(
      reinterpret_cast<const char*>(file.data()) + kPreamble + length_bytes, header_length);
  const auto fields = HeaderParser(header, name).parse();

  if (*fields.fortran_order)
    fail(name,
         "Fortran-order arrays are not supported; save a C-order array "
         "(numpy.ascontiguousarray)");
  NpyArray array;
  array.dtype = dtype_of_descr(*fields.descr, name);
  array.shape = *fields.shape;
  const auto count = element_count(array.shape);
  const int64_t item = dtype_size(array.dtype);
  if (!count || *count > std::numeric_limits<int64_t>::max() / item)
    fail(name, "shape " + shape_string(array.shape) + " is too large");
  const uint64_t data_bytes = static_cast<uint64_t>(*count * item);
  const uint64_t available = file.size() - data_start;
  if (available != data_bytes)
    fail(name, std::string(available < data_bytes ? "truncated" : "corrupt") + " data: shape " +
                   shape_string(array.shape) + " of '" + *fields.descr + "' needs " +
                   std::to_string(data_bytes) + " bytes but the file holds " +
                   std::to_string(available));
  array.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(data_start), file.end());
  return array;
}

std::vector<std::byte> encode_npy(const NpyArray& array) {
  const auto descr = descr_of(array.dtype);
  if (!descr)
    throw Error(ErrorKind::invalid_argument,
                "dtype " + std::string(to_string(array.dtype)) + " cannot be written to .npy");
  const auto count = element_count(array.shape);
  if (!count || static_cast<uint64_t>(*count * dtype_size(array.dtype)) != array.bytes.size())
    throw Error(ErrorKind::invalid_argument, "npy array of shape " + shape_string(array.shape) +
                                                 " and dtype " +
                                                 std::string(to_string(array.dtype)) + " holds " +
                                                 std::to_string(array.bytes.size()) + " bytes");

  std::string dict = "{'descr': '" + std::string(*descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t d = 0; d < array.shape.size(); ++d) {
    dict += std::to_string(array.shape[d]);
    if (d + 1 < array.shape.size() || array.shape.size() == 1) dict += ",";
    if (d + 1 < array.shape.size()) dict += " ";
  }
  dict += "), }";

  auto padded_length = [&](size_t length_bytes) {
    const size_t unpadded = kMagic.size() + 2 + length_bytes + dict.size() + 1;  // + '\n'
    return dict.size() + 1 + (kHeaderAlignment - unpadded % kHeaderAlignment) % kHeaderAlignment;
  };
  const bool version1 = padded_length(2) <= std::numeric_limits<uint16_t>::max();
  const size_t length_bytes = version1 ? 2 : 4;
  const size_t header_length = padded_length(length_bytes);
  std::string header = dict;
  header.resize(header_length - 1, ' ');
  header += '\n';

  std::vector<std::byte> out;
  out.reserve(kMagic.size() + 2 + length_bytes + header.size() + array.bytes.size());
  for (unsigned char c : kMagic) out.push_back(std::byte{c});
  out.push_back(std::byte{static_cast<unsigned char>(version1 ? 1 : 2)});
  out.push_back(std::byte{0});
  for (size_t i = 0; i < length_bytes; ++i)
    out.push_back(std::byte{static_cast<unsigned char>((header_length >> (8 * i)) & 0xff)});
  for (char c : header) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), array.bytes.begin(), array.bytes.end());
  return out;
}

NpyArray read_npy(const std::filesystem::path& path) {
  // An ifstream opens a directory (or a FIFO) without complaint, and its "size" then asks for
  // an absurd buffer; only regular files hold arrays.
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (status.type() == std::filesystem::file_type::directory)
    throw Error(ErrorKind::io, path.string() + ": is a directory, not a .npy file");
  if (!error && status.type() != std::filesystem::file_type::regular &&
      status.type() != std::filesystem::file_type::not_found)
    throw Error(ErrorKind::io, path.string() + ": not a regular file, so not a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, path.string() + ": cannot open for reading");
  std::vector<std::byte> bytes;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size < 0) throw Error(ErrorKind::io, path.string() + ": cannot determine the file size");
  bytes.resize(static_cast<size_t>(size));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size))
    throw Error(ErrorKind::io, path.string() + ": read failed");
  return parse_npy(bytes, path.string());
}

void write_npy(const std::filesystem::path& path, const NpyArray& array) {
  const auto bytes = encode_npy(array);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorKind::io, path.string() + ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) throw Error(ErrorKind::io, path.string() + ": write failed");
}

std::string shape_string(std::span<const int64_t> shape) {
  return tilefmha::shape_text(shape);
}

}  // namespace tilefmha::io
