#include "tilefmha/validate.hpp"

#include "core/validate_detail.hpp"

namespace tilefmha {

void validate(const Problem& problem) {
  using namespace validation;
  // Order matters: each check may rely on the fields the earlier ones accepted (enums before
  // names are printed, sizes and key lengths before page tables, page tables before views).
  check_enums(problem);
  check_sizes(problem);
  check_sequences(problem);
  check_family_paging(problem);
  check_page_table(problem);
  check_logits(problem);
  check_accumulate(problem);
  check_dropout(problem);
  check_fp8(problem);
  check_append(problem);
  check_split(problem);
  check_main_views(problem);
  check_backward_views(problem);
  check_key_capacity(problem);
  check_memory_space(problem);
  check_append_chain(problem);
}

}  // namespace tilefmha
