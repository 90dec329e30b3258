#!/usr/bin/env python3
"""Cross-executor transfers from sessions pinned to one executor (session 6, issue 5).

A two-phase commit costs a session on executor 0 (the coordinator's) and one on executor 1 a
different number of cross-executor calls, and the kernel spreads connections over the
executors at random, so the bench's mixed sessions blur the two. This opens connections until
it has CLIENTS sessions on EXECUTOR (read from the node's own hop counter: a one-Query block
on a fragment of executor 0 is shipped from executor 1, one hop, and runs in place on 0), then
each runs transfers (BEGIN; UPDATE; UPDATE; COMMIT, one statement at a time, retrying 40001)
between its own two documents on fragments of executors 0 and 1 for SECONDS. It prints the
rate, the median and p99 time per transfer, and, from the node process PID, the node's CPU
time (utime+stime) and mesh calls per transfer.

Usage: scripts/txn-pinned.py URL PID EXECUTOR CLIENTS SECONDS
"""
import os
import sys
import threading
import time

import psycopg


def mesh_calls(conn):
    rows = conn.execute("SHOW STATS").fetchall()
    return sum(int(r[2]) for r in rows if r[0] == "tessera_mesh_calls_total")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    url, pid, executor, clients, seconds = sys.argv[1:]
    executor, clients, seconds = int(executor), int(clients), float(seconds)
    admin = psycopg.connect(url, autocommit=True)
    first_of = {}
    for _, shards, ex, *_ in admin.execute("SHOW FRAGMENTS").fetchall():
        first_of.setdefault(int(str(ex).rsplit("-", 1)[-1]), int(shards.strip("[)").split(",")[0]))
    on0, on1 = first_of[0], first_of[1]
    show = -mesh_calls(admin) + mesh_calls(admin)
    probe = f"BEGIN; UPDATE pinned SET v = 0 WHERE id() = 'probe$@{on0}'; COMMIT"
    sessions = []
    for _ in range(64 * clients):
        conn = psycopg.connect(url, autocommit=True)
        before = mesh_calls(conn)
        conn.execute(probe)
        if mesh_calls(conn) - before - show == executor:
            sessions.append(conn)
            if len(sessions) == clients:
                break
        else:
            conn.close()
    if len(sessions) < clients:
        sys.exit(f"txn-pinned: only {len(sessions)} sessions on executor {executor}")
    for i, conn in enumerate(sessions):
        for d in (f"p{i}/a$@{on0 + 1 + i}", f"p{i}/b$@{on1 + 1 + i}"):
            conn.execute(
                "INSERT INTO pinned VALUES (%s, '{\"v\": 1000000}') ON CONFLICT (id) DO NOTHING", (d,)
            )
    times = [[] for _ in sessions]
    retries = [0] * len(sessions)
    stop = time.monotonic() + seconds

    def work(i):
        conn, a, b = sessions[i], f"p{i}/a$@{on0 + 1 + i}", f"p{i}/b$@{on1 + 1 + i}"
        while time.monotonic() < stop:
            t0 = time.monotonic()
            while True:
                try:
                    conn.execute("BEGIN")
                    conn.execute("UPDATE pinned SET v = v - 1 WHERE id() = %s", (a,))
                    conn.execute("UPDATE pinned SET v = v + 1 WHERE id() = %s", (b,))
                    conn.execute("COMMIT")
                    break
                except psycopg.errors.SerializationFailure:
                    conn.execute("ROLLBACK")
                    retries[i] += 1
            times[i].append(time.monotonic() - t0)

    m0, c0, w0 = mesh_calls(admin), cpu_seconds(pid), time.monotonic()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w1, c1, m1 = time.monotonic(), cpu_seconds(pid), mesh_calls(admin)
    all_times = sorted(t for ts in times for t in ts)
    n = len(all_times)
    print(
        f"executor={executor} clients={clients} transfers={n} rate={n / (w1 - w0):.0f}/s "
        f"median={all_times[n // 2] * 1e3:.2f}ms p99={all_times[min(n - 1, n * 99 // 100)] * 1e3:.2f}ms "
        f"node_cpu={(c1 - c0) * 1e6 / n:.1f}us/transfer mesh_calls={(m1 - m0 - show) / n:.3f}/transfer "
        f"retries={sum(retries)}"
    )


if __name__ == "__main__":
    main()
