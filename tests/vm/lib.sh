# What every init of the test VMs shares (tests/vm/run_vm.py puts this
# file at /lib.sh and the init sources it): the mounts, power-off on exit,
# the @@ markers of the kernel and lockdown, run() and timeit().
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t securityfs none /sys/kernel/security 2>/dev/null
export PATH=/bin:/usr/bin
# PID 1 must not exit (the kernel panics): whatever happens, power off
trap 'poweroff -f' EXIT
FX=/work/fixtures
CH=/work/camlheap
DETERMINISTIC="ratio c comb fin sig"

# Static keys camlheap's runs would otherwise switch on and off again and
# again (BPF run-time statistics, the sched_process_exec/exit/fork
# tracepoints it attaches to), held on for the whole boot: each switch
# patches kernel text with the int3 protocol of text_poke_bp, and under
# qemu's software emulation with two vCPUs that once in a few hundred
# switches ended in "Oops: int3" at the patched site (7.2.13: __schedule,
# from perf_event_open); with the keys held on, no text is patched.
echo 1 >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null
mount -t tracefs none /sys/kernel/tracing 2>/dev/null
for e in sched_process_exec sched_process_exit sched_process_fork; do
	echo 1 >/sys/kernel/tracing/events/sched/$e/enable 2>/dev/null
done

echo "@@UNAME $(uname -r)"
echo "@@LOCKDOWN $(cat /sys/kernel/security/lockdown 2>/dev/null || echo unknown)"
echo "@@NPROC $(nproc)"

# run NAME CMD...: its status, stdout, stderr, and camlheap's report /tmp/r.txt
run() {
	name=$1
	shift
	rm -f /tmp/r.txt
	"$@" >/tmp/o 2>/tmp/e
	rc=$?
	echo "@@BEGIN $name"
	echo "@@RC $rc"
	echo "@@STDOUT"
	cat /tmp/o
	echo "@@STDERR"
	cat /tmp/e
	echo "@@REPORT"
	cat /tmp/r.txt 2>/dev/null
	echo "@@END $name"
}

# timeit CMD...: its wall time in microseconds and status (/proc/uptime:
# 10 ms steps; busybox's date has no %N)
now() { cut -d' ' -f1 /proc/uptime; }
timeit() {
	s=$(now)
	"$@" >/dev/null 2>&1
	rc=$?
	e=$(now)
	awk -v s="$s" -v e="$e" -v rc=$rc 'BEGIN { printf "%d rc=%d", (e - s) * 1000000, rc }'
}

# alive PID: the process runs (a child that ended and is not reaped yet is a
# zombie: kill -0 would still succeed)
alive() {
	[ -r /proc/$1/status ] && ! grep -q "^State:[[:space:]]*Z" /proc/$1/status
}

# kill9 TAG EXECUTOR RATE STEP_US N KILLALL CMD...: camlheap attached to CMD
# (run in the background) with EXECUTOR at RATE, killed with -9 (every other
# time together with its probe holder, `killall`, when KILLALL is 1): in odd
# runs i * STEP_US microseconds after it started (during the attach, as a
# rule), in even runs i * STEP_US after it said it was recording (its
# executor at work); then CMD alone. "@@TAG i rc=.. md5=.. attached=0|1" of
# each run's status and output and whether camlheap had said it was
# recording and still ran when killed, and "@@TAG ref rc=.. md5=.." of CMD alone
kill9() {
	tag=$1 ex=$2 rate=$3 step=$4 n=$5 all=$6
	shift 6
	i=1
	while [ $i -le $n ]; do
		rm -f /tmp/k /tmp/kerr
		"$@" >/tmp/k &
		t=$!
		$CH record -p $t --executor $ex --rate $rate -o /tmp/rk.txt 2>/tmp/kerr &
		c=$!
		if [ $((i % 2)) = 0 ]; then
			j=0
			until grep -q "recording PID" /tmp/kerr || ! alive $c || [ $j -gt 1200 ]; do
				usleep 50000
				j=$((j + 1))
			done
		fi
		usleep $((i * step))
		attached=0
		grep -q "recording PID" /tmp/kerr && alive $c && attached=1
		if [ $all = 1 ] && [ $((i % 2)) = 0 ]; then killall -9 camlheap; else kill -9 $c; fi
		wait $t
		rc=$?
		wait $c 2>/dev/null
		echo "@@$tag $i rc=$rc md5=$(md5sum </tmp/k | cut -d' ' -f1) attached=$attached"
		i=$((i + 1))
	done
	"$@" >/tmp/k
	echo "@@$tag ref rc=$? md5=$(md5sum </tmp/k | cut -d' ' -f1)"
}
