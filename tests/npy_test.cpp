#include "io/npy.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "tilefmha/error.hpp"

namespace tilefmha::io {
namespace {

std::vector<std::byte> as_bytes(std::string_view text) {
  std::vector<std::byte> out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

// Element bytes 0, 1, 2, ... so a round trip that permutes or drops bytes shows.
NpyArray counting_array(DType dtype, std::vector<int64_t> shape) {
  NpyArray array;
  array.dtype = dtype;
  array.shape = std::move(shape);
  array.bytes.resize(static_cast<size_t>(array.numel() * dtype_size(dtype)));
  for (size_t i = 0; i < array.bytes.size(); ++i)
    array.bytes[i] = static_cast<std::byte>((i * 7 + 3) & 0xff);
  return array;
}

// A .npy file as NumPy writes it: magic, version 1.0, header padded with spaces to a multiple
// of 64 bytes in all and ended by '\n', then the data.
std::vector<std::byte> numpy_file(std::string_view dict, std::string_view data, int version = 1) {
  const size_t length_bytes = version == 1 ? 2 : 4;
  std::string header(dict);
  const size_t unpadded = 8 + length_bytes + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string file = "\x93NUMPY";
  file += static_cast<char>(version);
  file += '\0';
  for (size_t i = 0; i < length_bytes; ++i)
    file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header;
  file += data;
  return as_bytes(file);
}

void expect_io_error(std::span<const std::byte> file, const std::string& fragment) {
  try {
    parse_npy(file, "probe.npy");
    FAIL() << "accepted a bad file; expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("probe.npy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Npy, RoundTripsEveryDtypeAndRank) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {0}, {3, 4}, {2, 3, 4, 5}, {2, 0, 3}};
  for (DType dtype : {DType::fp32, DType::fp16, DType::int32, DType::int64, DType::uint8}) {
    for (const auto& shape : shapes) {
      const NpyArray original = counting_array(dtype, shape);
      const auto file = encode_npy(original);
      EXPECT_EQ((file.size() - original.bytes.size()) % 64, 0u)
          << "the data must start at a multiple of 64 bytes";
      const NpyArray back = parse_npy(file, "mem");
      EXPECT_EQ(back.dtype, dtype);
      EXPECT_EQ(back.shape, shape);
      EXPECT_EQ(back.bytes, original.bytes);
    }
  }
}

TEST(Npy, WritesTheHeaderNumpyWrites) {
  // numpy.save of numpy.arange(6, dtype='<i4').reshape(2, 3).
  const std::string data = std::string("\0\0\0\0\1\0\0\0\2\0\0\0\3\0\0\0\4\0\0\0\5\0\0\0", 24);
  const auto expected =
      numpy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", data);
  NpyArray array;
  array.dtype = DType::int32;
  array.shape = {2, 3};
  array.bytes = as_bytes(data);
  EXPECT_EQ(encode_npy(array), expected);

  // One-element tuples keep their comma; scalars have an empty tuple.
  array.shape = {6};
  EXPECT_EQ(encode_npy(array),
            numpy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", data));
  array.shape = {};
  array.bytes.resize(4);
  EXPECT_EQ(encode_npy(array), numpy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (), }",
                                          data.substr(0, 4)));
}

TEST(Npy, ReadsVersionTwoAndFreeKeyOrder) {
  const std::string data(8, '\0');
  const auto file = numpy_file("{\"shape\": (1,2),'fortran_order':False, 'descr':'<f4'}", data, 2);
  const NpyArray array = parse_npy(file, "v2");
  EXPECT_EQ(array.dtype, DType::fp32);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(array.bytes.size(), 8u);
}

TEST(Npy, WritesVersionTwoWhenTheHeaderIsLong) {
  // A rank that makes the header exceed 65535 bytes needs the 4-byte length of version 2.0.
  NpyArray array;
  array.dtype = DType::uint8;
  array.shape.assign(30000, 1);
  array.bytes.resize(1);
  const auto file = encode_npy(array);
  EXPECT_EQ(std::to_integer<int>(file[6]), 2);
  EXPECT_EQ(parse_npy(file, "long").shape, array.shape);
}

TEST(Npy, RejectsCorruptAndTruncatedFiles) {
  const std::string data(24, '\0');
  const std::string_view good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const auto file = numpy_file(good, data);
  ASSERT_NO_THROW(parse_npy(file, "probe.npy"));

  expect_io_error(as_bytes("hello world, not an array"), "not a .npy file");
  expect_io_error(std::span(file).first(9), "not a .npy file");
  expect_io_error(std::span(file).first(40), "truncated header");
  expect_io_error(std::span(file).first(file.size() - 1), "truncated data");
  auto longer = file;
  longer.push_back(std::byte{0});
  expect_io_error(longer, "corrupt data");
  auto version = file;
  version[6] = std::byte{9};
  expect_io_error(version, "format version 9.0");

  expect_io_error(numpy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data),
                  "Fortran-order");
  expect_io_error(numpy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data),
                  "unsupported dtype descr '>f4'");
  expect_io_error(numpy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data),
                  "unsupported dtype descr '<f8'");
  expect_io_error(numpy_file("{'descr': '<f4', 'shape': (2, 3), }", data), "header lacks");
  expect_io_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", data),
                  "corrupt header");
  expect_io_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3) ", data),
                  "corrupt header");
  expect_io_error(numpy_file("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }", data),
                  "True or False");
  expect_io_error(
      numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", data),
      "unexpected header key 'x'");
  expect_io_error(numpy_file("{'descr': '<f4', 'fortran_order': False, 'shape': "
                             "(99999999999, 99999999999, 99999999999), }",
                             data),
                  "too large");
}

TEST(Npy, FilesRoundTripAndMissingFilesAreIoErrors) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "npy_test_files";
  std::filesystem::create_directories(dir);
  const NpyArray original = counting_array(DType::fp32, {2, 3, 4});
  write_npy(dir / "a.npy", original);
  const NpyArray back = read_npy(dir / "a.npy");
  EXPECT_EQ(back.shape, original.shape);
  EXPECT_EQ(back.bytes, original.bytes);

  try {
    read_npy(dir / "missing.npy");
    FAIL() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("missing.npy"), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST(Npy, ShapeStrings) {
  EXPECT_EQ(shape_string(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(shape_string(std::vector<int64_t>{2, 3, 4}), "[2, 3, 4]");
}

TEST(Npy, ADirectoryIsRefusedAsSuch) {
  // An ifstream opens a directory, whose "size" would then ask for an absurd buffer.
  const auto dir = std::filesystem::path(::testing::TempDir()) / "npy_test_dir.npy";
  std::filesystem::create_directories(dir);
  try {
    read_npy(dir);
    FAIL() << "read a directory as an array";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("npy_test_dir.npy: is a directory, not a .npy file"),
              std::string::npos)
        << e.what();
  }
  // A missing file is still "cannot open".
  EXPECT_THROW(read_npy(dir / "absent.npy"), Error);
}

}  // namespace
}  // namespace tilefmha::io
