"""A contiguous K/V cache scattered over a shuffled page pool, with both page-table forms, for
the paged tests on the CPU and the GPU."""

import numpy as np


class PagedCache:
    """Contiguous K/V [batch, capacity, heads, dim] scattered over a shuffled page pool."""

    def __init__(self, rng, k, v, lengths, page_size, layout, spare_pages=2, fill=np.nan):
        """fill: the value of slots no sequence owns (NaN: a read of one shows in the
        result; integer codes such as fp8's need an integer)."""
        self.page_size, self.layout, self.fill = page_size, layout, fill
        batch, _, heads, dim = k.shape
        pages_of = [max(1, -(-(length + spare_pages * page_size) // page_size))
                    for length in lengths]
        order = rng.permutation(sum(pages_of))
        self.block_table = np.zeros((batch, max(pages_of)), dtype=np.int32)
        self.page_indptr = np.concatenate([[0], np.cumsum(pages_of)]).astype(np.int64)
        self.page_indices = order.astype(np.int32)
        self.block_table[:] = -1  # padding past a sequence's pages must never be read
        for b, count in enumerate(pages_of):
            self.block_table[b, :count] = order[self.page_indptr[b]:self.page_indptr[b + 1]]
        self.k_pool = self._scatter(k, lengths, len(order), heads, k.shape[3])
        self.v_pool = self._scatter(v, lengths, len(order), heads, v.shape[3])

    def _scatter(self, x, lengths, num_pages, heads, dim):
        pool = np.full((num_pages, self.page_size, heads, dim), self.fill, dtype=x.dtype)
        for b, length in enumerate(lengths):
            for j in range(length):
                pool[self.block_table[b, j // self.page_size], j % self.page_size] = x[b, j]
        # An 'hnd' pool is [num_pages, heads, page_size, dim] in memory.
        return np.ascontiguousarray(pool.swapaxes(1, 2)) if self.layout == "hnd" else pool

    def gather(self, pool, b, length):
        nhd = pool.swapaxes(1, 2) if self.layout == "hnd" else pool
        return np.stack([nhd[self.block_table[b, j // self.page_size], j % self.page_size]
                         for j in range(length)]) if length else nhd[:0, 0]
