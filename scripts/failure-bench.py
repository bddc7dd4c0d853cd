#!/usr/bin/env python3
"""One OSD killed during a `cairn bench object` write run, and during an idle
cluster (issue 5's recovery measurement).

    scripts/failure-bench.py [--osds 4,6] [--volume 4G] [--down-out 10s]
                             [--phase both|load|idle] [--out DIR]

For each OSD count, on a fresh `cairn up --no-restart` cluster with data on
this machine's disk, a replicated pool (size 3, min_size 2) and 4 MiB
objects:

load  `cairn bench object --mode write --objects VOLUME/4MiB` (16 in
      flight) writes the volume once, then overwrites it for --healthy
      seconds (the healthy baseline); one OSD is SIGKILLed; writes go on
      until every PG is active+clean, then --after seconds more. Client
      MiB/s each second (`--series`), `cairn status --json` every 0.5 s.
idle  the volume is written, the writes stop; fio writes sequentially on
      the same file system (direct, 4 MiB, queue depth 16, fsync at the
      end); one OSD is SIGKILLed and recovery runs with no client load;
      fio runs again once the cluster is clean. Recovery bandwidth is
      reported as a ratio of fio's.

Times: kill (this script), down and out (the monitor's log, to the
millisecond; the status polls as a check), first degraded and first
recovering PG, and active+clean (the first poll where every PG reports
active+clean, nothing is missing or backfilling, and `reported_epoch`
shows every OSD has the current map; the OSDs report each second, so this
lags the event by up to about 1.5 s). Recovery bandwidth: bytes the OSDs
pushed (`recovery.recovered_bytes`) from out to active+clean, divided by
that time.

Needs root (the page cache is dropped before the measured reads: recovery
reads what the fill and the healthy writes left on disk) and fio. Writes
a CSV of client MiB/s and one of status polls per phase, a PNG plot per
phase (throughput against time, lines at kill, down, out and clean) and
summary.json, summary.txt under --out (default
/var/tmp/cairn-failure-bench/results-DATE). Cleans the cluster up (`cairn
down`) also on error or Ctrl-C. Uses $CAIRN if set, else builds with
`cargo build --release` ($CARGO_TARGET_DIR, default
/var/tmp/cairn-ci-target).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
MIB = 1 << 20
OBJECT_SIZE = 4 * MIB
POOL = "bench"
PG_NUM = 64
SIZE, MIN_SIZE = 3, 2
CONCURRENCY = 16
POLL_SECS = 0.5
# Goals of the issue.
LOAD_RATIO_GOAL = 0.70
IDLE_RATIO_GOAL = 0.50


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]?)i?B?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 4G, 400M)")
    return int(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper())


def parse_secs(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (e.g. 10s, 500ms, 2m)")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[m.group(2)]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("installing matplotlib with pip")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"], check=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As the daemons bind (tokio sets SO_REUSEADDR): only a listener blocks.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(start: int, osds: int) -> int:
    """The first base port from `start` (in steps of 100) whose monitor and
    OSD ports are all free: other people's clusters share this machine."""
    for base in range(start, 60000, 100):
        if all(port_free(p) for p in range(base, base + osds + 1)):
            return base
    raise RuntimeError(f"no {osds + 1} free ports from {start}")


