#!/usr/bin/env python3
"""MDS failover time: SIGKILL of the active MDS to the first metadata
operation a client sees answered (served by the standby that took over).

    cairn up --mds 2 --data /var/tmp/cairn-failover --base-port 17789 --detach
    cairn mount --conf /var/tmp/cairn-failover/cairn.toml /mnt/failover &
    scripts/mds_failover_time.py /var/tmp/cairn-failover /mnt/failover [ROUNDS]

A probe makes a directory in a loop (a mkdir is always a metadata
operation at the MDS; a file create in a directory the mount made is
answered by the mount under its delegation); each round kills the active
MDS and records how long after the kill the first mkdir sent after it
returned. Prints each round and the median.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

data, mnt = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
cairn = os.environ.get("CAIRN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "cairn"))
conf = os.path.join(data, "cairn.toml")
probe_dir = os.path.join(mnt, "failover-probe")
os.makedirs(probe_dir, exist_ok=True)

done = []  # (start, end) of each create
stop = False


def probe():
    i = 0
    while not stop:
        start = time.monotonic()
        os.mkdir(os.path.join(probe_dir, "p%d" % i))
        done.append((start, time.monotonic()))
        i += 1
        time.sleep(0.005)


def status():
    out = subprocess.run([cairn, "fs", "status", "cairnfs", "--json", "--conf", conf],
                         capture_output=True, check=True).stdout
    return json.loads(out)


thread = threading.Thread(target=probe, daemon=True)
thread.start()
results = []
for r in range(rounds):
    # A steady state: an active MDS and a standby, mkdirs flowing.
    deadline = time.monotonic() + 60
    while True:
        s = status()
        if s["active"] and s["standbys"] and done and time.monotonic() - done[-1][1] < 0.5:
            break
        if time.monotonic() > deadline:
            sys.exit("no steady state: %s" % s)
        time.sleep(0.5)
    time.sleep(2)
    name = s["active"]["name"]
    pid = int(open(os.path.join(data, "run", "mds.%s.pid" % name)).read().strip())
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    # The first mkdir sent after the kill, answered.
    while not any(start > killed for start, _ in done):
        if time.monotonic() - killed > 120:
            sys.exit("no mkdir answered for 120 s after the kill")
        time.sleep(0.01)
    first = min(end for start, end in done if start > killed)
    gap = first - killed
    results.append(gap)
    print("round %d: killed mds.%s; first mkdir answered %.2f s later" % (r + 1, name, gap), flush=True)
    time.sleep(3)
stop = True
print("median failover %.2f s over %d rounds (min %.2f, max %.2f)"
      % (statistics.median(results), len(results), min(results), max(results)))
