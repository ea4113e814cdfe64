"""One window for every kind (bpf/alloc.bpf.c window_open): whatever the
attach costs, every estimate of a report covers the same interval, the
one the report states.

The fixture `steady` allocates minor and major words at 4 : 3 at every
iteration, without end, so over any window the minor heap's share of the
samples is 4/7: given the window's samples n, its minor samples are
Binomial(n, 4/7) (each word is sampled alone with probability lambda,
whichever kind it is).  A window that opened for the major heap before the
minor heap was armed, or for the minor heap later, moves that share: the
old attach measured 2840 major samples against 1356 expected (z = +52)
with camlheap slowed on a busy machine.
"""
import json
import math
import os
import signal
import subprocess
import time

import chtest
from chtest import CAMLHEAP, fixture, tmpdir

MINOR_SHARE = 4.0 / 7.0


def _steady():
    p = subprocess.Popen([fixture("steady")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    assert line.startswith("READY "), "steady did not start: %r" % line
    return p


def _hogs(n=2):
    """n busy loops, one per CPU of this machine, at camlheap's own
    priority: a loaded machine."""
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


def _record_json(pid, rate, duration, env=None, nice=0):
    d = tmpdir()
    out = os.path.join(d, "r.json")
    cmd = [CAMLHEAP, "record", "-p", str(pid), "--rate", repr(rate), "--duration", repr(duration), "--format",
           "json", "-o", out]
    if nice:
        cmd = ["nice", "-n", str(nice)] + cmd
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=300)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return json.load(open(out))


def _check_share(j, k, what):
    """The window's minor samples against Binomial(n, 4/7), at the limit
    of one of k checks."""
    by = j["totals"]["samples_by_kind"]
    minor, major = by["minor"], by["major"]
    n = minor + major
    assert n >= 100, "%s: only %d samples in the window (%s)" % (what, n, j["run"]["duration_s"])
    sd = math.sqrt(n * MINOR_SHARE * (1 - MINOR_SHARE))
    z = (minor - n * MINOR_SHARE) / sd
    limit = chtest.z_limit(k)
    assert abs(z) <= limit, "%s: %d minor and %d major samples, minor expected %.0f +- %.0f (z = %.2f, limit %.2f)" % (
        what, minor, major, n * MINOR_SHARE, sd, z, limit)
    assert j["run"]["window"], "%s: the report does not state the window: %r" % (what, j["run"])


def _runs(runs, rate, duration, env_extra=None, nice=0, hogs=0, links=None):
    target = _steady()
    hog = _hogs(hogs) if hogs else []
    env = dict(os.environ, **(env_extra or {}))
    try:
        for i in range(runs):
            j = _record_json(target.pid, rate, duration, env=env, nice=nice)
            for _ in range(2):
                # a window of under 100 samples (this VM stalled for most of
                # a 50 ms window once in CI: 41 samples where 320-820 come)
                # has too little power for the share check: taken again,
                # twice at most, and still checked below if it stays short
                by = j["totals"]["samples_by_kind"]
                if by["minor"] + by["major"] >= 100:
                    break
                j = _record_json(target.pid, rate, duration, env=env, nice=nice)
            h = j["run"]
            assert links is None or h["probe_links"] == links, h
            assert abs(h["duration_s"] - duration) < 0.5 + duration, h
            _check_share(j, runs, "run %d of %d (window %.3f s, opened %.3f s after an attach of %.3f s)" % (
                i + 1, runs, h["duration_s"], h["window_wait_s"], h["attach_s"]))
        assert target.poll() is None, "the target ended"
    finally:
        for h in hog:
            h.kill()
            h.wait()
        target.send_signal(signal.SIGTERM)
        target.wait(timeout=60)


def test_one_window_with_camlheap_slowed_under_load():
    """camlheap at nice 5 against two CPU hogs, its probes attached
    100 ms apart (CAMLHEAP_ATTACH_DELAY_MS: 1.6 s of attach or more): every
    run's minor share is 4/7 within its binomial bound."""
    _runs(4, 1e-4, 0.3, env_extra={"CAMLHEAP_ATTACH_DELAY_MS": "100"}, nice=5, hogs=2)


def test_heap_under_way_at_attach_is_not_in_the_window():
    """Short windows at a high rate: the minor heap's words before its
    arming (the rest of the heap under way at attach, up to a whole minor
    heap, 256 k words) would be a deficit of up to ~2 500 minor samples in
    windows of ~10 000; none shows."""
    _runs(4, 1e-2, 0.05)


def test_perf_event_uprobes_give_the_same_window():
    """The same with the probes as perf events (kernels before 6.9, or
    CAMLHEAP_NO_UPROBE_MULTI=1), which this kernel would otherwise not run."""
    _runs(2, 1e-2, 0.05, env_extra={"CAMLHEAP_NO_UPROBE_MULTI": "1"}, links="perf-event uprobes")


def _nice(pid, tid=None):
    """A task's nice value: field 19 of /proc/PID[/task/TID]/stat."""
    path = "/proc/%d/task/%d/stat" % (pid, tid) if tid else "/proc/%d/stat" % pid
    with open(path) as f:
        return int(f.read().rpartition(")")[2].split()[16])


def _holders():
    """The probe holders running now: camlheap processes whose parent is
    init (sampler_holder.c's grandchild)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    s = f.read()
            except OSError:
                continue
            if "(camlheap)" in s and s.rpartition(")")[2].split()[1] == "1":
                out.append(int(d))
    return out


def test_attach_priority_is_given_back_and_a_command_keeps_the_callers():
    """The attach runs at nice -10 (PROC_ATTACH_NICE) for its CPU time;
    afterwards every thread of camlheap is back at the caller's nice (here
    3), the probe holder too, the ptrace executor's thread at the target's
    (here 0), and a launched command runs at the caller's, never at the
    attach's."""
    target = _steady()
    before = set(_holders())
    rec = subprocess.Popen(["nice", "-n", "3", CAMLHEAP, "record", "-p", str(target.pid), "--duration", "30",
                            "-o", os.path.join(tmpdir(), "r.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # said once every probe is in and the target runs again
        line = rec.stderr.readline().decode()
        assert "camlheap: recording PID" in line, line
        assert rec.poll() is None, rec.communicate()
        tids = [int(t) for t in os.listdir("/proc/%d/task" % rec.pid)]
        nices = {t: _nice(rec.pid, t) for t in tids}
        executor = [t for t in tids if t != rec.pid]
        assert nices[rec.pid] == 3, nices
        assert executor and all(nices[t] in (0, 3) for t in executor), nices
        assert any(nices[t] == 0 for t in executor), ("no thread at the target's priority", nices)
        holders = set(_holders()) - before
        assert holders and all(_nice(h) == 3 for h in holders), [(h, _nice(h)) for h in holders]
        assert all(_nice(target.pid, int(t)) == 0 for t in os.listdir("/proc/%d/task" % target.pid))
        rec.send_signal(signal.SIGINT)
        assert rec.wait(timeout=60) == 0, rec.communicate()
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
        target.send_signal(signal.SIGTERM)
        target.wait(timeout=60)
    # launch mode: the command is started before the attach raises camlheap's priority
    launch = subprocess.Popen(["nice", "-n", "3", CAMLHEAP, "record", "--verbose", "-o", os.path.join(tmpdir(), "l.json"),
                               "--", fixture("steady")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = launch.stderr.readline().decode()
        assert "camlheap: recording PID" in line, line
        line = launch.stdout.readline().decode()
        assert line.startswith("READY "), line
        pid = int(line.split()[1])
        assert all(_nice(pid, int(t)) == 3 for t in os.listdir("/proc/%d/task" % pid))
        assert _nice(launch.pid) == 3
        os.kill(pid, signal.SIGTERM)
        launch.wait(timeout=60)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
