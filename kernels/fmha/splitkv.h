// Split-KV key ranges, computed on the device exactly as the host's tilefmha::splitkv_chunk
// does, so a kernel needs no per-sequence table of split boundaries. Plain C++ with no includes
// (constexpr functions are usable on the device), so host and kernel share the formula.
#pragma once

namespace tilefmha::fmha {

// Keys per split, rounded up to a multiple of kSplitKvGranule so no key block of up to 128 keys
// straddles two splits. Must match tilefmha::splitkv_chunk (include/tilefmha/problem.hpp).
constexpr int kSplitKvGranule = 128;

constexpr int splitkv_chunk(int key_length, int num_splits) {
  if (num_splits <= 1 || key_length <= 0) return key_length > 0 ? key_length : 1;
  const int per_split = (key_length + num_splits - 1) / num_splits;
  return (per_split + kSplitKvGranule - 1) / kSplitKvGranule * kSplitKvGranule;
}

// The keys [begin, end) that split `split` of a sequence of `key_length` keys covers; empty
// (begin == end == key_length) when the split lies past the end.
struct SplitKeyRange {
  int begin;
  int end;
};

constexpr SplitKeyRange split_key_range(int key_length, int num_splits, int split) {
  const int chunk = splitkv_chunk(key_length, num_splits);
  const long long first = (long long)split * chunk;
  const int begin = first < key_length ? int(first) : (key_length > 0 ? key_length : 0);
  const int end = begin + chunk < key_length ? begin + chunk : (key_length > 0 ? key_length : 0);
  return {begin, end};
}

}  // namespace tilefmha::fmha
