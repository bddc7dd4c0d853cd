#!/usr/bin/env python3
"""Memory of the MDS and of a mount while a namespace grows: creates FILES
empty files spread over DIRS directories from PROCS processes, sampling
the resident memory of the active MDS and of the mount every second.

    cairn up --data /var/tmp/cairn-mem --base-port 18789 --detach
    cairn mount --conf /var/tmp/cairn-mem/cairn.toml /mnt/mem &
    scripts/fs_memory.py /var/tmp/cairn-mem /mnt/mem MOUNT_PID [FILES] [DIRS] [PROCS]

Prints the create rate, and the peak and final RSS of both processes.
"""
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time

data, mnt, mount_pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = int(sys.argv[4]) if len(sys.argv) > 4 else 1_000_000
dirs = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
procs = int(sys.argv[6]) if len(sys.argv) > 6 else 8
cairn = os.environ.get("CAIRN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "cairn"))
conf = os.path.join(data, "cairn.toml")
root = os.path.join(mnt, "mem")


def rss_mib(pid):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def active_mds_pid():
    out = subprocess.run([cairn, "fs", "status", "cairnfs", "--json", "--conf", conf],
                         capture_output=True, check=True).stdout
    name = json.loads(out)["active"]["name"]
    return int(open(os.path.join(data, "run", "mds.%s.pid" % name)).read().strip())


def worker(index):
    per_dir = files // dirs
    for d in range(index, dirs, procs):
        path = os.path.join(root, "d%04d" % d)
        os.makedirs(path, exist_ok=True)
        for f in range(per_dir):
            os.close(os.open(os.path.join(path, "f%d" % f), os.O_CREAT | os.O_WRONLY, 0o644))


mds_pid = active_mds_pid()
peak = {"mds": 0.0, "mount": 0.0}
last = {"mds": 0.0, "mount": 0.0}
stop = False


def sampler():
    while not stop:
        for name, pid in (("mds", mds_pid), ("mount", mount_pid)):
            r = rss_mib(pid)
            last[name] = r
            peak[name] = max(peak[name], r)
        time.sleep(1)


os.makedirs(root, exist_ok=True)
threading.Thread(target=sampler, daemon=True).start()
start = time.monotonic()
with multiprocessing.Pool(procs) as pool:
    pool.map(worker, range(procs))
secs = time.monotonic() - start
time.sleep(5)  # write-back and a trim or two
stop = True
time.sleep(1.5)
print("created %d files in %d directories with %d processes in %.0f s (%.0f creates/s)"
      % (files, dirs, procs, secs, files / secs))
for name in ("mds", "mount"):
    print("%s RSS: peak %.0f MiB, after %.0f MiB" % (name, peak[name], last[name]))
