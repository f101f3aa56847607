"""N context-parallel ranks in one process, one thread each, on one GPU.

Stand-ins for tilefmha._ring.Ring and tilefmha._ulysses.Collective that move tensors between the
threads, so the ring and head-parallel drivers run their real schedules and kernels without a
second GPU. Messages match by the order in which each rank posts them, as NCCL's do.
"""

import threading

from gpu_support import torch


class SimulatedRanks:
    def __init__(self, world):
        self.world = world
        self._mail = {}
        self._arrived = threading.Condition()
        self._barrier = threading.Barrier(world)
        self._slots = [None] * world

    def run(self, task):
        """[task(rank) for every rank], run concurrently; re-raises the first failure."""
        results, failures = [None] * self.world, []

        def body(rank):
            try:
                results[rank] = task(rank)
            except BaseException as failure:  # noqa: BLE001 - handed to the caller
                failures.append(failure)
                self._barrier.abort()
                with self._arrived:
                    self._arrived.notify_all()

        threads = [threading.Thread(target=body, args=(rank,)) for rank in range(self.world)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        return results

    def ring(self, rank):
        return _Ring(self, rank)

    def collective(self, rank):
        return _Collective(self, rank)

    def _post(self, key, tensor):
        with self._arrived:
            self._mail[key] = tensor
            self._arrived.notify_all()

    def _take(self, key):
        with self._arrived:
            while key not in self._mail:
                if self._barrier.broken:
                    raise RuntimeError("another simulated rank failed")
                self._arrived.wait(timeout=1.0)
            return self._mail.pop(key)

    def _exchange(self, rank, outgoing):
        self._slots[rank] = outgoing
        self._barrier.wait()
        pieces = [self._slots[source][rank].clone() for source in range(self.world)]
        self._barrier.wait()
        return pieces


class _Request:
    def __init__(self, ranks, key, received):
        self.ranks, self.key, self.received = ranks, key, received

    def wait(self):
        self.received.copy_(self.ranks._take(self.key))


class _Ring:
    def __init__(self, ranks, rank):
        self.ranks, self.rank, self.world = ranks, rank, ranks.world
        self.posted = 0

    def pass_on(self, tensors, received):
        requests = []
        for tensor, arriving in zip(tensors, received):
            index, self.posted = self.posted, self.posted + 1
            # The clone is queued on this rank's current stream after the kernels that wrote
            # `tensor`; the receiving thread reads it on its own stream, so wait for it here.
            clone = tensor.clone()
            torch.cuda.current_stream().synchronize()
            self.ranks._post(((self.rank + 1) % self.world, index), clone)
            requests.append(_Request(self.ranks, (self.rank, index), arriving))
        return requests


class _Collective:
    def __init__(self, ranks, rank):
        self.ranks, self.rank, self.world = ranks, rank, ranks.world

    def all_to_all(self, incoming, outgoing):
        torch.cuda.synchronize()
        for source, piece in enumerate(self.ranks._exchange(self.rank, outgoing)):
            incoming[source].copy_(piece)