class Cluster:
    """A `cairn up --detach` cluster in a fresh data dir; `down()` stops it."""

    def __init__(self, cairn: str, data: Path, osds: int, args):
        self.cairn, self.data, self.osds = cairn, data, osds
        self.conf = data / "cairn.toml"
        if data.exists():
            subprocess.run([cairn, "down", "--data", str(data)], capture_output=True)
            shutil.rmtree(data)
        self.port = free_base_port(args.base_port, osds)
        cmd = [cairn, "up", "--detach", "--data", str(data), "--osds", str(osds),
               "--no-restart", "--base-port", str(self.port), "--down-out", args.down_out_text]
        if args.down_grace_text:
            cmd += ["--down-grace", args.down_grace_text]
        self.up = True
        try:
            self.run(cmd, timeout=90)
            self.check_own()
            self.run([cairn, "pool", "create", POOL, "--size", str(SIZE), "--min-size", str(MIN_SIZE),
                      "--pg-num", str(args.pg_num), "--conf", str(self.conf)])
        except BaseException:
            self.down(None)
            raise

    def check_own(self) -> None:
        """Refuses to go on unless the cluster answering is this one: `cairn
        up` reports ready when any monitor answers on its port, even when
        its own daemons could not bind (someone else's cluster took the
        ports between the probe and the start)."""
        time.sleep(0.5)
        for name in ["mon"] + [f"osd.{i}" for i in range(self.osds)]:
            try:
                pid = int((self.data / "run" / f"{name}.pid").read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (OSError, ValueError):
                cmdline = b""
            if str(self.data).encode() not in cmdline:
                raise RuntimeError(f"{name} of {self.data} is not running (port taken?); "
                                   f"see {self.data}/logs/{name}.log")
        tree = json.loads(self.run([self.cairn, "osd", "tree", "--json", "--conf", str(self.conf)]))
        ports = sorted(int(o["addr"].rsplit(":", 1)[1]) for r in tree["racks"] for h in r["hosts"]
                       for o in h["osds"])
        if ports != list(range(self.port + 1, self.port + 1 + self.osds)):
            raise RuntimeError(f"the monitor on port {self.port} is not this cluster's (OSD ports {ports})")

    def run(self, cmd: list[str], timeout: float = 60) -> str:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def status(self) -> dict:
        return json.loads(self.run([self.cairn, "status", "--json", "--conf", str(self.conf)], timeout=10))

    def osd_daemon(self, osd_id: int) -> tuple[str, int]:
        """The `cairn up` daemon name (osd.INDEX, by port) and pid of OSD id
        `osd_id`: ids are given by the monitor in boot order, not by index."""
        tree = json.loads(self.run([self.cairn, "osd", "tree", "--json", "--conf", str(self.conf)]))
        for rack in tree["racks"]:
            for host in rack["hosts"]:
                for osd in host["osds"]:
                    if osd["id"] == osd_id:
                        index = int(osd["addr"].rsplit(":", 1)[1]) - self.port - 1
                        name = f"osd.{index}"
                        pid = int((self.data / "run" / f"{name}.pid").read_text().strip())
                        return name, pid
        raise RuntimeError(f"no OSD with id {osd_id} in the map")

    def wait_clean(self, timeout: float) -> dict:
        deadline = time.time() + timeout
        while True:
            s = self.status()
            if is_clean(s):
                return s
            if time.time() > deadline:
                raise RuntimeError(f"not active+clean within {timeout:.0f} s: {s['pgs_by_state']}")
            time.sleep(POLL_SECS)

    def down(self, keep_logs: Path | None) -> None:
        if not self.up:
            return
        self.up = False
        subprocess.run([self.cairn, "down", "--data", str(self.data)], capture_output=True, timeout=120)
        if keep_logs is not None and (self.data / "logs").is_dir():
            shutil.copytree(self.data / "logs", keep_logs, dirs_exist_ok=True)


def is_clean(s: dict) -> bool:
    states = s["pgs_by_state"]
    return (states.get("active+clean", 0) == s["pg_count"] and len(states) == 1
            and s["reported_epoch"] >= s["epoch"]
            and s["recovery"]["missing_objects"] == 0 and s["recovery"]["backfill_targets"] == 0)


class Poller(threading.Thread):
    """`cairn status --json` every POLL_SECS; keeps (time, status) pairs."""

    def __init__(self, cluster: Cluster):
        super().__init__(daemon=True)
        self.cluster, self.samples, self.stop_event = cluster, [], threading.Event()
        self.failures = 0

    def run(self) -> None:
        next_at = time.time()
        while not self.stop_event.is_set():
            begin = time.time()
            try:
                s = self.cluster.status()
                # The status describes the moment between request and reply.
                self.samples.append(((begin + time.time()) / 2, s))
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
                self.failures += 1
            next_at = max(next_at + POLL_SECS, time.time())
            self.stop_event.wait(next_at - time.time())

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)


class Bench:
    """`cairn bench object --mode write` over a fixed set of names, until
    SIGINT; its per-second series is read while it runs."""

    def __init__(self, cluster: Cluster, objects: int, series: Path, stdout: Path):
        self.series, self.stdout_path = series, stdout
        self.stdout = open(stdout, "w")
        self.proc = subprocess.Popen(
            [cluster.cairn, "bench", "object", "--conf", str(cluster.conf), "--pool", POOL,
             "--mode", "write", "--object-size", str(OBJECT_SIZE), "--concurrency", str(CONCURRENCY),
             "--objects", str(objects), "--duration", "7200s", "--series", str(series), "--json"],
            stdout=self.stdout, stderr=subprocess.STDOUT)
        self.stopped_at: float | None = None

    def rows(self) -> list[dict]:
        return read_series(self.series)

    def wait_for(self, pred, timeout: float, what: str) -> None:
        deadline = time.time() + timeout
        while not pred(self.rows()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"bench exited early ({self.proc.returncode}): "
                                   f"{self.stdout_path.read_text()[-500:]}")
            if time.time() > deadline:
                raise RuntimeError(f"{what}: not within {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self) -> dict | None:
        """SIGINT (in-flight writes finish, the summary follows); SIGKILL if
        it does not end."""
        if self.proc.poll() is None:
            self.stopped_at = time.time()
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stdout.close()
        try:
            return json.loads(self.stdout_path.read_text())
        except (OSError, ValueError):
            return None


def read_series(path: Path) -> list[dict]:
    try:
        with open(path) as f:
            return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)
                    if row.get("latency_avg_secs") not in (None, "")]
    except FileNotFoundError:
        return []


def mon_events(mon_log: Path, osd_id: int) -> dict:
    """Times (unix) the monitor marked `osd_id` down and out, from its log."""
    events = {}
    ansi = re.compile(r"\x1b\[[0-9;]*m")
    try:
        text = mon_log.read_text(errors="replace")
    except OSError:
        return events
    for line in text.splitlines():
        line = ansi.sub("", line)
        m = re.match(r"(\S+Z)\s+\w+\s+\S+\s+(marking OSD (down|out)).*\bosd=osd\.(\d+)\b", line)
        if m and int(m.group(4)) == osd_id and m.group(3) not in events:
            events[m.group(3)] = datetime.datetime.fromisoformat(m.group(1)).timestamp()
    return events


