# The systemd VM's test (tests/vm/run_vm.py, part "systemd"): Debian 12's
# systemd as PID 1, camlheap serve as the unit make install ships
# (dist/camlheap.service.in) with census-on = oom, and a program of the
# target in a unit with MemoryMax= leaking until the OOM kill.  Prints
# @@ lines; run_vm.py judges them.
export SYSTEMD_COLORS=0 SYSTEMD_PAGER=
echo "@@UNAME $(uname -r)"
echo "@@SYSTEMD $(systemctl --version | head -1)"
echo "@@CGROUP $(stat -f -c %T /sys/fs/cgroup)"
# until TEXT is in camlheap's journal, at most SECONDS
journal_wait() {
	for _ in $(seq $(($2 * 5))); do
		journalctl -u camlheap -o cat | grep -q "$1" && return 0
		sleep 0.2
	done
	return 1
}
systemctl start camlheap.service
echo "@@SERVE_START rc=$? $(systemctl is-active camlheap.service)"
mkfifo /run/oomleak.go
systemctl start --no-block oomleak.service
# read-write: never blocks, whether or not the service opened its end
exec 3<>/run/oomleak.go
pid=$(systemctl show -p MainPID --value oomleak.service)
echo "@@LEAK_PID $pid"
journal_wait "recording PID $pid" 300 || echo "@@NEVER_RECORDING"
echo go >&3
exec 3>&-
for _ in $(seq 1500); do
	systemctl is-active -q oomleak.service || break
	sleep 0.2
done
echo "@@LEAK_RESULT $(systemctl show -p Result --value oomleak.service) status=$(systemctl show -p ExecMainStatus --value oomleak.service) code=$(systemctl show -p ExecMainCode --value oomleak.service)"
journal_wait "PID $pid no longer followed" 300 || echo "@@NEVER_UNFOLLOWED"
echo "@@SERVE_AFTER $(systemctl is-active camlheap.service) restarts=$(systemctl show -p NRestarts --value camlheap.service)"
systemctl stop camlheap.service
echo "@@SERVE_STOP rc=$? result=$(systemctl show -p Result --value camlheap.service)"
echo "@@JOURNAL_WARNING"
journalctl -u camlheap -p warning -o cat
echo "@@JOURNAL_ALL"
journalctl -u camlheap -o cat
echo "@@JOURNAL_JSON"
journalctl -u camlheap -o json --output-fields=PRIORITY,MESSAGE
echo "@@LEAK_OUT"
cat /run/oomleak.out
d=$(ls -d /var/lib/camlheap/leak/$pid-* | head -1)
echo "@@FILES $(ls $d | tr '\n' ' ')"
echo "@@CENSUS"
cat $d/census-*-oom.txt
echo "@@DONE"
systemctl poweroff --force
