#!/usr/bin/env python3
"""Whether this disk flushes two files at once (session 33): a 4 KiB pwrite + fdatasync on
one preallocated file, alone, against the same on two files started together by two threads
(the time until both returned). Prints the medians of 300 of each, twice. On a device that
serializes cache flushes, the pair takes about twice one.

Usage: scripts/fsync-pair.py [DIR]   (DIR default /work/tmp-fsync; two 64 MiB files, removed)
"""
import os
import shutil
import statistics
import sys
import threading
import time

DIR = sys.argv[1] if len(sys.argv) > 1 else "/work/tmp-fsync"
SIZE = 64 << 20
BLOCK = b"x" * 4096


def preallocated(n):
    fd = os.open(f"{DIR}/f{n}", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"\0" * SIZE, 0)
    os.fsync(fd)
    return fd


def write_sync(fd, i):
    os.pwrite(fd, BLOCK, (i % 1000) * 4096)
    os.fdatasync(fd)


def alone(fds, n=300):
    times = []
    for i in range(n):
        t = time.perf_counter()
        write_sync(fds[0], i)
        times.append(time.perf_counter() - t)
    return times


def pair(fds, n=300):
    times = []
    for i in range(n):
        start = threading.Barrier(3)
        threads = [
            threading.Thread(target=lambda k=k: (start.wait(), write_sync(fds[k], i)))
            for k in (0, 1)
        ]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        times.append(time.perf_counter() - t0)
    return times


def main():
    os.makedirs(DIR, exist_ok=True)
    try:
        fds = [preallocated(0), preallocated(1)]
        for _ in range(2):
            one, two = alone(fds), pair(fds)
            print(
                "alone p50 %.0f us, two files at once p50 %.0f us (%.2fx)"
                % (
                    statistics.median(one) * 1e6,
                    statistics.median(two) * 1e6,
                    statistics.median(two) / statistics.median(one),
                )
            )
    finally:
        shutil.rmtree(DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