def run_fio(work: Path, size: int, out_json: Path) -> float:
    """fio's sequential direct 4 MiB write of `size` bytes with an fsync at
    the end, on the cluster's file system; MiB/s."""
    target = work / "fio.dat"
    subprocess.run(["fio", "--name=seqwrite", f"--filename={target}", "--rw=write", "--bs=4M",
                    "--direct=1", "--ioengine=libaio", "--iodepth=16", f"--size={size}",
                    "--end_fsync=1", "--output-format=json", f"--output={out_json}"],
                   check=True, capture_output=True, timeout=600)
    target.unlink(missing_ok=True)
    return json.loads(out_json.read_text())["jobs"][0]["write"]["bw_bytes"] / MIB


def watch_failure(poller: Poller, mon_log: Path, osd_id: int, kill_at: float,
                  args, total_osds: int) -> dict:
    """Waits for down, out and active+clean after the kill; returns unix
    times (None for what did not happen within its timeout)."""
    ev = {"kill": kill_at, "down_poll": None, "out_poll": None, "first_degraded": None,
          "first_recovering": None, "clean": None, "out_epoch": None}
    deadlines = {"down": kill_at + args.down_grace + 60,
                 "out": None, "clean": None}
    seen = 0
    before = [s for t, s in poller.samples if t < kill_at]
    base_pushed = before[-1]["recovery"]["recovered_bytes"] if before else 0
    while True:
        samples = poller.samples
        for t, s in samples[seen:]:
            if t < kill_at:
                continue
            states = " ".join(s["pgs_by_state"])
            if ev["down_poll"] is None and s["osds_up"] < total_osds:
                ev["down_poll"] = t
            if ev["out_poll"] is None and s["osds_in"] < total_osds:
                ev["out_poll"], ev["out_epoch"] = t, s["epoch"]
            if ev["first_degraded"] is None and re.search(r"degraded|undersized", states):
                ev["first_degraded"] = t
            # A short recovery can start and end between two polls; the
            # pushed-bytes counter still shows it.
            pushed = s["recovery"]["recovered_bytes"] > base_pushed
            if ev["first_recovering"] is None and (re.search(r"recover|backfill", states) or pushed):
                ev["first_recovering"] = t
            if ev["out_poll"] is not None and ev["clean"] is None and is_clean(s) \
                    and s["epoch"] >= ev["out_epoch"]:
                ev["clean"] = t
        seen = len(samples)
        now = time.time()
        if ev["out_poll"] is not None and deadlines["clean"] is None:
            deadlines["clean"] = ev["out_poll"] + args.recovery_timeout
        if ev["down_poll"] is not None and deadlines["out"] is None:
            deadlines["out"] = ev["down_poll"] + args.down_out + 60
        if ev["clean"] is not None:
            break
        if ev["down_poll"] is None and now > deadlines["down"]:
            log("the killed OSD was never marked down")
            break
        if deadlines["out"] and ev["out_poll"] is None and now > deadlines["out"]:
            log("the killed OSD was never marked out")
            break
        if deadlines["clean"] and now > deadlines["clean"]:
            log(f"not active+clean within {args.recovery_timeout:.0f} s of out")
            break
        time.sleep(0.2)
    mon = mon_events(mon_log, osd_id)
    ev["down_mon"], ev["out_mon"] = mon.get("down"), mon.get("out")
    # The monitor's own times when its log has them; the polls otherwise.
    ev["down"] = ev["down_mon"] or ev["down_poll"]
    ev["out"] = ev["out_mon"] or ev["out_poll"]
    return ev


def recovered_between(samples, start: float | None, end: float | None,
                      key: str = "recovered_bytes") -> float | None:
    """Growth of a recovery counter (bytes or objects the OSDs pushed) from
    the last poll before `start` to the first poll at or after `end`
    (counters of the live OSDs; the killed one never pushes)."""
    if start is None or end is None:
        return None
    before = [s for t, s in samples if t < start]
    after = [s for t, s in samples if t >= end]
    if not before or not after:
        return None
    return after[0]["recovery"][key] - before[-1]["recovery"][key]


def push_window(samples, start: float | None, end: float | None) -> float | None:
    """Seconds the OSDs spent pushing between out and active+clean: from the
    last poll before the pushed-bytes counter first grew to the first poll
    where it reached its final value. Peering before the first push and
    the wait for the PG states to read clean are left out; the counters'
    once-a-second reports still widen it by up to a second."""
    if start is None or end is None:
        return None
    window = [(t, s["recovery"]["recovered_bytes"]) for t, s in samples if t >= start and t <= end + 1.0]
    before = [s["recovery"]["recovered_bytes"] for t, s in samples if t < start]
    if not window or not before:
        return None
    base, final = before[-1], window[-1][1]
    if final <= base:
        return None
    first_growth = next(i for i, (_, b) in enumerate(window) if b > base)
    t_from = window[first_growth - 1][0] if first_growth > 0 else start
    t_to = next(t for t, b in window if b >= final)
    return max(t_to - t_from, 0.5)


