"""Benchmark support and rank statistics.

The scripts in ``benchmarks/`` measure; this package holds what they share and what reads their results:

- :mod:`~jumbokit.benchmarking.timing`: warm-up, interleaved timed rounds, median and spread;
- :mod:`~jumbokit.benchmarking.steps`: the timed calls (training steps, MAE steps, the Jumbo vs registers pair);
- :mod:`~jumbokit.benchmarking.hostsync`: the host reads (GPU syncs) a call makes, recorded on a CPU;
- :mod:`~jumbokit.benchmarking.machine`: the machine record every result file carries;
- :mod:`~jumbokit.benchmarking.records`: result files (``<results>/<benchmark>_<variant>.json``, the folder named by
  the script, and its markdown copy ``.md``), each stamped with its command, git commit, times, CPU seconds, peak memory and seeds;
- :mod:`~jumbokit.benchmarking.tstrain`: ``tstrain`` for the time-series benchmarks, in the calling process or in a
  child process whose CPU seconds and peak memory are measured;
- :mod:`~jumbokit.benchmarking.stats`: ranks, Friedman's test, the Nemenyi critical difference, sign tests, the
  paired test that decides whether a target on a difference is met (scipy; aeon draws the critical-difference
  diagram);
- :mod:`~jumbokit.benchmarking.trunk_records`: the trunk benchmark's records (what it writes, what the rank tables
  read) and the rule for "the same runs";
- :mod:`~jumbokit.benchmarking.rank_tables` and :mod:`~jumbokit.benchmarking.rank_pool`: the mean-rank tables of
  the time-series results (run by ``benchmarks/timeseries_rank.py`` and ``timeseries_rank_pool.py``, which pass
  their results folder);
- :mod:`~jumbokit.benchmarking.fusion`: the probabilities of two sweeps' runs averaged pair by pair;
- :mod:`~jumbokit.benchmarking.archive`: models compared over many sets as the archive benchmarks report them (mean
  accuracy and rank, wins / ties / losses against MiniRocket, paired differences, the targets, peak memory), shared
  by ``benchmarks/ucr_archive.py`` (one seed) and ``benchmarks/ucr_seeds.py`` (several seeds' records together).
"""

from .machine import machine_record
from .records import dataset_slug, is_legacy, peak_rss_mib, result_path, results_folder, run_stamp, write_result
from .timing import Timing, time_interleaved
from .tstrain import run_tstrain

__all__ = ["dataset_slug", "Timing", "is_legacy", "machine_record", "peak_rss_mib", "result_path", "results_folder", "run_stamp",
           "run_tstrain", "time_interleaved", "write_result"]
