"""tilefmha.ring_schedule, the plan of context parallelism's ring, on the CPU: its blocks cover
every attended (query, key) pair of the whole sequence exactly once, and a ring walked with the
CPU backend and merge_states equals attention over the whole sequence."""

import numpy as np
import pytest

import tilefmha


def chunk_rows(world, rank, part, chunk):
    """Global rows of a part ('all', 'front', 'back') of rank `rank`'s zigzag shard."""
    front = list(range(rank * chunk, (rank + 1) * chunk))
    back_index = 2 * world - 1 - rank
    back = list(range(back_index * chunk, (back_index + 1) * chunk))
    return {"all": front + back, "front": front, "back": back}[part]


@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("packed", [False, True], ids=["batch", "packed"])
def test_blocks_cover_every_attended_pair_once(world, causal, packed):
    chunk = 3
    seq = 2 * world * chunk
    covered = np.zeros((seq, seq), dtype=int)
    for rank in range(world):
        steps = tilefmha.ring_schedule(world, rank, causal=causal, packed=packed)
        assert [source for source, _ in steps] == [(rank - i) % world for i in range(world)]
        for source, blocks in steps:
            for queries, keys, block_causal in blocks:
                assert not (packed and "all" in (queries, keys))
                rows = chunk_rows(world, rank, queries, chunk)
                columns = chunk_rows(world, source, keys, chunk)
                for i, row in enumerate(rows):
                    for j, column in enumerate(columns):
                        if not block_causal or j <= i:
                            covered[row, column] += 1
    expected = np.tril(np.ones((seq, seq), dtype=int)) if causal else np.ones((seq, seq), int)
    np.testing.assert_array_equal(covered, expected)


def test_a_walked_ring_equals_attention_over_the_whole_sequence():
    world, chunk, heads, dim = 3, 8, 2, 16
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 2 * world * chunk, heads, dim)).astype(np.float32)
               for _ in range(3))
    expected, expected_lse = tilefmha.attention(q, k, v, causal=True, return_lse=True)
    for rank in range(world):
        rows = chunk_rows(world, rank, "all", chunk)
        states = []  # per query row of the shard: partial (o, lse) over the rows it covers
        for source, blocks in tilefmha.ring_schedule(world, rank, causal=True):
            for queries, keys, block_causal in blocks:
                query_rows = chunk_rows(world, rank, queries, chunk)
                key_rows = chunk_rows(world, source, keys, chunk)
                o, lse = tilefmha.attention(q[:, query_rows], k[:, key_rows], v[:, key_rows],
                                            causal=block_causal, return_lse=True)
                full_o = np.zeros((2, len(rows), heads, dim), np.float32)
                full_lse = np.full((2, heads, len(rows)), -np.inf, np.float32)
                at = [rows.index(r) for r in query_rows]
                full_o[:, at], full_lse[:, :, at] = o, lse
                states.append((full_o, full_lse))
        o, lse = tilefmha.merge_states(np.stack([s[0] for s in states]),
                                       np.stack([s[1] for s in states]))
        np.testing.assert_allclose(o, expected[:, rows], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lse, expected_lse[:, :, rows], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("world, rank, message", [(0, 0, "world = 0"), (2, 2, "rank = 2"),
                                                  (3, -1, "rank = -1")])
def test_bad_rings_are_refused_naming_the_argument(world, rank, message):
    with pytest.raises(ValueError, match=message):
        tilefmha.ring_schedule(world, rank)
