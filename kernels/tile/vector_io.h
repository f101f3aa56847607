// 16-byte moves through shared and global memory (one ld.shared.v4 / st.global.v4 per lane), for
// epilogues that turn accumulator fragments into whole row chunks before they leave the SM.
#pragma once

#include "tile/device.h"

namespace tilefmha::tile {

TILEFMHA_DEVICE void load_shared_v4(u32 address, u32 (&value)[4]) {
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(value[0]), "=r"(value[1]), "=r"(value[2]), "=r"(value[3])
               : "r"(address)
               : "memory");
}

TILEFMHA_DEVICE void store_global_v4(void* address, const u32 (&value)[4]) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(address), "r"(value[0]),
               "r"(value[1]), "r"(value[2]), "r"(value[3])
               : "memory");
}

}  // namespace tilefmha::tile
