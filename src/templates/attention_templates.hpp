// The attention kernel templates (families fwd and fwd_splitkv on each pipeline, the paged
// families on sm80_mma, the split-KV combine, append-KV and the three backward stages), one
// file per pipeline; the table (template_table.cpp) lists them.
#pragma once

#include "templates/kernel_template.hpp"

namespace tilefmha::templates {

const KernelTemplate& fwd_sm90_template();
const KernelTemplate& fwd_sm80_template();
const KernelTemplate& fwd_simt_template();
const KernelTemplate& splitkv_sm90_template();
const KernelTemplate& splitkv_sm80_template();
const KernelTemplate& pagedkv_sm90_template();
const KernelTemplate& pagedkv_sm80_template();
const KernelTemplate& batch_prefill_sm90_template();
const KernelTemplate& batch_prefill_sm80_template();
const KernelTemplate& combine_template();
const KernelTemplate& appendkv_template();
const KernelTemplate& bwd_dot_do_o_template();
const KernelTemplate& bwd_dq_dk_dv_sm80_template();
const KernelTemplate& bwd_dq_dk_dv_sm90_template();
const KernelTemplate& bwd_convert_dq_template();

}  // namespace tilefmha::templates
