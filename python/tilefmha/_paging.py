"""Paged KV caches: the page pools' logical views and the page tables (vLLM block tables or
SGLang page lists) of one call."""

from dataclasses import dataclass

import numpy as np

from ._shapes import index_array, require_rank

LAYOUTS = ("nhd", "hnd")
_POOL_DIMS = ("[num_pages, page_size, nhead_k, hdim] (layout 'nhd') or "
              "[num_pages, nhead_k, page_size, hdim] (layout 'hnd')")


def page_pools(backend, k_cache, v_cache, layout, page_size):
    """K and V pools as the engine's logical [num_pages, page_size, nhead_k, hdim] views (an
    'hnd' pool is viewed with two axes swapped, never copied), and the page size."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout = {layout!r}: expected 'nhd' or 'hnd'")
    pools = []
    for field, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        pool = backend.tensor(cache, field)
        require_rank(pool, 4, field, _POOL_DIMS)
        pools.append(pool.swapaxes(1, 2) if layout == "hnd" else pool)
    held = int(pools[0].shape[1])
    if page_size is not None and int(page_size) != held:
        raise ValueError(f"page_size = {page_size} but k_cache holds pages of {held} tokens "
                         f"(layout {layout!r})")
    return pools[0], pools[1], held


@dataclass(frozen=True)
class PageTable:
    """Where each sequence's keys live: a vLLM block table or an SGLang page list."""

    layout: str
    page_size: int
    num_pages: int
    block_table: object = None  # int64 [batch, max_pages]
    page_indptr: object = None  # int64 [batch + 1]
    page_indices: object = None  # int64 [pages]

    @staticmethod
    def from_arguments(layout, page_size, num_pages, block_table=None, page_indptr=None,
                       page_indices=None):
        if block_table is not None:
            if page_indptr is not None or page_indices is not None:
                raise ValueError("pass either block_table or page_indptr + page_indices, not "
                                 "both")
            table = index_array(block_table, "block_table", 2)
            return PageTable(layout, page_size, num_pages, block_table=table)
        if page_indptr is None or page_indices is None:
            raise ValueError("a paged cache needs block_table [batch, max_pages] or "
                             "page_indptr [batch + 1] with page_indices")
        return PageTable(layout, page_size, num_pages,
                         page_indptr=index_array(page_indptr, "page_indptr", 1),
                         page_indices=index_array(page_indices, "page_indices", 1))

    def configure(self, problem):
        if self.block_table is not None:
            problem.set_block_table(self.layout, self.page_size, self.num_pages,
                                    _int32_list(self.block_table.reshape(-1), "block_table"),
                                    int(self.block_table.shape[1]))
        else:
            problem.set_page_list(self.layout, self.page_size, self.num_pages,
                                  self.page_indptr.tolist(),
                                  _int32_list(self.page_indices, "page_indices"))


def _int32_list(values, field):
    # Page numbers are int32 in the engine; larger ones would wrap silently.
    if values.size and (values.min() < np.iinfo(np.int32).min or
                        values.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{field} holds page numbers outside int32")
    return values.tolist()
