"""Many seeds of scenario ``cluster``, optionally spread over worker processes.

Used by ``magnetar sim --scenario cluster --seeds A-B --jobs N`` (``make sim-soak``) and by the
suite's 200-seed test. Every seed is a world of its own, built from nothing but the seed and the
options, so a seed's verdict does not depend on which process runs it or on what ran before it
there (the determinism tests check the trace of one seed across processes and hash seeds): N
workers running disjoint seeds give exactly the verdicts one process would, N times sooner on N
idle cores. Workers are fresh interpreters (``spawn``), never forks of a process that may hold
threads or a running loop.

The seeds go out in chunks (``chunk_size``), at most two per worker in flight; ``should_stop``
(a time limit) is asked before each chunk is handed out, so a soak stops starting new seeds and
finishes the chunks it started. Results come back chunk by chunk (``on_result`` sees each seed
as its chunk ends); the report's failed seeds are sorted.

This module orchestrates runs; it is never part of one (no world, no virtual time here).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from collections.abc import Callable, Iterator, Sequence

from magnetar.base.errors import InvalidArgumentError
from magnetar.sim.scenarios.cluster import (
    ClusterOptions,
    ClusterResult,
    SoakReport,
    new_world,
    run_cluster_result,
)

#: At most this many worker processes (the machine's cores are shared).
JOBS_MAX = 16
CHUNK_SIZE_DEFAULT = 20

SeedResult = tuple[int, ClusterResult]


def run_chunk(seeds: Sequence[int], options: ClusterOptions) -> list[SeedResult]:
    """Run ``seeds`` one after the other in this process."""
    return [(seed, run_cluster_result(new_world(seed), options)) for seed in seeds]


def _chunks(seeds: Sequence[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(seeds), size):
        yield list(seeds[start:start + size])


def run_many(
    seeds: Sequence[int],
    options: ClusterOptions,
    *,
    jobs: int = 1,
    chunk_size: int = CHUNK_SIZE_DEFAULT,
    should_stop: Callable[[], bool] = lambda: False,
    on_result: Callable[[int, ClusterResult], None] | None = None,
) -> SoakReport:
    """Run every seed of ``seeds`` (``jobs`` worker processes; 1: in this process)."""
    if not 1 <= jobs <= JOBS_MAX:
        raise InvalidArgumentError(f"jobs must be 1..{JOBS_MAX}, got {jobs}")
    if chunk_size < 1:
        raise InvalidArgumentError(f"chunk_size must be >= 1, got {chunk_size}")
    report = SoakReport()

    def take(results: list[SeedResult]) -> None:
        for seed, result in results:
            report.add(seed, result)
            if on_result is not None:
                on_result(seed, result)

    chunks = _chunks(seeds, chunk_size)
    if jobs == 1:
        for chunk in chunks:
            if should_stop():
                break
            take(run_chunk(chunk, options))
    else:
        _run_in_workers(chunks, options, jobs, should_stop, take)
    report.failed_seeds.sort()
    return report


def _run_in_workers(chunks: Iterator[list[int]], options: ClusterOptions, jobs: int,
                    should_stop: Callable[[], bool], take: Callable[[list[SeedResult]], None]) -> None:
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context)
    try:
        running: set[concurrent.futures.Future[list[SeedResult]]] = set()
        exhausted = False
        while True:
            while not exhausted and len(running) < 2 * jobs:
                chunk = next(chunks, None)
                if chunk is None or should_stop():
                    exhausted = True
                    break
                running.add(pool.submit(run_chunk, chunk, options))
            if not running:
                return
            done, running = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                take(future.result())
    finally:
        # Interrupted (a test's timeout, ^C): chunks not started are dropped; each worker ends
        # after the chunk it runs.
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["CHUNK_SIZE_DEFAULT", "JOBS_MAX", "SeedResult", "run_chunk", "run_many"]