def stored_at(samples, t: float | None, after: bool) -> int | None:
    """Object bytes held by the live OSDs (all copies) at the last poll
    before `t`, or the first at or after it."""
    if t is None:
        return None
    sel = [s for t0, s in samples if (t0 >= t if after else t0 < t)]
    if not sel:
        return None
    return (sel[0] if after else sel[-1])["usage"]["stored_bytes"]


def copies_summary(samples, ev: dict) -> dict:
    """What the kill took away and what recovery put back, from the OSDs'
    stored-bytes figures: before the kill, with the killed OSD's report gone
    (just before out), and once clean. Under load, writes in flight move
    these by a few objects."""
    before, lost, after = (stored_at(samples, ev["kill"], False), stored_at(samples, ev["out"], False),
                           stored_at(samples, ev["clean"], True))
    return {"stored_bytes_before_kill": before, "stored_bytes_before_out": lost,
            "stored_bytes_after_clean": after,
            "copies_lost_bytes": None if before is None or lost is None else before - lost}


def mean_mib(rows: list[dict], start: float | None, end: float | None) -> float | None:
    """Client MiB/s over the series rows that end in (start, end], weighted
    by their intervals."""
    if start is None or end is None:
        return None
    sel = [r for r in rows if start < r["unix_time_secs"] <= end]
    secs = sum(r["interval_secs"] for r in sel)
    if secs <= 0:
        return None
    return sum(r["mib_per_sec"] * r["interval_secs"] for r in sel) / secs


def rel(t: float | None, zero: float) -> float | None:
    return None if t is None else round(t - zero, 3)


RATE_WINDOW_SECS = 1.5


def write_status_csv(path: Path, samples, zero: float) -> list[dict]:
    """One row per poll. The recovery rate is taken over the polls of the
    last RATE_WINDOW_SECS: the OSDs report their counters once a second, so
    a rate between two polls half a second apart is 0 or double."""
    rows = []
    for i, (t, s) in enumerate(samples):
        rec = s["recovery"]
        rate = None
        earlier = [(t0, s0) for t0, s0 in samples[:i] if t - t0 >= RATE_WINDOW_SECS]
        if earlier:
            t0, s0 = earlier[-1]
            rate = max(0.0, (rec["recovered_bytes"] - s0["recovery"]["recovered_bytes"]) / MIB / (t - t0))
        rows.append({
            "unix_time_secs": round(t, 3), "t_secs": round(t - zero, 3), "epoch": s["epoch"],
            "reported_epoch": s["reported_epoch"], "osds_up": s["osds_up"], "osds_in": s["osds_in"],
            "pgs_active_clean": s["pgs_by_state"].get("active+clean", 0), "pg_count": s["pg_count"],
            "pg_states": ";".join(f"{k}={v}" for k, v in sorted(s["pgs_by_state"].items())),
            "missing_objects": rec["missing_objects"], "backfill_targets": rec["backfill_targets"],
            "recovered_objects": rec["recovered_objects"], "recovered_bytes": rec["recovered_bytes"],
            "recovery_mib_per_sec": None if rate is None else round(rate, 2),
            "client_write_mib_per_sec": round(s["client_io"]["write_bytes_per_s"] / MIB, 2),
            "stored_bytes": s["usage"]["stored_bytes"],
        })
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["unix_time_secs"])
        w.writeheader()
        w.writerows(rows)
    return rows


def write_client_csv(path: Path, rows: list[dict], zero: float) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["unix_time_secs", "t_secs", "interval_secs", "mib_per_sec", "ops", "errors",
                    "in_flight", "latency_avg_secs"])
        for r in rows:
            w.writerow([f"{r['unix_time_secs']:.3f}", f"{r['unix_time_secs'] - zero:.3f}",
                        r["interval_secs"], r["mib_per_sec"], int(r["ops"]), int(r["errors"]),
                        int(r["in_flight"]), r["latency_avg_secs"]])


