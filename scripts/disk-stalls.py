#!/usr/bin/env python3
"""How often the disk stalls a durable write, with no database in the way (session 12).

Overwrites one 4 KiB block after another of a preallocated 64 MiB file in DIR, each followed
by fdatasync, for SECONDS, and lists every write + fdatasync that took longer than SLOW_US:
when it started (ms since the start) and how long it took, then the gaps between consecutive
slow ones. On this project's dev machine the slow ones come about every 512 ms (or a multiple
of it) and last 1-4 ms, whatever else runs: the paced storage bench's ack tail (issue 3) is
made of these stalls (BENCHMARKS.md, "Session 12").

Usage: scripts/disk-stalls.py [DIR (/tmp)] [SECONDS (6)] [SLOW_US (800)]
Run it on a quiet machine; anything else writing to the disk adds stalls of its own.
"""
import os
import sys
import time

BLOCK = 4096
FILE_BYTES = 64 << 20


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
    slow_us = float(sys.argv[3]) if len(sys.argv) > 3 else 800.0
    path = os.path.join(directory, f"disk-stalls.{os.getpid()}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        # Preallocate and make the size durable first, so each fdatasync below has no size
        # change to commit: only the data block and the device's cache flush.
        zeros = bytes(1 << 20)
        for _ in range(FILE_BYTES // len(zeros)):
            os.write(fd, zeros)
        os.fsync(fd)
        block = b"x" * BLOCK
        slow = []
        ops, offset = 0, 0
        start = time.monotonic()
        while (now := time.monotonic()) - start < seconds:
            os.pwrite(fd, block, offset)
            os.fdatasync(fd)
            took = time.monotonic() - now
            offset = (offset + BLOCK) % FILE_BYTES
            ops += 1
            if took * 1e6 > slow_us:
                slow.append(((now - start) * 1e3, took * 1e6))
    finally:
        os.close(fd)
        os.unlink(path)
    print(f"{ops} writes + fdatasyncs in {seconds:.0f} s, {len(slow)} over {slow_us:.0f} us")
    for at, took in slow:
        print(f"  at {at:9.1f} ms: {took:7.0f} us")
    gaps = [b[0] - a[0] for a, b in zip(slow, slow[1:])]
    if gaps:
        print("  gaps between them (ms): " + " ".join(f"{g:.0f}" for g in gaps))


if __name__ == "__main__":
    main()
