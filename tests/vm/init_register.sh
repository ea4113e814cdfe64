#!/bin/busybox sh
# PID 1 of the register-executor VM (tests/vm/run_vm.py): a kernel whose
# uprobe programs may change the probed thread's registers (Debian
# unstable's), booted plainly or with lockdown=integrity.  Runs camlheap's
# register executor against the fixtures (OCaml 4.13 from Debian, 5.3 and
# 5.1 from the cached toolchains) and prints everything between @@ markers
# on the serial console; the host side judges it with the same checks as
# the other executors'.  Nothing here decides pass or fail.
. /lib.sh

# what auto picks here, and whether the kernel executor is allowed
run probe $CH record --duration 0.2 -o /tmp/r.txt -- $FX/alloc_minor n=1
run kernel_allowed $CH record --executor kernel --duration 0.2 -o /tmp/r.txt -- $FX/alloc_minor n=1

# OCaml 4.13 (Debian's): sites, exactness, memprof, census, identity
run sites_1e4 $CH record --executor register --rate 1e-4 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=4000000
run rate_one $CH record --executor register --rate 1 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=3000 ratio c comb
run memprof $CH record --executor register --rate 1e-4 --top 100000 --by stack -o /tmp/r.txt -- $FX/alloc_minor n=4000000 memprof=1e-4
run census $CH record --executor register --rate 1e-3 --live --top 100000 --by stack -o /tmp/r.txt -- $FX/leak
run plain $FX/alloc_minor n=1000000 $DETERMINISTIC
run profiled $CH record --executor register --rate 1e-4 -o /tmp/r.txt -- $FX/alloc_minor n=1000000 $DETERMINISTIC
run cdeep_plain $FX/cdeep n=200
run cdeep $CH record --executor register --rate 1e-4 --format json -o /tmp/r.txt -- $FX/cdeep n=200
export OCAMLRUNPARAM=s=4k
run gctiming_plain $FX/gctiming n=100000
run gctiming $CH record --executor register --rate 1e-2 --format json -o /tmp/r.txt -- $FX/gctiming n=100000
unset OCAMLRUNPARAM

# kill -9 of camlheap attached to a running fixture, at spread-out moments
kill9 KILL9 register 1e-4 60000 8 0 $FX/alloc_minor n=4000000 $DETERMINISTIC

# OCaml 5.3 and 5.1: caml_reset_young_limit's young_trigger load
for v in 53 51; do
	F=/work/fx$v
	run v${v}_sites $CH record --executor register --rate 1e-4 --top 100000 --by stack -o /tmp/r.txt -- $F/alloc_minor n=4000000
	run v${v}_rate_one $CH record --executor register --rate 1 --top 100000 --by stack -o /tmp/r.txt -- $F/alloc_minor n=3000 ratio c comb
	run v${v}_plain $F/alloc_minor n=1000000 $DETERMINISTIC
	run v${v}_profiled $CH record --executor register --rate 1e-4 -o /tmp/r.txt -- $F/alloc_minor n=1000000 $DETERMINISTIC
	export OCAMLRUNPARAM=s=4k
	run v${v}_gctiming_plain $F/gctiming n=100000
	run v${v}_gctiming $CH record --executor register --rate 1e-2 --format json -o /tmp/r.txt -- $F/gctiming n=100000
	unset OCAMLRUNPARAM
done

# timings: the target's wall time plain, with in-process Gc.Memprof, under
# the register executor and (where the kernel allows it) the kernel one,
# interleaved, 3 rounds, microseconds (/proc/uptime: 10 ms steps)
KERNEL_OK=0
$CH record --executor kernel --duration 0.1 -o /tmp/rt.txt -- $FX/alloc_minor n=1 >/dev/null 2>&1 && KERNEL_OK=1
for round in 1 2 3; do
	for rate in 1e-5 1e-4; do
		for w in 4:alloc_minor 53:alloc_minor; do
			fam=${w%%:*}
			prog=${w#*:}
			if [ $fam = 4 ]; then F=$FX; else F=/work/fx53; fi
			if [ $prog = domains ]; then A="n=20000"; else A="ratio c n=4000000"; fi
			name=$prog$([ $fam = 53 ] && echo 53)
			echo "@@TIME $name plain $rate $(timeit $F/$prog $A)"
			[ $prog = alloc_minor ] && echo "@@TIME $name memprof $rate $(timeit $F/$prog $A memprof=$rate null)"
			echo "@@TIME $name register $rate $(timeit $CH record --executor register --rate $rate -o /tmp/rt.txt -- $F/$prog $A)"
			echo "@@REPORTED $name register $rate $(grep -E '^(duration|samples|minor|executor)' /tmp/rt.txt | tr '\n' '|')"
			if [ $KERNEL_OK = 1 ]; then
				echo "@@TIME $name kernel $rate $(timeit $CH record --executor kernel --rate $rate -o /tmp/rt.txt -- $F/$prog $A)"
			fi
		done
	done
done
# Several domains last: on 7.2.13 the kernel oopses in camlheap's BPF stack
# walker (unwind5_step) with several threads allocating on one CPU, with
# any executor (run_vm.py reports the oops)
echo "@@MULTI"
for v in 53 51; do
	F=/work/fx$v
	run v${v}_domains $CH record --executor register --rate 1e-3 --by-domain --format json -o /tmp/r.txt -- $F/domains n=4000
	export OCAMLRUNPARAM=s=4k
	run v${v}_census $CH record --executor register --rate 1e-3 --live --format json -o /tmp/r.txt -- $F/dropall domains=4 n=30000
	unset OCAMLRUNPARAM
done
# kill -9 of camlheap attached to four domains (5.3, one spinning)
kill9 KILL9D register 1e-3 90000 6 1 /work/fx53/domains n=30000

echo "@@DONE"
poweroff -f
