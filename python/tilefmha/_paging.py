"""Paged KV caches: the page pools' logical views and the page tables (vLLM block tables or
SGLang page lists) of one call."""

from dataclasses import dataclass

import numpy as np

from ._backends import is_cuda
from ._shapes import index_array, index_list, require_rank

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
    checked: bool = False  # validate the call's device index arrays before the kernels run

    @staticmethod
    def from_arguments(layout, page_size, num_pages, block_table=None, page_indptr=None,
                       page_indices=None, on_device=False, checked=False):
        """The call's table: a DevicePageTable when `on_device` (a GPU call) and the table is a
        CUDA tensor, else host arrays (CUDA tables are then copied to the host). `checked`
        turns on the engine's checked mode for the call's device arrays (tables, lengths)."""
        if not isinstance(checked, bool):
            raise TypeError(f"check_tables = {checked!r} must be a bool")
        tables = (block_table, page_indptr, page_indices)
        if on_device and any(x is not None and is_cuda(x) for x in tables):
            return DevicePageTable.from_arguments(layout, page_size, num_pages, *tables,
                                                  checked=checked)
        if block_table is not None:
            if page_indptr is not None or page_indices is not None:
                raise ValueError("pass either block_table or page_indptr + page_indices, not "
                                 "both")
            table = index_array(block_table, "block_table", 2)
            return PageTable(layout, page_size, num_pages, block_table=table, checked=checked)
        if page_indptr is None or page_indices is None:
            raise ValueError("a paged cache needs block_table [batch, max_pages] or "
                             "page_indptr [batch + 1] with page_indices")
        return PageTable(layout, page_size, num_pages,
                         page_indptr=index_array(page_indptr, "page_indptr", 1),
                         page_indices=index_array(page_indices, "page_indices", 1),
                         checked=checked)

    def configure(self, problem):
        problem.set_checked_indices(self.checked)
        if self.block_table is not None:
            problem.set_block_table(self.layout, self.page_size, self.num_pages,
                                    _int32_list(self.block_table.reshape(-1), "block_table"),
                                    int(self.block_table.shape[1]))
        else:
            problem.set_page_list(self.layout, self.page_size, self.num_pages,
                                  self.page_indptr.tolist(),
                                  _int32_list(self.page_indices, "page_indices"))


def device_index(x, field, ndim, long):
    """A CUDA integer tensor as a contiguous int32 (or int64 with `long`) device copy."""
    if not is_cuda(x):
        raise ValueError(f"{field} must be on the GPU like the rest of the page table")
    if x.ndim != ndim or x.dtype.is_floating_point or x.dtype.is_complex:
        raise ValueError(f"{field} must be a {ndim}-D integer tensor, got {x.dtype} of shape "
                         f"{list(x.shape)}")
    return (x.long() if long else x.int()).contiguous()


@dataclass(frozen=True)
class DevicePageTable:
    """A page table that stays on the GPU (int32 page ids, int64 offsets): the kernels read it,
    nothing copies it to the host, so the call neither copies nor synchronizes. Its entries are
    trusted (validation cannot read them)."""

    layout: str
    page_size: int
    num_pages: int
    block_table: object = None  # int32 [batch, max_pages], contiguous
    page_indptr: object = None  # int64 [batch + 1]
    page_indices: object = None  # int32 [pages]
    checked: bool = False

    @staticmethod
    def from_arguments(layout, page_size, num_pages, block_table, page_indptr, page_indices,
                       checked=False):
        if block_table is not None:
            if page_indptr is not None or page_indices is not None:
                raise ValueError("pass either block_table or page_indptr + page_indices, not "
                                 "both")
            return DevicePageTable(layout, page_size, num_pages,
                                   block_table=device_index(block_table, "block_table", 2,
                                                             False), checked=checked)
        if page_indptr is None or page_indices is None:
            raise ValueError("a paged cache needs block_table [batch, max_pages] or "
                             "page_indptr [batch + 1] with page_indices")
        return DevicePageTable(layout, page_size, num_pages,
                               page_indptr=device_index(page_indptr, "page_indptr", 1, True),
                               page_indices=device_index(page_indices, "page_indices", 1, False),
                               checked=checked)

    def configure(self, problem):
        problem.set_checked_indices(self.checked)
        if self.block_table is not None:
            problem.set_block_table_on_device(self.layout, self.page_size, self.num_pages,
                                              self.block_table.data_ptr(),
                                              int(self.block_table.shape[1]))
        else:
            problem.set_page_list_on_device(self.layout, self.page_size, self.num_pages,
                                            self.page_indptr.data_ptr(),
                                            self.page_indices.data_ptr())


class DeviceKeyLengths:
    """Per-sequence key counts that stay on the GPU (an int64 copy of the caller's CUDA tensor)
    and the longest count, which the caller gives since the host cannot read it."""

    def __init__(self, seqlens_k, max_seqlen_k):
        if max_seqlen_k is None:
            raise ValueError("max_seqlen_k is required with seqlens_k on the GPU: reading the "
                             "longest sequence from device memory would synchronize")
        if isinstance(max_seqlen_k, bool) or int(max_seqlen_k) != max_seqlen_k or max_seqlen_k < 0:
            raise ValueError(f"max_seqlen_k = {max_seqlen_k!r} must be a non-negative int")
        self.lengths = device_index(seqlens_k, "seqlens_k", 1, True)
        self.max_seqlen_k = int(max_seqlen_k)

    def configure(self, problem):
        problem.set_key_lengths_on_device(self.lengths.data_ptr(), self.max_seqlen_k)


def key_lengths(seqlens_k, max_seqlen_k, on_device):
    """DeviceKeyLengths for a GPU call with CUDA seqlens_k, else the lengths as a host list."""
    if on_device and is_cuda(seqlens_k):
        return DeviceKeyLengths(seqlens_k, max_seqlen_k)
    return index_list(seqlens_k, "seqlens_k")


def _int32_list(values, field):
    # Page numbers are int32 in the engine; larger ones would wrap silently.
    if values.size and (values.min() < np.iinfo(np.int32).min or
                        values.max() > np.iinfo(np.int32).max):
        info = np.iinfo(np.int32)
        index = int(np.argmax((values < info.min) | (values > info.max)))
        raise ValueError(f"{field} holds page numbers outside int32: entry {index} (flattened) "
                         f"= {int(values[index])}")
    return values.tolist()
