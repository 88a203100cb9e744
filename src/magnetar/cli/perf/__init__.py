"""``magnetar perf produce|consume|e2e``: a load generator modelled on ``pulsar-perf`` and the
OpenMessaging Benchmark, driving the official ``pulsar-client`` (the ``dev``/``bench`` extras).

* ``produce``: ``--producers`` producers per topic send ``--size``-byte messages at ``--rate``
  messages/s in total (0 = as fast as the pending queues allow), batched or not; the publish
  latency (``send_async`` to receipt, i.e. until the broker's durable ack) goes into an
  HdrHistogram.
* ``consume``: ``--consumers`` consumers per topic on one subscription receive and acknowledge;
  the end-to-end latency is read from the send timestamp ``perf produce`` puts in the first 8
  bytes of each payload (wall-clock ns, so producer and consumer must share a machine's clock).
* ``e2e``: both in one process; the consumers subscribe before the first send.

Topics are ``<topic>`` (``--topics 1``) or ``<topic>-0 .. <topic>-{N-1}``; with ``--partitions P``
each is addressed as its ``-partition-0 .. -partition-{P-1}`` topics, which is what a client of a
partitioned topic does underneath (so no admin call is needed). Every run is bounded by
``--duration`` and ``--messages`` (whichever comes first). Throughput counts what was
acknowledged (or received) within that window; messages still pending when it ends are
answered after it (up to ``PERF_DRAIN_S_MAX``) before the client closes: closing a producer with
SENDs in flight makes the broker's receipts for them arrive after the client dropped the producer,
which the official client logs as an ERROR per receipt (``Got invalid producer Id in SendReceipt``).
What is still pending after that is abandoned and reported as ``pending_at_end``, not as failures. In ``e2e``
the consumers then get up to ``PERF_DRAIN_S_MAX`` to receive what was acknowledged. Prints a live line per second (msgs/s,
MB/s, latency percentiles of the last second) and a summary; ``--json FILE`` writes the results
(settings, totals, p50/p95/p99/p99.9/max, per-second series, the client's CPU seconds and
microseconds per message). ``run_perf`` is the same run as a function for the benchmarks under
``bench/``.

The package: ``settings`` (what a run does, dealt to processes), ``stats`` (histograms, per-second
rows, printed lines), ``client`` (the official client and its cheap send path), ``run``
(``PerfRun``, one process), ``processes`` (``run_perf``, ``MultiRun`` and the child processes) and
``command`` (the ``magnetar perf`` command line).

The client's own cost per message bounds what one process can measure (one Python process
drives the official client through its GIL). Three measures keep it low:

* the send goes to the client's binding (``_pulsar``) under ``Producer.send_async``, skipping the
  wrapper's per-message argument checks;
* one receipt callback per producer (a bound method), the send times in a FIFO: the client
  answers one producer's sends in order;
* the client's threads keep their Python thread state (``_pin_thread_state``): pybind11 creates
  and deletes one around every callback it runs on a thread Python did not start, which maps
  and unmaps a frame stack (``mmap``/``munmap``) per message.

``--processes N`` runs N client processes (``multiprocessing``, spawn), each with its own client
and a share of the producers and consumers (round robin; with fewer producers than processes
each process still gets one, on the topics in turn), of ``--rate``, ``--messages`` and
``--max-outstanding``; they start measuring together, report every second to the parent, which
prints the live line and merges the results (counts summed, latency histograms merged from
their encodings). The children are stopped when the run ends, fails or is interrupted.
"""

from magnetar.cli.perf.command import register
from magnetar.cli.perf.processes import MultiRun, run_perf
from magnetar.cli.perf.run import PerfRun
from magnetar.cli.perf.settings import STAMP, PerfSettings, Share, split_settings, split_shares
from magnetar.cli.perf.stats import Latency, summary_lines

__all__ = [
    "STAMP",
    "Latency",
    "MultiRun",
    "PerfRun",
    "PerfSettings",
    "Share",
    "register",
    "run_perf",
    "split_settings",
    "split_shares",
    "summary_lines",
]
