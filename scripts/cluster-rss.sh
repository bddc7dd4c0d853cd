#!/usr/bin/env bash
# OSD resident memory over the phases of one benchmark round (4 MiB
# write, cold sequential and random reads, 4 KiB write and random read) on a fresh `cairn up` cluster (3 OSDs, a size-3 pool
# of 64 PGs); prints each phase and the max RSS per OSD in MiB. Needs root
# (drop_caches) and a built binary. Usage: scripts/cluster-rss.sh [ROUNDS]
set -u
C=${CARGO_TARGET_DIR:-/var/tmp/cairn-ci-target}/release/cairn
D=/var/tmp/cairn-rss
rm -rf $D
$C up --detach --data $D --base-port 18400 | tail -1
$C pool create bench --size 3 --min-size 2 --pg-num 64 --conf $D/cairn.toml > /dev/null
( while :; do for f in $D/run/osd.*.pid; do echo "$(basename $f .pid) $(ps -o rss= -p $(cat $f))"; done; sleep 1; done > /var/tmp/rss.txt ) &
RP=$!
j() { python3 -c "import json,sys; j=json.load(sys.stdin); print('$1', round(j['bandwidth_mib_per_sec']), round(j['iops']), j['errors'])"; }
B="$C bench object --conf $D/cairn.toml --pool bench --json"
for round in $(seq 1 "${1:-1}"); do
echo "round $round"
$B --mode write --object-size 4M --duration 20s | j 4M-write
sync; echo 3 > /proc/sys/vm/drop_caches
$B --mode seq | j 4M-seq
sync; echo 3 > /proc/sys/vm/drop_caches
$B --mode rand --duration 20s --cleanup | j 4M-rand
$B --mode write --object-size 4K --duration 20s | j 4K-write
sync; echo 3 > /proc/sys/vm/drop_caches
$B --mode rand --duration 20s --cleanup | j 4K-rand
done
kill $RP
$C down --data $D > /dev/null
awk '{if($2>m[$1])m[$1]=$2} END{for(k in m) print k, m[k]/1024}' /var/tmp/rss.txt
rm -rf $D
