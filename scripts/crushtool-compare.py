#!/usr/bin/env python3
"""Measure Ceph crushtool's straw2 placement on a synthetic cluster.

Builds a root -> rack -> host -> osd map with crushtool (all buckets straw2,
jewel/"optimal" tunables, one replicated rule `chooseleaf firstn 0 type host`),
then measures:

  * distribution of PG replicas per OSD / host / rack,
  * data movement for a fixed set of topology-change scenarios,
  * mapping throughput,

and prints the result in the same JSON shape as `cairn placement simulate
--json`. With --cairn-json FILE it also prints a side-by-side markdown table
(to stdout, or to stderr when --json is given so stdout stays valid JSON).

Cluster layout: host h is in rack h // (H // R); OSD ids of host h are
h*N .. h*N+N-1; every OSD has weight 1.0. Placement inputs are x = 0..P-1
(crushtool feeds x straight into the rule; no pool/PG hashing).

Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RULE_ID = 0
ROOT = "default"
EXPECTED_TUNABLES = {
    "choose_local_tries": 0,
    "choose_local_fallback_tries": 0,
    "choose_total_tries": 50,
    "chooseleaf_descend_once": 1,
    "chooseleaf_vary_r": 1,
    "chooseleaf_stable": 1,
    "straw_calc_version": 1,
    "allowed_bucket_algs": 54,
}
MAPPING_RE = re.compile(r"^CRUSH rule \d+ x (\d+) \[([0-9,\s-]*)\]\s*$")
CRUSH_ITEM_NONE = 0x7FFFFFFF


class CompareError(Exception):
    pass


class Crush:
    """Thin wrapper around the crushtool binary working inside one directory."""

    def __init__(self, exe: str, workdir: str):
        self.exe = exe
        self.workdir = workdir

    def path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    def run(self, args: list[str], stdout=subprocess.PIPE) -> str:
        cmd = [self.exe] + args
        proc = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise CompareError(
                f"crushtool failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                f"{proc.stderr.strip()}"
            )
        return proc.stdout if stdout == subprocess.PIPE else ""

    def decompile(self, mapname: str) -> str:
        return self.run(["-d", self.path(mapname)])

    def test_args(self, mapname: str, size: int, min_x: int, max_x: int) -> list[str]:
        return [
            "-i", self.path(mapname), "--test", "--rule", str(RULE_ID),
            "--num-rep", str(size), "--min-x", str(min_x), "--max-x", str(max_x),
        ]

    def mappings(self, mapname: str, size: int, pg_num: int,
                 extra: list[str] | None = None) -> list[list[int]]:
        out = self.run(self.test_args(mapname, size, 0, pg_num - 1)
                       + (extra or []) + ["--show-mappings"])
        result: list[list[int] | None] = [None] * pg_num
        for line in out.splitlines():
            m = MAPPING_RE.match(line.strip())
            if not m:
                continue
            x = int(m.group(1))
            osds = [int(t) for t in m.group(2).replace(" ", "").split(",") if t]
            if 0 <= x < pg_num:
                result[x] = [o for o in osds if o != CRUSH_ITEM_NONE and o >= 0]
        missing = [x for x, r in enumerate(result) if r is None]
        if missing:
            raise CompareError(
                f"crushtool printed no mapping for {len(missing)} inputs "
                f"(first: x={missing[0]}) on map {mapname}"
            )
        return result  # type: ignore[return-value]


# --------------------------------------------------------------------------
# map construction


def parse_tunables(text: str) -> dict[str, int]:
    tun = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "tunable":
            tun[parts[1]] = int(parts[2])
    return tun


def verify_map(crush: Crush, mapname: str) -> str:
    """Check tunables and bucket algorithms of a compiled map; return its text."""
    text = crush.decompile(mapname)
    tun = parse_tunables(text)
    bad = {k: (tun.get(k), v) for k, v in EXPECTED_TUNABLES.items() if tun.get(k) != v}
    if bad:
        raise CompareError(f"map {mapname}: unexpected tunables (got, want): {bad}")
    algs = re.findall(r"^\s*alg\s+(\S+)", text, re.M)
    if not algs or any(a != "straw2" for a in algs):
        raise CompareError(f"map {mapname}: not all buckets are straw2: {sorted(set(algs))}")
    return text


def build_base_map(crush: Crush, racks: int, hosts: int, per_host: int, size: int) -> str:
    num_osds = hosts * per_host
    crush.run([
        "--build", "--num_osds", str(num_osds),
        "host", "straw2", str(per_host),
        "rack", "straw2", str(hosts // racks),
        "root", "straw2", "0",
        "-o", crush.path("built.bin"),
    ])
    text = crush.decompile("built.bin")

    # Rename the root bucket ("root" from --build) to "default".
    text, n = re.subn(r"^root\s+root\s*\{", f"root {ROOT} {{", text, flags=re.M)
    if n != 1:
        raise CompareError("could not find the root bucket produced by crushtool --build")

    # Force the tunables explicitly (the build already uses these on Ceph 16).
    lines = [l for l in text.splitlines() if not l.startswith("tunable ")]
    tun_lines = [f"tunable {k} {v}" for k, v in EXPECTED_TUNABLES.items()]
    start = 1 if lines and lines[0].startswith("# begin crush map") else 0
    lines = lines[:start] + tun_lines + lines[start:]
    text = "\n".join(lines) + "\n"

    # Replace whatever rules --build generated with our single replicated rule.
    idx = text.find("# rules")
    if idx < 0:
        idx = text.find("# end crush map")
    if idx < 0:
        raise CompareError("unexpected decompiled map layout (no '# rules' section)")
    rule = (
        "# rules\n"
        "rule replicated_rule {\n"
        f"\tid {RULE_ID}\n"
        "\ttype replicated\n"
        "\tmin_size 1\n"
        f"\tmax_size {max(10, size)}\n"
        f"\tstep take {ROOT}\n"
        "\tstep chooseleaf firstn 0 type host\n"
        "\tstep emit\n"
        "}\n\n# end crush map\n"
    )
    text = text[:idx] + rule
    with open(crush.path("base.txt"), "w") as f:
        f.write(text)
    crush.run(["-c", crush.path("base.txt"), "-o", crush.path("base.bin")])
    final = verify_map(crush, "base.bin")

    # Sanity-check the layout: host h holds osd h*N..h*N+N-1, rack r holds
    # hosts r*(H/R)..; guards against --build changing its grouping.
    buckets = dict(re.findall(r"^(?:host|rack|root)\s+(\S+)\s*\{(.*?)^\}", final, re.M | re.S))
    hpr = hosts // racks
    for h in range(hosts):
        items = re.findall(r"item\s+(\S+)", buckets.get(f"host{h}", ""))
        want = [f"osd.{h * per_host + i}" for i in range(per_host)]
        if items != want:
            raise CompareError(f"host{h} has items {items}, expected {want}")
    for r in range(racks):
        items = re.findall(r"item\s+(\S+)", buckets.get(f"rack{r}", ""))
        want = [f"host{r * hpr + i}" for i in range(hpr)]
        if items != want:
            raise CompareError(f"rack{r} has items {items}, expected {want}")
    return final


def derive_map(crush: Crush, src: str, dst: str, edits: list[list[str]]) -> None:
    """Apply a sequence of single crushtool edits (one per invocation)."""
    cur = src
    for i, edit in enumerate(edits):
        out = dst if i == len(edits) - 1 else f"{dst}.step{i}"
        crush.run(["-i", crush.path(cur)] + edit + ["-o", crush.path(out)])
        cur = out
    verify_map(crush, dst)


# --------------------------------------------------------------------------
# measurements


def summarize(counts: list[float], weights: list[float]) -> dict:
    total = sum(counts)
    wtot = sum(weights)
    mean = total / len(counts) if counts else 0.0
    mom = None
    if total > 0 and wtot > 0:
        ratios = [c / (total * w / wtot) for c, w in zip(counts, weights) if w > 0]
        mom = max(ratios) if ratios else None
    return {
        "min": min(counts) if counts else 0,
        "mean": round(mean, 6),
        "max": max(counts) if counts else 0,
        "stddev": round(statistics.pstdev(counts), 6) if counts else 0.0,
        "max_over_mean": round(mom, 6) if mom is not None else None,
    }


def distribution(maps: list[list[int]], racks: int, hosts: int, per_host: int,
                 size: int) -> dict:
    num_osds = hosts * per_host
    hpr = hosts // racks
    per_osd = [0] * num_osds
    for osds in maps:
        for o in osds:
            if 0 <= o < num_osds:
                per_osd[o] += 1
            else:
                raise CompareError(f"crushtool mapped to unknown osd.{o}")
    per_host_c = [sum(per_osd[h * per_host:(h + 1) * per_host]) for h in range(hosts)]
    per_rack_c = [sum(per_host_c[r * hpr:(r + 1) * hpr]) for r in range(racks)]
    return {
        "pg_replicas": sum(per_osd),
        "undersized_pgs": sum(1 for m in maps if len(m) < size),
        "per_osd": summarize(per_osd, [1.0] * num_osds),
        "per_host": summarize(per_host_c, [float(per_host)] * hosts),
        "per_rack": summarize(per_rack_c, [float(per_host * hpr)] * racks),
    }


def moved(before: list[list[int]], after: list[list[int]]) -> int:
    return sum(len(set(a) - set(b)) for b, a in zip(before, after))


def count_on(maps: list[list[int]], osds: set[int]) -> int:
    return sum(1 for m in maps for o in m if o in osds)


def movement(crush: Crush, base: list[list[int]], hosts: int, per_host: int,
             pg_num: int, size: int) -> list[dict]:
    n_old = hosts * per_host
    loc0 = ["--loc", "host", "host0", "--loc", "rack", "rack0", "--loc", "root", ROOT]
    new_host = f"host{hosts}"
    loc_new = ["--loc", "host", new_host, "--loc", "rack", "rack0", "--loc", "root", ROOT]
    host0_osds = set(range(per_host))
    added_host_osds = [n_old + 1 + i for i in range(per_host)]

    derive_map(crush, "base.bin", "add_osd.bin",
               [["--add-item", str(n_old), "1.0", f"osd.{n_old}"] + loc0])
    derive_map(crush, "base.bin", "add_host.bin",
               [["--add-item", str(o), "1.0", f"osd.{o}"] + loc_new for o in added_host_osds])
    derive_map(crush, "base.bin", "rm_osd.bin", [["--remove-item", "osd.0"]])
    derive_map(crush, "base.bin", "rm_host.bin",
               [["--remove-item", f"osd.{o}"] for o in sorted(host0_osds)]
               + [["--remove-item", "host0"]])
    derive_map(crush, "base.bin", "reweight.bin", [["--reweight-item", "osd.0", "0.5"]])

    def m(name: str, extra: list[str] | None = None) -> list[list[int]]:
        return crush.mappings(name, size, pg_num, extra)

    scenarios = []
    after = m("base.bin", ["--weight", "0", "0"])
    scenarios.append(("mark osd.0 out", after, count_on(base, {0})))
    after = m("add_osd.bin")
    scenarios.append(("add 1 osd to host0", after, count_on(after, {n_old})))
    after = m("add_host.bin")
    scenarios.append((f"add host ({per_host} osds) to rack0", after,
                      count_on(after, set(added_host_osds))))
    after = m("rm_osd.bin")
    scenarios.append(("remove osd.0", after, count_on(base, {0})))
    after = m("rm_host.bin")
    scenarios.append(("remove host0", after, count_on(base, host0_osds)))
    after = m("reweight.bin")
    scenarios.append(("reweight osd.0 to 0.5x", after,
                      abs(count_on(base, {0}) - count_on(after, {0}))))

    rows = []
    for name, after, optimal in scenarios:
        mv = moved(base, after)
        rows.append({
            "scenario": name,
            "moved_replicas": mv,
            "optimal_replicas": optimal,
            "moved_pct": round(100.0 * mv / (pg_num * size), 6),
            "ratio": round(mv / optimal, 6) if optimal else None,
        })
    return rows


def throughput(crush: Crush, size: int, inputs: int, runs: int = 3) -> dict:
    def timed(n: int) -> float:
        args = [crush.exe] + crush.test_args("base.bin", size, 0, n - 1) + ["--show-statistics"]
        samples = []
        for _ in range(runs):
            t0 = time.perf_counter()
            proc = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            samples.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise CompareError(f"crushtool failed: {' '.join(args)}\n{proc.stderr.decode()}")
        return statistics.median(samples)

    full = timed(inputs)
    startup = timed(1)
    secs = max(full - startup, 1e-9)
    return {
        "mappings": inputs,
        "seconds": round(secs, 6),
        "mappings_per_sec": round(inputs / secs, 1),
        "wall_seconds_full": round(full, 6),
        "wall_seconds_startup": round(startup, 6),
    }


# --------------------------------------------------------------------------
# output


def get(d, *keys):
    for k in keys:
        if isinstance(d, dict) and k in d:
            d = d[k]
        else:
            return None
    return d


def fmt(v, kind: str = "f") -> str:
    if isinstance(v, bool) or v is None:
        return "n/a"
    if isinstance(v, (int, float)) and not (isinstance(v, float) and not math.isfinite(v)):
        if kind == "rate":
            return f"{v:,.0f}"
        if kind == "pct":
            return f"{v:.2f}%"
        return f"{v:.4f}" if isinstance(v, float) else str(v)
    return "n/a"


def markdown_table(ours: dict, cairn) -> str:
    rows = [
        ("per_osd max_over_mean", ("distribution", "per_osd", "max_over_mean"), "f"),
        ("per_osd stddev", ("distribution", "per_osd", "stddev"), "f"),
        ("per_host max_over_mean", ("distribution", "per_host", "max_over_mean"), "f"),
    ]
    out = ["| metric | crushtool | cairn |", "|---|---:|---:|"]
    for label, path, kind in rows:
        out.append(f"| {label} | {fmt(get(ours, *path), kind)} | {fmt(get(cairn, *path), kind)} |")

    def by_name(doc) -> dict:
        mv = get(doc, "movement")
        res = {}
        if isinstance(mv, list):
            for r in mv:
                if isinstance(r, dict) and isinstance(r.get("scenario"), str):
                    res.setdefault(r["scenario"], r)
        return res

    ours_mv, cairn_mv = by_name(ours), by_name(cairn)
    names = list(ours_mv) + [n for n in cairn_mv if n not in ours_mv]
    for n in names:
        a, b = ours_mv.get(n, {}), cairn_mv.get(n, {})
        out.append(f"| {n}: ratio | {fmt(a.get('ratio'))} | {fmt(b.get('ratio'))} |")
        out.append(f"| {n}: moved_pct | {fmt(a.get('moved_pct'), 'pct')} "
                   f"| {fmt(b.get('moved_pct'), 'pct')} |")
    out.append(f"| mappings/s | {fmt(get(ours, 'throughput', 'mappings_per_sec'), 'rate')} "
               f"| {fmt(get(cairn, 'throughput', 'mappings_per_sec'), 'rate')} |")
    return "\n".join(out)


def human(res: dict) -> str:
    c, p, d, t = res["cluster"], res["pool"], res["distribution"], res["throughput"]
    lines = [
        f"crushtool straw2: {c['osds']} osds / {c['hosts']} hosts / {c['racks']} racks "
        f"(weight {c['weight_total']}), pg_num {p['pg_num']} size {p['size']} "
        f"failure domain {p['failure_domain']}",
        f"replicas placed: {d['pg_replicas']}, undersized pgs: {d['undersized_pgs']}",
    ]
    for lvl in ("per_osd", "per_host", "per_rack"):
        s = d[lvl]
        lines.append(f"  {lvl:9s} min {s['min']} mean {s['mean']:.2f} max {s['max']} "
                     f"stddev {s['stddev']:.2f} max/mean {fmt(s['max_over_mean'])}")
    lines.append("movement:")
    for r in res["movement"]:
        lines.append(f"  {r['scenario']:28s} moved {r['moved_replicas']:7d} "
                     f"optimal {r['optimal_replicas']:7d} ({r['moved_pct']:.2f}%) "
                     f"ratio {fmt(r['ratio'])}")
    lines.append(f"throughput: {t['mappings']} inputs x {p['size']} in {t['seconds']:.4f}s "
                 f"= {t['mappings_per_sec']:,.0f} mappings/s")
    return "\n".join(lines)


# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--racks", type=int, required=True)
    ap.add_argument("--hosts", type=int, required=True)
    ap.add_argument("--osds-per-host", type=int, required=True)
    ap.add_argument("--pg-num", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--workdir", help="directory for crushtool files (kept); "
                    "default: a temp dir under /var/tmp, removed afterwards")
    ap.add_argument("--cairn-json", help="Cairn `placement simulate --json` output to compare")
    ap.add_argument("--throughput-pgs", type=int, default=100000)
    ap.add_argument("--crushtool", default="crushtool", help="crushtool binary (default: from PATH)")
    ap.add_argument("--json", action="store_true", help="print JSON on stdout")
    a = ap.parse_args()

    def die(msg: str) -> int:
        print(f"crushtool-compare: error: {msg}", file=sys.stderr)
        return 2

    for name in ("racks", "hosts", "osds_per_host", "pg_num", "size", "throughput_pgs"):
        if getattr(a, name) < 1:
            return die(f"--{name.replace('_', '-')} must be >= 1")
    if a.hosts % a.racks:
        return die(f"--hosts ({a.hosts}) must be divisible by --racks ({a.racks})")
    exe = shutil.which(a.crushtool)
    if exe is None:
        return die(f"crushtool not found ({a.crushtool!r}); install ceph-base / ceph-common "
                   "or pass --crushtool PATH")

    cairn = None
    if a.cairn_json:
        try:
            with open(a.cairn_json) as f:
                cairn = json.load(f)
            # `cairn placement simulate --json` reports per pool under "pools".
            if isinstance(cairn, dict) and cairn.get("pools"):
                cairn = {**cairn["pools"][0], "cluster": cairn.get("cluster")}
        except (OSError, json.JSONDecodeError) as e:
            return die(f"cannot read --cairn-json {a.cairn_json}: {e}")

    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
        workdir, cleanup = a.workdir, False
    else:
        workdir, cleanup = tempfile.mkdtemp(prefix="crushtool-compare-", dir="/var/tmp"), True
    try:
        crush = Crush(exe, workdir)
        build_base_map(crush, a.racks, a.hosts, a.osds_per_host, a.size)
        base = crush.mappings("base.bin", a.size, a.pg_num)
        res = {
            "tool": "crushtool",
            "cluster": {
                "osds": a.hosts * a.osds_per_host,
                "hosts": a.hosts,
                "racks": a.racks,
                "weight_total": float(a.hosts * a.osds_per_host),
            },
            "pool": {"pg_num": a.pg_num, "size": a.size, "failure_domain": "host"},
            "distribution": distribution(base, a.racks, a.hosts, a.osds_per_host, a.size),
            "movement": movement(crush, base, a.hosts, a.osds_per_host, a.pg_num, a.size),
            "throughput": throughput(crush, a.size, a.throughput_pgs),
        }
    except CompareError as e:
        return die(str(e))
    finally:
        if cleanup:
            shutil.rmtree(workdir, ignore_errors=True)

    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(human(res))
    if cairn is not None:
        table = markdown_table(res, cairn)
        print(("\n" if not a.json else "") + table, file=sys.stderr if a.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
