#!/bin/busybox sh
# PID 1 of the cgroup v2 VM (tests/vm/run_vm.py, part "cgroup2"): Debian
# 12's stock kernel with the memory controller on the unified hierarchy,
# mounted and laid out as systemd does (system.slice/NAME.service; a unit's
# MemoryMax= is its group's memory.max, MemoryHigh= its memory.high:
# systemd.resource-control(5)).  The host where `make test` runs has the
# memory controller on cgroup v1; here census --on and serve's census-on
# meet v2's memory.max, memory.events, memory.pressure and a read-only
# cgroup file system (ProtectControlGroups=, systemd.exec(5)).  Prints
# sections between @@ markers; run_vm.py judges them.
. /lib.sh
CG=/sys/fs/cgroup
mount -t cgroup2 none $CG
echo +memory >$CG/cgroup.subtree_control
mkdir $CG/system.slice
echo +memory >$CG/system.slice/cgroup.subtree_control
echo "@@CGROUP2 $(cat $CG/system.slice/cgroup.controllers)"

# unit NAME MAX HIGH: the group systemd makes for NAME.service with
# MemoryMax=MAX and MemoryHigh=HIGH (bytes or "max"), no swap
unit() {
	u=$CG/system.slice/$1.service
	mkdir $u
	echo $2 >$u/memory.max
	echo $3 >$u/memory.high
	echo 0 >$u/memory.swap.max
}

# wait_for FILE TEXT SECONDS: until FILE holds TEXT; 1 if it never does
wait_for() {
	i=0
	until grep -q "$2" "$1" 2>/dev/null; do
		usleep 100000
		i=$((i + 1))
		[ $i -gt $(($3 * 10)) ] && return 1
	done
	return 0
}

# leaker UNIT OUT ARGS...: oomleak --wait ARGS started in UNIT's group, its
# output into OUT; its PID in $t once it printed READY; `echo go >&3` starts it
leaker() {
	lu=$1 lo=$2
	shift 2
	rm -f /tmp/go
	mkfifo /tmp/go
	exec 3<>/tmp/go
	sh -c 'echo $$ >'"$lu"'/cgroup.procs && exec "$@"' sh $FX/oomleak --wait "$@" </tmp/go >$lo 2>&1 &
	t=$!
	wait_for $lo READY 120
}

# section NAME RC OUT ERR REPORT: what run_vm.py's sections() reads
section() {
	echo "@@BEGIN $1"
	echo "@@RC $2"
	echo "@@STDOUT"
	cat $3
	echo "@@STDERR"
	cat $4
	echo "@@REPORT"
	cat $5 2>/dev/null
	echo "@@END $1"
}

# 1. census --on oom: the leak in a unit with MemoryMax=96M until the kernel
# kills it; the census of the kill
unit leak 100663296 max
leaker $u /tmp/ol.out step=2
$CH census -p $t --rate 1e-4 --by stack --on oom -o /tmp/oom.txt >/dev/null 2>/tmp/ce.err &
c=$!
wait_for /tmp/ce.err "the census will be written when" 300 || echo "@@OOM camlheap never watching"
echo go >&3
wait $t
echo "TARGET_RC $?" >>/tmp/ol.out
exec 3>&-
wait $c
crc=$?
echo "OOM_KILL $(grep oom_kill $u/memory.events)" >>/tmp/ol.out
section oom_v2 $crc /tmp/ol.out /tmp/ce.err /tmp/oom.txt

# 2. census --on pressure: the leak done and idle in a unit with
# MemoryHigh=64M and MemoryMax=160M; then a second leaker in the same unit
# goes past MemoryHigh, where the kernel throttles it (its tasks stall on
# memory: PSI of the unit's group)
unit stall 167772160 67108864
leaker $u /tmp/pl.out n=8 step=2 idle
# (--duration: a trigger that never fires fails the case, not the VM)
$CH census -p $t --rate 1e-4 --by stack --on pressure=10 --duration 300 -o /tmp/pr.txt >/dev/null 2>/tmp/pe.err &
c=$!
wait_for /tmp/pe.err "the census will be written when" 300 || echo "@@PRESSURE camlheap never watching"
echo go >&3
wait_for /tmp/pl.out DONE 300
sh -c 'echo $$ >'"$u"'/cgroup.procs && exec "$@"' sh $FX/oomleak step=4 >/dev/null 2>&1 &
hog=$!
wait $c
crc=$?
kill -9 $hog $t
wait $hog
wait $t
exec 3>&-
echo "PRESSURE $(cat $u/memory.pressure | head -1)" >>/tmp/pl.out
section pressure_v2 $crc /tmp/pl.out /tmp/pe.err /tmp/pr.txt

# 3. serve with census-on in a unit of its own whose cgroup file system is
# read-only (ProtectControlGroups=yes: a mount namespace), a process of the
# target in a unit with MemoryMax=96M leaking until the OOM kill
unit camlheap max max
unit leak2 100663296 max
mkdir -p /tmp/sv
printf '[serve]\noutput = /tmp/sv/out\ninterval = 600\nlisten = none\nsocket = /tmp/sv/sock\n[target:leak]\nexe = %s\nrate = 1e-4\ncensus-on = oom, pressure=50\n' $FX/oomleak >/tmp/sv/c.conf
sh -c 'echo $$ >'"$CG"'/system.slice/camlheap.service/cgroup.procs && exec unshare -m sh -c "mount -o remount,bind,ro '"$CG"' '"$CG"' && exec $0 serve --config /tmp/sv/c.conf"' $CH >/tmp/sv/log 2>&1 &
sv=$!
sleep 2
leaker $CG/system.slice/leak2.service /tmp/sl.out step=2 pause=100
wait_for /tmp/sv/log "recording PID $t" 300 || echo "@@SERVE camlheap never recording"
echo go >&3
wait $t
echo "TARGET_RC $?" >>/tmp/sl.out
exec 3>&-
wait_for /tmp/sv/log "PID $t no longer followed" 300
kill $sv
wait $sv
src=$?
d=$(ls -d /tmp/sv/out/leak/$t-* 2>/dev/null | head -1)
echo "FILES $(ls $d | tr '\n' ' ')" >>/tmp/sl.out
section serve_v2 $src /tmp/sl.out /tmp/sv/log "$(ls $d/census-*-oom.txt 2>/dev/null | head -1)"
echo "@@DONE"
poweroff -f
