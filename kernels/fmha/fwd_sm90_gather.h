// Key blocks gathered row by row from a paged cache whose pages are smaller than a swizzle atom
// (1..7 keys): a TMA box of such a page would not start on a whole 1024-byte atom, and a box per
// key would queue ~128 descriptors per panel in one TMA unit. Instead the producer warpgroup's
// 128 threads copy 16-byte chunks with cp.async into the same 128B-swizzled panels that TMA
// writes, and each thread's copies arrive on the stage's full barrier as they land
// (cp.async.mbarrier.arrive.noinc): that barrier then expects one arrival per producer thread
// instead of TMA's transaction bytes.
#pragma once

#include "fmha/fwd_params.h"
#include "fmha/fwd_sm90_shape.h"
#include "fmha/paged_kv.h"
#include "tile/cp_async.h"
#include "tile/device.h"

namespace tilefmha::fmha {

constexpr int kSm90GatherThreads = kSm90WarpgroupThreads;

// cp.async with no "memory" clobber: the page-id loads around it may be scheduled ahead of it,
// since nothing in shared memory that they read is written here; the full barrier orders the
// copies for the consumers.
TILEFMHA_DEVICE void sm90_gather_chunk(tile::u32 destination, const void* source, bool real) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(real ? 16u : 0u));
}

// Arrives on `barrier` once every cp.async this thread issued so far has landed.
TILEFMHA_DEVICE void sm90_gather_arrive(tile::u32 barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

// Rows [key_begin, key_begin + BlockN) of one KV head into `panels` 64-column panels at
// `destination`. Each warp takes 32-row groups in turn; a lane reads its row's page id once and
// the warp's lanes then share it by shuffle, so that a warp's copies cover whole rows (16-byte
// chunks, consecutive lanes on consecutive chunks) and no lane waits on more than one page-id
// load. Rows at or past the sequence's keys are not read (their table entries are not the
// sequence's); columns past the real head dim are zero-filled, as TMA fills them. The producer
// runs on 24 registers, so only the page id (32 bits) crosses lanes and each chunk's 64-bit
// offset is formed where it is used.
template <class Traits, int kPanels>
TILEFMHA_DEVICE void sm90_gather_block(tile::u32 destination, int panel_bytes,
                                       const typename Traits::Element* head_pool,
                                       const TokenStrides& strides, const PagedKeys& keys,
                                       int key_begin, int len_k, int hdim, int thread,
                                       tile::u32 full) {
  using Element = typename Traits::Element;
  constexpr int kChunkElements = 16 / int(sizeof(Element));
  constexpr int kChunksPerPanelRow = kSm90RowBytes / 16;
  const int lane = thread & 31;
  constexpr int chunks_per_row = kPanels * kChunksPerPanelRow;
  // Page sizes are powers of two (validation), so the slot is a mask.
  const int slot_mask = int(keys.page_size) - 1;
  for (int group = (thread >> 5) * 32; group < Traits::kBlockN; group += kSm90GatherThreads) {
    const int my_key = key_begin + group + lane;
    const int my_page =
        my_key < len_k && group + lane < Traits::kBlockN ? keys.pages[my_key / keys.page_size] : -1;
    // chunks_per_row is a multiple of 8 and the group has 32 rows, so every lane runs the same
    // number of steps and the shuffles see the whole warp.
    for (int index = lane; index < 32 * chunks_per_row; index += 32) {
      const int row = index / chunks_per_row;
      const int page = __shfl_sync(0xffffffffu, my_page, row);
      if (page < 0) continue;
      const int chunk = index - row * chunks_per_row;
      const int block_row = group + row;
      const tile::u32 target = destination + tile::u32((chunk / kChunksPerPanelRow) * panel_bytes) +
                               tile::u32(block_row * kSm90RowBytes) +
                               tile::u32(((chunk % kChunksPerPanelRow) ^ (block_row & 7)) * 16);
      const int column = chunk * kChunkElements;
      const bool real = column < hdim;
      const long long offset =
          page * strides.batch + ((key_begin + block_row) & slot_mask) * strides.seq + column;
      sm90_gather_chunk(target, head_pool + (real ? offset : 0), real);
    }
  }
  sm90_gather_arrive(full);
}

}  // namespace tilefmha::fmha
