#!/usr/bin/env bash
# OSD resident memory over a 4 MiB write, a cold sequential read and a
# 4 KiB write phase on a fresh `cairn up` cluster (3 OSDs, a size-3 pool
# of 64 PGs); prints each phase and the max RSS per OSD in MiB. Needs root
# (drop_caches) and a built binary.
set -u
C=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}/release/cairn
D=/var/tmp/cairn-rss
rm -rf $D
$C up --detach --data $D --base-port 18400 | tail -1
$C pool create bench --size 3 --min-size 2 --pg-num 64 --conf $D/cairn.toml > /dev/null
( while :; do for f in $D/run/osd.*.pid; do echo "$(basename $f .pid) $(ps -o rss= -p $(cat $f))"; done; sleep 1; done > /var/tmp/rss.txt ) &
RP=$!
j() { python3 -c "import json,sys; j=json.load(sys.stdin); print('$1', round(j['bandwidth_mib_per_sec']), round(j['iops']), j['errors'])"; }
$C bench object --conf $D/cairn.toml --pool bench --mode write --object-size 4M --duration 15s --json | j 4M
sync; echo 3 > /proc/sys/vm/drop_caches
$C bench object --conf $D/cairn.toml --pool bench --mode seq --json --cleanup | j seq
$C bench object --conf $D/cairn.toml --pool bench --mode write --object-size 4K --duration 10s --json --cleanup | j 4K
kill $RP
$C down --data $D > /dev/null
awk '{if($2>m[$1])m[$1]=$2} END{for(k in m) print k, m[k]/1024}' /var/tmp/rss.txt
rm -rf $D
