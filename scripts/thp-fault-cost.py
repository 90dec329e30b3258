#!/usr/bin/env python3
"""What backing fresh anonymous memory costs, with 4 KiB and with 2 MiB pages (session 35): maps
512 MiB (2 MiB-aligned), optionally advises it MADV_HUGEPAGE, then backs it 256 KiB per
MADV_POPULATE_WRITE, as the log backs a staged segment, and prints the total per MiB and the
median and largest call. Two rounds of each. The process keeps huge pages to advised ranges
(PR_THP_DISABLE_EXCEPT_ADVISED, as the node does; ignored by kernels before 6.18).

Usage: scripts/thp-fault-cost.py
"""
import ctypes
import time

MADV_HUGEPAGE = 14
MADV_POPULATE_WRITE = 23
PR_SET_THP_DISABLE = 41
PR_THP_DISABLE_EXCEPT_ADVISED = 2
MIB = 1 << 20
SIZE = 512 * MIB
STEP = 256 << 10

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0)


def one(huge):
    raw = libc.mmap(None, SIZE + 2 * MIB, 3, 0x22, -1, 0)  # PROT_READ|WRITE, PRIVATE|ANONYMOUS
    base = (raw + 2 * MIB - 1) & ~(2 * MIB - 1)
    if huge and libc.madvise(base, SIZE, MADV_HUGEPAGE) != 0:
        raise OSError(ctypes.get_errno(), "MADV_HUGEPAGE")
    calls = []
    for off in range(0, SIZE, STEP):
        t = time.perf_counter_ns()
        libc.madvise(base + off, STEP, MADV_POPULATE_WRITE)
        calls.append(time.perf_counter_ns() - t)
    libc.munmap(raw, SIZE + 2 * MIB)
    calls.sort()
    total_us = sum(calls) / 1e3
    print(f"{'2 MiB' if huge else '4 KiB'} pages: {total_us / (SIZE // MIB):.0f} us per MiB, "
          f"call p50 {calls[len(calls) // 2] / 1e3:.0f} us, max {calls[-1] / 1e3:.0f} us")


for huge in (False, True, False, True):
    one(huge)