def plot(path: Path, title: str, ev: dict, client_rows, status_rows, healthy: float | None,
         fio: float | None, recovery_mean: float | None) -> None:
    plt = ensure_matplotlib()
    zero = ev["kill"]
    fig, ax = plt.subplots(figsize=(11, 5.5))
    if client_rows:
        # Step at the end of each interval: the rate held over that second.
        ax.step([r["unix_time_secs"] - zero for r in client_rows], [r["mib_per_sec"] for r in client_rows],
                where="pre", label="client writes (MiB/s)", color="tab:blue")
    rec = [(r["t_secs"], r["recovery_mib_per_sec"]) for r in status_rows if r["recovery_mib_per_sec"] is not None]
    if rec:
        ax.plot([x for x, _ in rec], [y for _, y in rec], label=f"recovery pushes (MiB/s, {RATE_WINDOW_SECS} s window)",
                color="tab:orange")
    if healthy:
        ax.axhline(healthy, color="tab:blue", ls=":", lw=1, label=f"healthy mean {healthy:.0f}")
        ax.axhline(healthy * LOAD_RATIO_GOAL, color="tab:red", ls=":", lw=1,
                   label=f"{LOAD_RATIO_GOAL:.0%} of healthy (goal)")
    if fio:
        ax.axhline(fio, color="grey", ls=":", lw=1, label=f"fio sequential write {fio:.0f}")
        ax.axhline(fio * IDLE_RATIO_GOAL, color="tab:red", ls=":", lw=1,
                   label=f"{IDLE_RATIO_GOAL:.0%} of fio (goal)")
    if recovery_mean and ev.get("out") is not None and ev.get("clean") is not None:
        ax.hlines(recovery_mean, ev["out"] - zero, ev["clean"] - zero, color="tab:orange", lw=2.5, alpha=0.5,
                  label=f"recovery mean, out → clean {recovery_mean:.0f}")
    if ev.get("healthy_from") is not None:
        ax.axvspan(ev["healthy_from"] - zero, 0, color="tab:blue", alpha=0.06, label="healthy window")
    for key, color in (("kill", "black"), ("down", "tab:purple"), ("out", "tab:brown"), ("clean", "tab:green")):
        if ev.get(key) is not None:
            ax.axvline(ev[key] - zero, color=color, ls="--", lw=1)
            ax.text(ev[key] - zero, 1.0, f" {key}", transform=ax.get_xaxis_transform(), rotation=90,
                    va="top", ha="right", fontsize=8, color=color)
    ax.set_xlabel("seconds since the kill")
    ax.set_ylabel("MiB/s")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def event_times(ev: dict) -> dict:
    zero = ev["kill"]
    t = {k: rel(ev.get(k), zero) for k in ("down", "down_poll", "down_mon", "out", "out_poll",
                                           "out_mon", "first_degraded", "first_recovering", "clean")}
    t["detection_secs"] = t["down"]
    t["out_to_clean_secs"] = None if ev.get("clean") is None or ev.get("out") is None \
        else round(ev["clean"] - ev["out"], 3)
    t["down_to_clean_secs"] = None if ev.get("clean") is None or ev.get("down") is None \
        else round(ev["clean"] - ev["down"], 3)
    return t


def kill_osd(cluster: Cluster, osd_id: int) -> tuple[str, float]:
    name, pid = cluster.osd_daemon(osd_id)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    if b"cairn" not in cmdline or b"osd" not in cmdline:
        raise RuntimeError(f"pid {pid} of {name} is not a cairn OSD")
    os.kill(pid, signal.SIGKILL)
    return name, time.time()


