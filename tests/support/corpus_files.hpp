// Test support for the bad-input corpus: edits that turn a valid --save directory into a bad
// input (a file removed, replaced by a directory or by raw text, or rewritten as a .npy file of
// any descr, shape and length), and snapshots of a directory tree, to check that a refused run
// changed nothing.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace tilefmha::testing {

// Every regular file under `root` (relative path -> bytes) and every directory (-> "<dir>").
// An absent root snapshots as one entry "<absent>", so that "absent before and after" compares
// equal and any creation shows.
inline std::map<std::string, std::string> snapshot_tree(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> entries;
  if (!fs::exists(root)) {
    entries["."] = "<absent>";
    return entries;
  }
  if (!fs::is_directory(root)) {
    std::ifstream in(root, std::ios::binary);
    entries["."] = std::string(std::istreambuf_iterator<char>(in), {});
    return entries;
  }
  entries["."] = "<dir>";
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string name = fs::relative(entry.path(), root).string();
    if (entry.is_directory()) {
      entries[name] = "<dir>";
    } else {
      std::ifstream in(entry.path(), std::ios::binary);
      entries[name] = std::string(std::istreambuf_iterator<char>(in), {});
    }
  }
  return entries;
}

namespace corpus_detail {

// The bytes of one element of a little-endian descr ("<f4", "<f8", "<i4", "<i8", "|u1"...) for
// a JSON number (or "nan", "inf", "-inf" for floats).
inline std::string encode_element(const std::string& descr, const nlohmann::json& value) {
  double number = 0;
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    number = text == "nan"    ? std::numeric_limits<double>::quiet_NaN()
             : text == "inf"  ? INFINITY
             : text == "-inf" ? -INFINITY
                              : throw std::invalid_argument("bad element " + text);
  }
  std::string bytes;
  auto put = [&bytes](const auto& x) {
    bytes.append(reinterpret_cast<const char*>(&x), sizeof(x));
  };
  const std::string kind = descr.substr(1);
  if (kind == "f4") {
    put(value.is_string() ? static_cast<float>(number) : value.get<float>());
  } else if (kind == "f8") {
    put(value.is_string() ? number : value.get<double>());
  } else if (kind == "i4") {
    put(value.get<int32_t>());
  } else if (kind == "i8") {
    put(value.get<int64_t>());
  } else if (kind == "u8") {
    put(value.get<uint64_t>());
  } else {
    // Other descrs (a byte-swapped float, a complex type...) are written as zero bytes.
    const size_t size = std::stoul(descr.substr(2));
    bytes.assign(size, '\0');
  }
  return bytes;
}

// A .npy file, version 1.0: magic, header dict padded so that data starts on 64 bytes, data.
inline std::string encode_npy(const nlohmann::json& edit) {
  const std::string descr = edit.value("descr", "<f4");
  const std::vector<int64_t> shape = edit.at("shape").get<std::vector<int64_t>>();
  std::string tuple = "(";
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    tuple += (d ? ", " : "") + std::to_string(shape[d]);
    count *= shape[d];
  }
  tuple += shape.size() == 1 ? ",)" : ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " +
                     (edit.value("fortran_order", false) ? "True" : "False") +
                     ", 'shape': " + tuple + ", }";
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string file = "\x93NUMPY";
  file += '\x01';
  file += '\x00';
  const auto header_length = static_cast<uint16_t>(dict.size());
  file.append(reinterpret_cast<const char*>(&header_length), 2);
  file += dict;
  std::string data;
  if (edit.contains("values")) {
    for (const auto& value : edit["values"]) data += encode_element(descr, value);
  } else {
    const std::string one = encode_element(descr, edit.value("fill", nlohmann::json(0)));
    for (int64_t i = 0; i < count; ++i) data += one;
  }
  // "data_bytes" keeps only that many bytes of data: a truncated file.
  if (edit.contains("data_bytes")) data.resize(edit["data_bytes"].get<size_t>());
  return file + data;
}

}  // namespace corpus_detail

// Applies one edit (an object naming its file in its single action key) inside `dir`:
//   {"remove": "q.npy"}                       deletes the file
//   {"directory": "q.npy"}                    replaces it by an empty directory
//   {"text": "q.npy", "content": "..."}       replaces it by these bytes
//   {"npy": "q.npy", "descr": "<f4", "shape": [...], "values": [...] | "fill": x,
//    "fortran_order": false, "data_bytes": n} replaces it by a .npy file of that header and data
inline void apply_edit(const std::filesystem::path& dir, const nlohmann::json& edit) {
  namespace fs = std::filesystem;
  if (edit.contains("remove")) {
    fs::remove(dir / edit["remove"].get<std::string>());
  } else if (edit.contains("directory")) {
    const fs::path path = dir / edit["directory"].get<std::string>();
    fs::remove(path);
    fs::create_directory(path);
  } else if (edit.contains("text")) {
    std::ofstream(dir / edit["text"].get<std::string>(), std::ios::binary)
        << edit.at("content").get<std::string>();
  } else if (edit.contains("npy")) {
    std::ofstream(dir / edit["npy"].get<std::string>(), std::ios::binary)
        << corpus_detail::encode_npy(edit);
  } else {
    throw std::invalid_argument("unknown corpus edit " + edit.dump());
  }
}

}  // namespace tilefmha::testing
