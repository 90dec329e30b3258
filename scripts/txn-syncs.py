#!/usr/bin/env python3
"""Counts the fdatasyncs on the critical path of Tessera commits (issue 5, item 8).

Usage (scripts/bench-txn-vs-postgres.sh runs it):
  perf record -k mono -o PERF_DATA -p TESSERA_PID \
      -e io_uring:io_uring_submit_req --filter 'opcode == 3' \
      -e syscalls:sys_enter_fdatasync -e syscalls:sys_enter_fsync -- \
      python3 scripts/txn-syncs.py run URL N WINDOWS_JSON
  python3 scripts/txn-syncs.py count PERF_DATA WINDOWS_JSON

`run` connects with psycopg (autocommit off: psycopg sends BEGIN itself) and performs, one at a
time, N each of: a cross-executor transfer (two documents with explicit shards `$@N` in the
first fragment of executor 0 and the first fragment of another executor, from SHOW
FRAGMENTS), a single-fragment transfer (two documents on one shard) and an autocommit UPDATE.
Around each COMMIT (and around the autocommit UPDATE) it reads CLOCK_MONOTONIC, the clock
`perf record -k mono` stamps events with, and writes those windows to WINDOWS_JSON. Between
operations it idles briefly, so syncs that finish a commit in the background (after the
reply) fall outside the next window instead of into it.

`count` reads the perf events (glommio issues fdatasync as io_uring IORING_OP_FSYNC, so strace
would miss them; direct fdatasync/fsync calls are counted too), pairs each FSYNC submission with
its completion, and reports per kind: syncs submitted inside the window (between sending COMMIT
and receiving its reply), the sequential rounds those that also completed inside it form
(overlapping syncs, e.g. two participants' PREPAREs in parallel, are one round: this is the
number of fdatasync latencies the commit can have waited for in a row, an upper bound of its
critical path), and syncs submitted after the reply (finishing the commit in the background).
"""

import json
import subprocess
import sys
import time

PAUSE_SECS = 0.02


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def run(url, n, windows_path):
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    rows = conn.execute("SHOW FRAGMENTS").fetchall()
    # (fragment, "[start, end)", executor, documents, bytes)
    first_of = {}
    for _, shards, executor, *_ in rows:
        start = int(shards.strip("[)").split(",")[0])
        first_of.setdefault(executor, start)
    executors = sorted(first_of)
    if len(executors) < 2:
        sys.exit("txn-syncs: the node has one executor; a cross-executor transfer needs two")
    a, b = first_of[executors[0]], first_of[executors[1]]
    docs = {
        "x0": f"sync/x0$@{a}",
        "x1": f"sync/x1$@{b}",
        "s0": f"sync/s0$@{a + 1}",
        "s1": f"sync/s1$@{a + 1}",
        "w": f"sync/w$@{a + 2}",
    }
    for d in docs.values():
        conn.execute(
            "INSERT INTO sync_probe VALUES (%s, '{\"balance\": 1000000}') ON CONFLICT (id) DO NOTHING",
            (d,),
        )
    time.sleep(0.5)

    windows = {"cross-fragment": [], "single-fragment": [], "autocommit": []}
    debit = "UPDATE sync_probe SET balance = balance - 1 WHERE id() = %s"
    credit = "UPDATE sync_probe SET balance = balance + 1 WHERE id() = %s"
    for _ in range(n):
        for kind, (x, y) in (("cross-fragment", ("x0", "x1")), ("single-fragment", ("s0", "s1"))):
            conn.execute("BEGIN")
            conn.execute(debit, (docs[x],))
            conn.execute(credit, (docs[y],))
            t0 = now()
            conn.execute("COMMIT")
            t1 = now()
            windows[kind].append((t0, t1))
            time.sleep(PAUSE_SECS)
        t0 = now()
        conn.execute(debit, (docs["w"],))
        t1 = now()
        windows["autocommit"].append((t0, t1))
        time.sleep(PAUSE_SECS)
    with open(windows_path, "w") as f:
        json.dump({"first": windows["cross-fragment"][0][0], "last": now(), "windows": windows}, f)