def phase_load(cairn: str, args, osds: int, out: Path) -> dict:
    tag = f"osds{osds}-load"
    data = args.work / "cairn"
    objects = max(1, args.volume // OBJECT_SIZE)
    series = out / f"{tag}-bench-series.csv"
    cluster = bench = poller = None
    try:
        log(f"{tag}: cairn up, {osds} OSDs, pool size {SIZE}, {args.pg_num} PGs")
        cluster = Cluster(cairn, data, osds, args)
        poller = Poller(cluster)
        poller.start()
        bench = Bench(cluster, objects, series, out / f"{tag}-bench.json")
        volume_mib = objects * OBJECT_SIZE / MIB
        # Every name written once (names are issued in order, so once as
        # many writes completed as there are names, all were issued).
        bench.wait_for(lambda rows: sum(r["ops"] for r in rows) >= objects,
                       args.fill_timeout, f"writing {volume_mib:.0f} MiB")
        filled_at = time.time()
        drop_caches()
        log(f"{tag}: {volume_mib:.0f} MiB written in {objects} objects; healthy writes for {args.healthy:.0f} s")
        time.sleep(args.healthy)
        if bench.proc.poll() is not None:
            raise RuntimeError(f"bench exited early: {bench.stdout_path.read_text()[-500:]}")
        name, kill_at = kill_osd(cluster, args.kill_osd)
        log(f"{tag}: SIGKILL osd id {args.kill_osd} (cairn up's daemon {name})")
        ev = watch_failure(poller, data / "logs" / "mon.log", args.kill_osd, kill_at, args, osds)
        ev["healthy_from"] = filled_at
        if ev["clean"] is not None:
            log(f"{tag}: active+clean {ev['clean'] - kill_at:.1f} s after the kill; "
                f"writes for {args.after:.0f} s more")
            time.sleep(args.after)
        summary = bench.stop()
        poller.stop()
    finally:
        if bench is not None:
            bench.stop()
        if poller is not None:
            poller.stop()
        if cluster is not None:
            cluster.down(out / f"{tag}-logs")
    rows = read_series(series)
    end = bench.stopped_at
    zero = kill_at
    write_client_csv(out / f"{tag}-client.csv", rows, zero)
    status_rows = write_status_csv(out / f"{tag}-status.csv", poller.samples, zero)
    healthy = mean_mib(rows, filled_at, kill_at)
    during = mean_mib(rows, ev["down"], ev["clean"])
    kill_to_clean = mean_mib(rows, kill_at, ev["clean"])
    out_to_clean = mean_mib(rows, ev["out"], ev["clean"])
    after = mean_mib(rows, ev["clean"], end) if ev["clean"] else None
    window = [r for r in rows if ev["down"] and ev["clean"] and ev["down"] < r["unix_time_secs"] <= ev["clean"]]
    stalled = [r for r in rows if kill_at < r["unix_time_secs"] <= (ev["clean"] or end) and r["ops"] == 0]
    recovered = recovered_between(poller.samples, ev["out"], ev["clean"])
    times = event_times(ev)
    result = {
        "phase": "load", "osds": osds, "killed_osd": args.kill_osd, "killed_daemon": name,
        "objects": objects, "volume_bytes": objects * OBJECT_SIZE,
        "healthy_mib_per_sec": healthy,
        "down_to_clean_mib_per_sec": during,
        "down_to_clean_ratio": None if not (during and healthy) else during / healthy,
        "down_to_clean_min_second_mib_per_sec": min((r["mib_per_sec"] for r in window), default=None),
        "out_to_clean_mib_per_sec": out_to_clean,
        "out_to_clean_ratio": None if not (out_to_clean and healthy) else out_to_clean / healthy,
        "kill_to_clean_mib_per_sec": kill_to_clean,
        "kill_to_clean_ratio": None if not (kill_to_clean and healthy) else kill_to_clean / healthy,
        "after_clean_mib_per_sec": after,
        "seconds_without_completed_writes": len(stalled),
        "write_errors": int(sum(r["errors"] for r in rows)),
        "bench_summary": summary,
        **times,
        "recovered_bytes": recovered,
        "recovered_objects": recovered_between(poller.samples, ev["out"], ev["clean"], "recovered_objects"),
        **copies_summary(poller.samples, ev),
        "recovery_mib_per_sec": None if recovered is None or not times["out_to_clean_secs"]
        else recovered / MIB / times["out_to_clean_secs"],
        "status_poll_failures": poller.failures,
    }
    plot(out / f"{tag}.png",
         f"{osds} OSDs, size {SIZE}, {objects} × 4 MiB objects, {CONCURRENCY} writes in flight; "
         f"osd.{args.kill_osd} SIGKILLed at 0, down→out {args.down_out_text}",
         ev, rows, status_rows, healthy, None, result["recovery_mib_per_sec"])
    return result


def phase_idle(cairn: str, args, osds: int, out: Path) -> dict:
    tag = f"osds{osds}-idle"
    data = args.work / "cairn"
    objects = max(1, args.volume // OBJECT_SIZE)
    fio_size = max(args.volume, args.fio_size_min)
    cluster = poller = bench = None
    try:
        log(f"{tag}: cairn up, {osds} OSDs, pool size {SIZE}, {args.pg_num} PGs")
        cluster = Cluster(cairn, data, osds, args)
        bench = Bench(cluster, objects, out / f"{tag}-fill-series.csv", out / f"{tag}-fill.json")
        volume_mib = objects * OBJECT_SIZE / MIB
        bench.wait_for(lambda rows: sum(r["ops"] for r in rows) >= objects,
                       args.fill_timeout, f"writing {volume_mib:.0f} MiB")
        fill = bench.stop()
        bench = None
        cluster.wait_clean(120)
        log(f"{tag}: {volume_mib:.0f} MiB written; fio sequential write of {fio_size / MIB:.0f} MiB")
        fio_before = run_fio(args.work, fio_size, out / f"{tag}-fio-before.json")
        drop_caches()
        poller = Poller(cluster)
        poller.start()
        time.sleep(2)
        name, kill_at = kill_osd(cluster, args.kill_osd)
        log(f"{tag}: SIGKILL osd id {args.kill_osd} (cairn up's daemon {name}), no client load")
        ev = watch_failure(poller, data / "logs" / "mon.log", args.kill_osd, kill_at, args, osds)
        time.sleep(2)
        poller.stop()
        fio_after = None
        if ev["clean"] is not None:
            log(f"{tag}: active+clean {ev['clean'] - kill_at:.1f} s after the kill; fio again")
            fio_after = run_fio(args.work, fio_size, out / f"{tag}-fio-after.json")
    finally:
        if bench is not None:
            bench.stop()
        if poller is not None:
            poller.stop()
        if cluster is not None:
            cluster.down(out / f"{tag}-logs")
        (args.work / "fio.dat").unlink(missing_ok=True)
    status_rows = write_status_csv(out / f"{tag}-status.csv", poller.samples, kill_at)
    fio_runs = [x for x in (fio_before, fio_after) if x is not None]
    fio = statistics.mean(fio_runs)
    recovered = recovered_between(poller.samples, ev["out"], ev["clean"])
    times = event_times(ev)
    rate = None if recovered is None or not times["out_to_clean_secs"] \
        else recovered / MIB / times["out_to_clean_secs"]
    pushing = push_window(poller.samples, ev["out"], ev["clean"])
    push_rate = None if recovered is None or pushing is None else recovered / MIB / pushing
    result = {
        "phase": "idle",
        "push_window_secs": pushing,
        "push_mib_per_sec": push_rate,
        "push_to_fio_ratio": None if push_rate is None else push_rate / statistics.mean(fio_runs), "osds": osds, "killed_osd": args.kill_osd, "killed_daemon": name,
        "objects": objects, "volume_bytes": objects * OBJECT_SIZE,
        "fill_mib_per_sec": None if fill is None else fill["bandwidth_mib_per_sec"],
        **times,
        "recovered_bytes": recovered,
        "recovered_objects": recovered_between(poller.samples, ev["out"], ev["clean"], "recovered_objects"),
        **copies_summary(poller.samples, ev),
        "recovery_mib_per_sec": rate,
        "fio_size_bytes": fio_size,
        "fio_write_mib_per_sec_runs": fio_runs,
        "fio_write_mib_per_sec": fio,
        "recovery_to_fio_ratio": None if rate is None else rate / fio,
        "status_poll_failures": poller.failures,
    }
    plot(out / f"{tag}.png",
         f"{osds} OSDs, size {SIZE}, {objects} × 4 MiB objects, idle; osd.{args.kill_osd} SIGKILLed at 0, "
         f"down→out {args.down_out_text}", ev, [], status_rows, None, fio, rate)
    return result


def fmt(x, digits=1, unit=""):
    if x is None:
        return "n/a"
    return f"{x:,.{digits}f}{unit}"


def report(results: list[dict], meta: dict) -> str:
    lines = [f"cairn failure bench {meta['started']} (commit {meta['commit']}), "
             f"down→out {meta['down_out']}, down grace {meta['down_grace']}, "
             f"volume {meta['volume_bytes'] / MIB:.0f} MiB of 4 MiB objects, pool size {SIZE}/{MIN_SIZE}, "
             f"{meta['pg_num']} PGs, {CONCURRENCY} writes in flight, load average at start "
             f"{meta['loadavg_start']}", ""]
    for r in results:
        head = (f"{r['osds']} OSDs, {r['phase']}: killed osd id {r['killed_osd']} "
                f"(cairn up's daemon {r['killed_daemon']})")
        lines.append(head)
        lines.append(f"  detection (kill → down): {fmt(r['detection_secs'])} s "
                     f"(monitor log {fmt(r['down_mon'], 3)}, polls {fmt(r['down_poll'], 1)}); "
                     f"out at {fmt(r['out'])} s; first degraded PG {fmt(r['first_degraded'])} s, "
                     f"first recovering PG {fmt(r['first_recovering'])} s; active+clean {fmt(r['clean'])} s")
        mib = lambda key: None if r[key] is None else r[key] / MIB  # noqa: E731
        lines.append(f"  out → active+clean: {fmt(r['out_to_clean_secs'])} s; recovered "
                     f"{fmt(mib('recovered_bytes'), 0)} MiB ({fmt(r['recovered_objects'], 0)} object copies) "
                     f"at {fmt(r['recovery_mib_per_sec'])} MiB/s; copies lost with the OSD "
                     f"{fmt(mib('copies_lost_bytes'), 0)} MiB; stored before the kill "
                     f"{fmt(mib('stored_bytes_before_kill'), 0)} MiB, after clean "
                     f"{fmt(mib('stored_bytes_after_clean'), 0)} MiB")
        if r["phase"] == "load":
            ok = r["down_to_clean_ratio"] is not None and r["down_to_clean_ratio"] >= LOAD_RATIO_GOAL
            lines.append(f"  client MiB/s: healthy {fmt(r['healthy_mib_per_sec'])}, down → clean "
                         f"{fmt(r['down_to_clean_mib_per_sec'])} (ratio {fmt(r['down_to_clean_ratio'], 2)}, "
                         f"goal ≥ {LOAD_RATIO_GOAL}, {'met' if ok else 'NOT met'}), "
                         f"worst second {fmt(r['down_to_clean_min_second_mib_per_sec'])}, out → clean "
                         f"{fmt(r['out_to_clean_mib_per_sec'])} (ratio {fmt(r['out_to_clean_ratio'], 2)}), kill → clean "
                         f"{fmt(r['kill_to_clean_mib_per_sec'])} (ratio {fmt(r['kill_to_clean_ratio'], 2)}), "
                         f"after clean {fmt(r['after_clean_mib_per_sec'])}")
            lines.append(f"  seconds with no write completed (kill → clean): {r['seconds_without_completed_writes']}; "
                         f"write errors: {r['write_errors']}")
        else:
            ok = r["push_to_fio_ratio"] is not None and r["push_to_fio_ratio"] >= IDLE_RATIO_GOAL
            lines.append(f"  fio sequential write (direct, 4 MiB, qd 16, fsync at end, "
                         f"{r['fio_size_bytes'] / MIB:.0f} MiB): "
                         f"{', '.join(fmt(x, 0) for x in r['fio_write_mib_per_sec_runs'])} MiB/s "
                         f"(before, after); out → clean ÷ fio {fmt(r['recovery_to_fio_ratio'], 2)}; "
                         f"pushing {fmt(r['push_window_secs'])} s at {fmt(r['push_mib_per_sec'])} MiB/s, "
                         f"÷ fio {fmt(r['push_to_fio_ratio'], 2)} "
                         f"(goal ≥ {IDLE_RATIO_GOAL}, {'met' if ok else 'NOT met'})")
        lines.append("")
    lines.append(f"load average at end {meta['loadavg_end']}")
    return "\n".join(lines)


def on_sigterm(_signum, _frame):
    raise KeyboardInterrupt


def main() -> int:
    p = argparse.ArgumentParser(description="One OSD killed during a write run and on an idle cluster.",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--osds", default="4,6", help="OSD counts, one cluster each (default 4,6)")
    p.add_argument("--volume", type=parse_size, default=parse_size("4G"),
                   help="data written, in 4 MiB objects (default 4G)")
    p.add_argument("--down-out", dest="down_out_text", default="10s", metavar="DURATION",
                   help="down → out interval of the monitor (default 10s)")
    p.add_argument("--down-grace", dest="down_grace_text", default=None, metavar="DURATION",
                   help="monitor's heartbeat grace (default: the monitor's, 20s; "
                        "peers report a silent OSD after 4 s anyway)")
    p.add_argument("--phase", choices=["both", "load", "idle"], default="both")
    p.add_argument("--out", type=Path, default=None,
                   help="results dir (default /var/tmp/cairn-failure-bench/results-DATE)")
    p.add_argument("--work", type=Path, default=Path("/var/tmp/cairn-failure-bench"),
                   help="cluster data and fio file; must be on the disk measured")
    p.add_argument("--healthy", type=parse_secs, default=20.0,
                   help="healthy writes after the fill, before the kill (default 20s)")
    p.add_argument("--after", type=parse_secs, default=20.0,
                   help="writes after active+clean (default 20s)")
    p.add_argument("--kill-osd", type=int, default=1, help="OSD id to kill (default 1)")
    p.add_argument("--pg-num", type=int, default=PG_NUM, help=f"PGs of the pool (default {PG_NUM})")
    p.add_argument("--base-port", type=int, default=18600,
                   help="first monitor port tried (default 18600; the next free range is taken)")
    p.add_argument("--recovery-timeout", type=parse_secs, default=900.0,
                   help="longest wait from out to active+clean (default 900s)")
    p.add_argument("--fill-timeout", type=parse_secs, default=600.0)
    p.add_argument("--fio-size-min", type=parse_size, default=parse_size("1G"),
                   help="fio writes max(volume, this) (default 1G)")
    args = p.parse_args()
    args.down_out = parse_secs(args.down_out_text)
    args.down_grace = parse_secs(args.down_grace_text) if args.down_grace_text else 20.0
    osd_counts = [int(x) for x in args.osds.split(",") if x.strip()]
    if any(n < SIZE + 1 for n in osd_counts):
        p.error(f"--osds: at least {SIZE + 1} (a size-{SIZE} pool must have somewhere to recover to)")
    if not 0 <= args.kill_osd < min(osd_counts):
        p.error(f"--kill-osd: an OSD id below {min(osd_counts)}")
    if os.geteuid() != 0:
        p.error("needs root (drop_caches)")
    if shutil.which("fio") is None and args.phase != "load":
        p.error("needs fio (apt-get install fio)")
    ensure_matplotlib()
    # A TERM (e.g. from a CI timeout) unwinds like Ctrl-C, so the cluster goes down.
    signal.signal(signal.SIGTERM, on_sigterm)

    cairn = os.environ.get("CAIRN")
    if not cairn:
        env = dict(os.environ)
        env.setdefault("CARGO_TARGET_DIR", "/var/tmp/cairn-ci-target")
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=HERE, env=env, check=True)
        cairn = str(Path(env["CARGO_TARGET_DIR"]) / "release" / "cairn")
    started = datetime.datetime.now()
    out = args.out or Path(f"/var/tmp/cairn-failure-bench/results-{started:%Y%m%d-%H%M%S}")
    out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    st = os.statvfs(args.work)
    need = args.volume * SIZE * 2 + max(args.volume, args.fio_size_min)
    if st.f_bavail * st.f_frsize < need:
        p.error(f"{args.work}: {st.f_bavail * st.f_frsize / 2**30:.1f} GiB writable, "
                f"want {need / 2**30:.1f} GiB (3 copies of the volume, room to overwrite, the fio file)")
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    meta = {"started": started.isoformat(timespec="seconds"), "commit": commit,
            "osds": osd_counts, "volume_bytes": args.volume, "down_out": args.down_out_text,
            "down_grace": args.down_grace_text or "20s (monitor default)", "pg_num": args.pg_num,
            "pool_size": SIZE, "pool_min_size": MIN_SIZE, "concurrency": CONCURRENCY,
            "object_size_bytes": OBJECT_SIZE, "healthy_secs": args.healthy, "after_secs": args.after,
            "loadavg_start": loadavg(), "nproc": os.cpu_count(), "work": str(args.work)}
    results = []
    try:
        for n in osd_counts:
            if args.phase in ("both", "load"):
                results.append(phase_load(cairn, args, n, out))
            if args.phase in ("both", "idle"):
                results.append(phase_idle(cairn, args, n, out))
    except KeyboardInterrupt:
        log("interrupted; the cluster was stopped")
        return 130
    finally:
        meta["loadavg_end"] = loadavg()
        (out / "summary.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
        shutil.rmtree(args.work / "cairn", ignore_errors=True)
    text = report(results, meta)
    (out / "summary.txt").write_text(text + "\n")
    print(text)
    print(f"\nresults in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
