#include "run_size.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include "tilefmha/error.hpp"

namespace tilefmha::cli {
namespace {

// A tensor's size as the product of its dimensions. long double holds every product of a few
// int64 sizes without overflow (to about 19 significant digits), so the message can still
// say how large it was.
struct Need {
  std::string name;
  std::string dims;  // e.g. "[batch, seqlen_q, nhead_q, hdim_q] = [1, 4096, 8, 128]"
  long double bytes;
};

Need need(std::string name, std::initializer_list<std::pair<const char*, int64_t>> dims,
          DType dtype) {
  std::string names = "[", sizes = "[";
  long double bytes = static_cast<long double>(dtype_size(dtype));
  bool first = true;
  for (const auto& [dim, size] : dims) {
    names += (first ? "" : ", ") + std::string(dim);
    sizes += (first ? "" : ", ") + std::to_string(size);
    bytes *= static_cast<long double>(size);
    first = false;
  }
  return {std::move(name), names + "] = " + sizes + "]", bytes};
}

std::string bytes_text(long double bytes) {
  if (bytes < 9.2e18L) return std::to_string(static_cast<int64_t>(bytes));
  char text[32];
  std::snprintf(text, sizeof(text), "%.3Le", bytes);
  return text;
}

long double physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 9.2e18L;  // unknown: only the int64 bound applies
  return static_cast<long double>(pages) * static_cast<long double>(page_size);
}

std::vector<Need> run_tensors(const RunSpec& spec) {
  const Problem& p = spec.problem;
  const bool group = p.mode == Mode::group;
  const int64_t q_batch = group ? 1 : p.batch;
  const int64_t q_rows = group ? p.total_q() : p.seqlen_q;
  const int64_t k_rows = group ? total_keys(p) : p.seqlen_k;
  std::vector<Need> needs = {
      need("q",
           {{"batch", q_batch}, {"seqlen_q", q_rows}, {"nhead_q", p.nhead_q}, {"hdim_q", p.hdim_q}},
           p.dtype),
      need("o",
           {{"batch", q_batch}, {"seqlen_q", q_rows}, {"nhead_q", p.nhead_q}, {"hdim_v", p.hdim_v}},
           p.out_dtype)};
  if (p.is_paged()) {
    needs.push_back(need("k",
                         {{"num_pages", p.paged.num_pages},
                          {"page_size", p.paged.page_size},
                          {"nhead_k", p.nhead_k},
                          {"hdim_q", p.hdim_q}},
                         p.dtype));
    needs.push_back(need("v",
                         {{"num_pages", p.paged.num_pages},
                          {"page_size", p.paged.page_size},
                          {"nhead_k", p.nhead_k},
                          {"hdim_v", p.hdim_v}},
                         p.dtype));
  }
  // Paged runs without pool files also hold K and V as contiguous rows before scattering them.
  needs.push_back(need(
      "k", {{"batch", q_batch}, {"seqlen_k", k_rows}, {"nhead_k", p.nhead_k}, {"hdim_q", p.hdim_q}},
      p.dtype));
  needs.push_back(need(
      "v", {{"batch", q_batch}, {"seqlen_k", k_rows}, {"nhead_k", p.nhead_k}, {"hdim_v", p.hdim_v}},
      p.dtype));
  if (p.bias_kind == BiasKind::elementwise)
    needs.push_back(need("bias",
                         {{"batch", p.batch},
                          {"nhead_q", p.nhead_q},
                          {"seqlen_q", p.seqlen_q},
                          {"seqlen_k", p.seqlen_k}},
                         p.out_dtype));
  if (spec.stages == RunStages::splitkv)
    needs.push_back(need("split.o_acc",
                         {{"num_splits", p.split.num_splits},
                          {"batch", q_batch},
                          {"nhead_q", p.nhead_q},
                          {"seqlen_q", q_rows},
                          {"hdim_v", p.hdim_v}},
                         DType::fp32));
  if (spec.stages == RunStages::backward)
    needs.push_back(need(
        "bwd.dq_acc",
        {{"batch", q_batch}, {"seqlen_q", q_rows}, {"nhead_q", p.nhead_q}, {"hdim_q", p.hdim_q}},
        DType::fp32));
  if (spec.stages == RunStages::append)
    needs.push_back(need("append.k_new",
                         {{"batch", p.batch},
                          {"seqlen_knew", p.append.seqlen_knew},
                          {"nhead_k", p.nhead_k},
                          {"hdim_q", p.hdim_q}},
                         p.dtype));
  return needs;
}

}  // namespace

void check_run_size(const RunSpec& spec) {
  const long double memory = physical_memory();
  const std::string limit = "this machine's " + bytes_text(memory) + " bytes of memory";
  long double total = 0;
  for (const Need& n : run_tensors(spec)) {
    if (n.bytes >= 9.2e18L)
      throw Error(ErrorKind::invalid_argument, "problem too large: " + bytes_text(n.bytes) +
                                                   " bytes for " + n.name + " " + n.dims +
                                                   ", more than int64 can address");
    if (n.bytes > memory)
      throw Error(ErrorKind::invalid_argument, "problem too large: " + bytes_text(n.bytes) +
                                                   " bytes for " + n.name + " " + n.dims +
                                                   ", more than " + limit);
    total += n.bytes;
  }
  if (total > memory)
    throw Error(ErrorKind::invalid_argument, "problem too large: " + bytes_text(total) +
                                                 " bytes for q, k, v, o and the run's "
                                                 "other tensors together, more than " +
                                                 limit);
}

}  // namespace tilefmha::cli
