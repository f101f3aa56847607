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

// The page ids of the rows one producer thread looks up in a key block: thread t holds row
// t + 128 g's (g < kGroups), so that warp w's lanes hold the page ids of rows w * 32 + 128 g
// + [0, 32), the 32-row groups it copies. (Reading them a block ahead of the slot wait, and
// keeping them for the block's V load, measured no faster: 2026-11-27, docs/performance.md.)
template <class Traits>
struct Sm90GatherPages {
  static constexpr int kGroups = (Traits::kBlockN + kSm90GatherThreads - 1) / kSm90GatherThreads;
  int id[kGroups];

  // Rows at or past the sequence's keys get -1: their table entries are not the sequence's.
  TILEFMHA_DEVICE void fetch(const PagedKeys& keys, int key_begin, int len_k, int thread) {
    // Page sizes are powers of two (validation), so the page of a key is a shift away.
    const int page_shift = __ffs(int(keys.page_size)) - 1;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int row = g * kSm90GatherThreads + thread;
      const int key = key_begin + row;
      id[g] = row < Traits::kBlockN && key < len_k ? keys.pages[key >> page_shift] : -1;
    }
  }
};

// Rows [key_begin, key_begin + BlockN) of one KV head into `panels` 64-column panels at
// `destination`, their page ids in `pages`. Each warp copies its 32-row groups: a lane forms
// its own row's offset in the pool once, and each copy step takes the offset of the row it
// copies from the lane that holds it by shuffle, so that a warp's copies cover whole rows
// (16-byte chunks, consecutive lanes on consecutive chunks) and a chunk costs a shuffle, an
// add and its address in shared memory. Profiled on a compute-bound prefill, the producer's
// instructions per chunk were what starved the consumers (a 64-bit multiply and a shuffle per
// chunk, some 40 instructions). Rows past the sequence's keys (page id -1) are zero-filled
// without a read, as are columns past the real head dim, as TMA fills them.
template <class Traits, int kPanels>
TILEFMHA_DEVICE void sm90_gather_block(tile::u32 destination, int panel_bytes,
                                       const typename Traits::Element* head_pool,
                                       const TokenStrides& strides,
                                       const Sm90GatherPages<Traits>& pages, int page_size,
                                       int key_begin, int hdim, int thread, tile::u32 full) {
  using Element = typename Traits::Element;
  constexpr int kChunkElements = 16 / int(sizeof(Element));
  constexpr int kChunksPerPanelRow = kSm90RowBytes / 16;
  constexpr int kChunksPerRow = kPanels * kChunksPerPanelRow;
  const int lane = thread & 31;
  const int slot_mask = page_size - 1;  // page sizes are powers of two
#pragma unroll
  for (int g = 0; g < Sm90GatherPages<Traits>::kGroups; ++g) {
    const int group = g * kSm90GatherThreads + (thread >> 5) * 32;
    if (group >= Traits::kBlockN) break;  // the same for every lane of the warp
    const int my_page = pages.id[g];
    const long long my_row =
        my_page < 0
            ? -1
            : my_page * strides.batch + ((key_begin + group + lane) & slot_mask) * strides.seq;
    // 32 rows of kChunksPerRow chunks: kChunksPerRow steps of one chunk per lane.
#pragma unroll 4
    for (int step = 0; step < kChunksPerRow; ++step) {
      const int index = step * 32 + lane;
      const int row = index / kChunksPerRow;
      const int chunk = index % kChunksPerRow;
      const long long source = __shfl_sync(0xffffffffu, my_row, row);
      const int block_row = group + row;
      const tile::u32 target = destination + tile::u32((chunk / kChunksPerPanelRow) * panel_bytes) +
                               tile::u32(block_row * kSm90RowBytes) +
                               tile::u32(((chunk % kChunksPerPanelRow) ^ (block_row & 7)) * 16);
      const int column = chunk * kChunkElements;
      const bool real = source >= 0 && column < hdim;
      sm90_gather_chunk(target, head_pool + (real ? source + column : 0), real);
    }
  }
  sm90_gather_arrive(full);
}

}  // namespace tilefmha::fmha