def sync_intervals(perf_data):
    """(submit, complete) times of every sync the process issued: io_uring FSYNC submissions
    paired with their completions (by ring and user_data), and direct fdatasync/fsync calls
    (entry to exit)."""
    script = subprocess.run(
        ["perf", "script", "-i", perf_data, "-F", "time,event,trace"],
        check=True, capture_output=True, text=True,
    ).stdout
    pending = {}
    intervals = []
    for line in script.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].endswith(":"):
            continue
        t = float(parts[0].rstrip(":"))
        event = parts[1].rstrip(":")
        fields = dict(zip(parts[2::2], (v.rstrip(",") for v in parts[3::2])))
        if event == "io_uring:io_uring_submit_req" and fields.get("opcode") == "FSYNC":
            pending[("uring", fields.get("ring"), fields.get("user_data"))] = t
        elif event == "io_uring:io_uring_complete":
            key = ("uring", fields.get("ring"), fields.get("user_data"))
            if key in pending:
                intervals.append((pending.pop(key), t))
        elif event in ("syscalls:sys_enter_fdatasync", "syscalls:sys_enter_fsync"):
            intervals.append((t, t))
    return sorted(intervals)


def rounds(intervals):
    """The sequential groups the intervals form (overlapping ones merged), as (start, end)."""
    out = []
    for start, stop in intervals:
        if not out or start > out[-1][1]:
            out.append([start, stop])
        else:
            out[-1][1] = max(out[-1][1], stop)
    return out


def count(perf_data, windows_path):
    spec = json.load(open(windows_path))
    syncs = [iv for iv in sync_intervals(perf_data) if spec["first"] <= iv[0] <= spec["last"]]
    wins = sorted(
        (t0, t1, kind) for kind, ws in spec["windows"].items() for (t0, t1) in ws
    )
    per_kind = {}
    for i, (t0, t1, kind) in enumerate(wins):
        nxt = wins[i + 1][0] if i + 1 < len(wins) else spec["last"]
        inside = [iv for iv in syncs if t0 <= iv[0] <= t1]
        # Syncs that also completed before the reply arrived: what the commit can have waited for.
        done = [iv for iv in inside if iv[1] <= t1]
        after = sum(1 for iv in syncs if t1 < iv[0] < nxt)
        groups = rounds(done)
        # How long after each round's end the reply arrived: a round the commit waited for is
        # followed closely by the reply (or by the next round); one it did not wait for may end
        # just before the reply by chance.
        gaps = [(t1 - end) * 1000 for _, end in groups]
        per_kind.setdefault(kind, []).append(
            (len(inside), len(groups), after, (t1 - t0) * 1000, gaps)
        )
    median = lambda xs: sorted(xs)[len(xs) // 2]
    spread = lambda xs: {"min": min(xs), "median": median(xs), "max": max(xs)}
    report = {}
    for kind, xs in per_kind.items():
        report[kind] = {
            "commits": len(xs),
            "syncs_submitted_before_reply": spread([x[0] for x in xs]),
            "sequential_sync_rounds_completed_before_reply": spread([x[1] for x in xs]),
            "syncs_submitted_after_reply": spread([x[2] for x in xs]),
            "commit_ms_median": round(median([x[3] for x in xs]), 3),
            # Among commits with the median number of rounds: median ms from the end of round
            # i (1-based) to the reply.
            "ms_from_round_end_to_reply_median": {
                str(i + 1): round(median([x[4][i] for x in xs if len(x[4]) == median([y[1] for y in xs])]), 3)
                for i in range(median([x[1] for x in xs]))
            },
        }
    report["syncs_total"] = len(syncs)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) == 4 and sys.argv[1] == "count":
        count(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
