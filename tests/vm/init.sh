#!/bin/busybox sh
# PID 1 of the test VM (tests/vm/run_vm.py): Debian's stock kernel, booted
# without Secure Boot, so kernel lockdown is off and bpf_probe_write_user is
# allowed: the kernel executor can run.  Runs camlheap against the fixtures
# and prints everything between @@ markers on the serial console; the host
# side judges it.  Nothing here decides pass or fail.
. /lib.sh
FX53=/work/fx53

run probe $CH record --executor kernel --duration 0.2 -o /tmp/r.txt -- $FX/alloc_minor n=1
run sites_1e4 $CH record --executor kernel --rate 1e-4 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=4000000
run sites_1e5 $CH record --executor kernel --rate 1e-5 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=10000000
run rate_one $CH record --executor kernel --rate 1 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=3000 ratio c comb
run memprof $CH record --executor kernel --rate 1e-4 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=4000000 memprof=1e-4
run census $CH record --executor kernel --rate 1e-3 --live --top 100000 --by stack -o /tmp/r.txt -- $FX/leak
run plain $FX/alloc_minor n=1000000 $DETERMINISTIC
run profiled $CH record --executor kernel --rate 1e-4 -o /tmp/r.txt -- $FX/alloc_minor n=1000000 $DETERMINISTIC

# kill -9 of camlheap (attached to a running fixture) at spread-out moments
kill9 KILL9 kernel 1e-4 60000 8 0 $FX/alloc_minor n=4000000 $DETERMINISTIC

# OCaml 5.3 and 5.1: the kernel executor lends young_trigger to
# caml_reset_young_limit (bpf/minor5.bpf.h), on one domain and on four
for v in 53 51; do
	F=/work/fx$v
	run v${v}_sites $CH record --executor kernel --rate 1e-4 --top 100000 --by stack -o /tmp/r.txt -- $F/alloc_minor n=4000000
	run v${v}_rate_one $CH record --executor kernel --rate 1 --top 100000 --by stack -o /tmp/r.txt -- $F/alloc_minor n=3000 ratio c comb
	run v${v}_domains $CH record --executor kernel --rate 1e-3 --by-domain --format json -o /tmp/r.txt -- $F/domains n=4000
	run v${v}_plain $F/alloc_minor n=1000000 $DETERMINISTIC
	run v${v}_profiled $CH record --executor kernel --rate 1e-4 -o /tmp/r.txt -- $F/alloc_minor n=1000000 $DETERMINISTIC
done

# --malloc on this kernel: uprobes and uretprobes on libc's allocator
run malloc $CH record --executor kernel --malloc --rate 1e-3 --format json -o /tmp/r.txt -- $FX/cmalloc n=300
run malloc_plain $FX/cmalloc n=300
run malloc53 $CH record --executor kernel --malloc --rate 1e-3 --format json -o /tmp/r.txt -- $FX53/cmalloc n=300
run malloc53_plain $FX53/cmalloc n=300

# the overhead budget on this kernel: samples thinned in BPF (alloc.bpf.c thin_samples)
run budget $CH record --executor kernel --rate 1e-3 --budget 1000 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=2000000

# camlheap serve on this kernel: discovery (raw tracepoint), a worker, the
# socket, camlheap status, a clean stop
mkdir -p /tmp/sv
printf '[serve]\noutput = /tmp/sv/out\ninterval = 1\nlisten = none\nsocket = /tmp/sv/sock\n[target:am]\nexe = %s\nrate = 1e-3\n' $FX/alloc_minor >/tmp/sv/c.conf
$CH serve --config /tmp/sv/c.conf >/tmp/sv/log 2>&1 &
sv=$!
sleep 2
$FX/alloc_minor n=8000000 >/tmp/sv/target.out &
t=$!
sleep 4
$CH status --socket /tmp/sv/sock >/tmp/sv/status 2>&1
echo "@@SERVE_STATUS_RC $?"
wait $t
echo "@@SERVE_TARGET_RC $?"
sleep 2
kill $sv
wait $sv
echo "@@SERVE_RC $?"
echo "@@SERVE_LOG"
cat /tmp/sv/log
echo "@@SERVE_STATUS"
cat /tmp/sv/status
echo "@@SERVE_FILES $(ls /tmp/sv/out/am/*/ | tr '\n' ' ')"

# kill -9 of camlheap attached to four domains (5.3, one spinning); every
# other time its probe holder is killed at the same instant (killall), so
# that a young_trigger lent at that moment is never given back
kill9 KILL9D kernel 1e-3 90000 8 1 /work/fx53/domains n=30000

# timings: the target's wall time, plain and under each configuration
# (interleaved, 3 rounds), in microseconds (/proc/uptime: 10 ms steps;
# busybox's date has no %N)
cd /tmp
cp /work/big.ml /tmp/big.ml
run ocamlopt_check ocamlopt.opt -g -c big.ml
for round in 1 2 3; do
	for rate in 1e-5 1e-4; do
		echo "@@TIME alloc_minor plain $rate $(timeit $FX/alloc_minor ratio c n=4000000)"
		echo "@@TIME alloc_minor memprof $rate $(timeit $FX/alloc_minor ratio c n=4000000 memprof=$rate null)"
		timeit $CH record --executor kernel --rate $rate -o /tmp/rt.txt -- $FX/alloc_minor ratio c n=4000000 >/dev/null
		echo "@@REPORTED alloc_minor kernel $rate $(grep -E '^(duration|samples|executor)' /tmp/rt.txt | tr '\n' '|')"
		rm -f big.cmi big.cmx big.o
		echo "@@TIME ocamlopt plain $rate $(timeit ocamlopt.opt -g -c big.ml)"
		rm -f big.cmi big.cmx big.o
		timeit $CH record --executor kernel --rate $rate -o /tmp/rt.txt -- ocamlopt.opt -g -c big.ml >/dev/null
		echo "@@REPORTED ocamlopt kernel $rate $(grep -E '^(duration|samples|executor)' /tmp/rt.txt | tr '\n' '|')"
		echo "@@TIME alloc_minor53 plain $rate $(timeit $FX53/alloc_minor ratio c n=4000000)"
		echo "@@TIME alloc_minor53 memprof $rate $(timeit $FX53/alloc_minor ratio c n=4000000 memprof=$rate null)"
		timeit $CH record --executor kernel --rate $rate -o /tmp/rt.txt -- $FX53/alloc_minor ratio c n=4000000 >/dev/null
		echo "@@REPORTED alloc_minor53 kernel $rate $(grep -E '^(duration|samples|executor)' /tmp/rt.txt | tr '\n' '|')"
		echo "@@TIME domains53 plain $rate $(timeit $FX53/domains n=20000)"
		timeit $CH record --executor kernel --rate $rate -o /tmp/rt.txt -- $FX53/domains n=20000 >/dev/null
		echo "@@REPORTED domains53 kernel $rate $(grep -E '^(duration|samples|executor)' /tmp/rt.txt | tr '\n' '|')"
	done
done
echo "@@DONE"
poweroff -f
