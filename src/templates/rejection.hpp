// Why a kernel template cannot take a config or run a problem, as data: the field at fault and
// the sentence that names it, so callers rank and report without parsing text.
#pragma once

#include <string>

namespace tilefmha::templates {

// field: a KernelConfig or Problem field name ("hdim_q", "softmax_scale"); text: the whole
// sentence, naming the field and its value ("block_n = 40: must be a multiple of 16 in 16..128").
struct Rejection {
  std::string field;
  std::string text;
};

}  // namespace tilefmha::templates
