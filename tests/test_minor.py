"""Minor-heap sampling (channel A through the ptrace executor) against the
fixture's known words per site, the runtime's own Gc.minor_words, and the
runtime's own Gc.Memprof run in the same process; and the target's safety
while camlheap writes young_limit (see chtest.py for the tolerances)."""
import math
import os
import random
import re
import signal
import subprocess
import time

import chtest
from chtest import CAMLHEAP, Recorder, Waiting, check_binomial, fixture, record_launch, tmpdir

MOD = "Alloc_minor."


def _minor_words(out):
    m = re.search(r"^MINOR_WORDS (\d+)$", out, re.M)
    assert m, out
    return int(m.group(1))


def _check_sites(rep, truth, rate, what):
    for site, (kind, words) in truth.items():
        lines = chtest.site_lines(site)
        assert lines, "no SITE marker for %s" % site
        check_binomial(rep.samples_at_lines(MOD, lines, "minor"), words, rate, "%s %s" % (site, what))


def _minor(rate, n, parts=()):
    rc, out, rep, err = record_launch([fixture("alloc_minor"), "n=%d" % n] + list(parts), rate)
    assert rc == 0, "camlheap exit %d: %s" % (rc, err)
    # (OCaml 5.1: all but unmarshalled blocks, which it gives no hook for)
    assert re.match(r"camlheap: executor ptrace; (every allocation is sampled|allocations are sampled in the minor "
                    r"heap)", rep.first_line()), rep.first_line()
    truth = chtest.parse_truth(out)
    _check_sites(rep, truth, rate, "at rate %g" % rate)
    # every minor sample against the runtime's own count of minor words
    minor = rep.minor()
    total = sum(s["samples"] for s in rep.sites if s["kind"] == "minor")
    assert minor and minor["samples"] == total, (minor, total)
    check_binomial(total, _minor_words(out), rate, "all minor samples vs Gc.minor_words at rate %g" % rate)
    # no sample point was passed without a trap, no write went wrong
    assert minor["missed"] == 0, rep.header.get("minor")
    ex = rep.executor()
    assert ex and ex["errors"] == 0, rep.header.get("executor")
    assert rep.samples_total()[2] == 0, "dropped events: %s" % rep.header.get("samples")
    return out, rep


def test_minor_sites_rate_1e4():
    # ~150 M words: ~15 000 samples
    _minor(1e-4, 4_000_000)


def test_minor_sites_rate_1e5():
    # ~360 M words: ~3 600 samples
    _minor(1e-5, 10_000_000)


def test_minor_exact_at_rate_one():
    """lambda = 1: every word is a sample point, so every allocation traps
    and is sampled, Comballoc'd ones included: counts are exact."""
    rc, out, rep, err = record_launch([fixture("alloc_minor"), "n=3000", "ratio", "c", "comb"], 1.0)
    assert rc == 0, err
    truth = chtest.parse_truth(out)
    assert set(truth) == {MOD + s for s in ("big_site", "small_site", "c_site", "comb_pair", "comb_array")}, out
    for site, (_, words) in truth.items():
        got = rep.samples_at_lines(MOD, chtest.site_lines(site), "minor")
        assert got == words, "%s: %d samples for %d words at rate 1" % (site, got, words)
    # Gc.minor_words is read before the fixture prints it: the printing
    # itself (a few dozen words) is sampled too
    mw = _minor_words(out)
    assert mw <= rep.minor()["samples"] <= mw + 200, (rep.header.get("minor"), mw)


def test_minor_agrees_with_in_process_memprof():
    """The fixture runs Gc.Memprof itself at the same rate: both sample the
    same words independently, so per site the counts n1 (camlheap) and n2
    (Gc.Memprof) are independent binomials of one mean and (n1 - n2) /
    sqrt(n1 + n2) is approximately standard normal.  The k sites count as
    one check of the suite (chtest.z_limit(k), Bonferroni)."""
    rate = 1e-4
    rc, out, rep, err = record_launch([fixture("alloc_minor"), "n=4000000", "memprof=%g" % rate], rate)
    assert rc == 0, err
    mp = {int(a): int(b) for a, b in re.findall(r"^MEMPROF (\d+) (\d+)$", out, re.M)}
    truth = chtest.parse_truth(out)
    assert len(truth) == 10, out
    zcrit = chtest.z_limit(len(truth))
    for site in truth:
        lines = chtest.site_lines(site)
        n1 = rep.samples_at_lines(MOD, lines, "minor")
        n2 = sum(mp.get(line, 0) for line in lines)
        assert n1 + n2 > 0, site
        z = (n1 - n2) / math.sqrt(n1 + n2)
        # on failure, what might explain it: missed points, walks, drops
        assert abs(z) <= zcrit, "%s: camlheap %d vs Gc.Memprof %d samples (z = %.2f, limit %.2f); minor: %s; " \
            "stacks: %s; samples: %s" % (site, n1, n2, z, zcrit, rep.header.get("minor"), rep.header.get("stacks"),
                                          rep.header.get("samples"))


# Without systhreads the fixture is deterministic (finalisers run at points
# fixed by the allocation sequence); with them, thread switches (a 50 ms tick)
# make the finaliser count vary from run to run even without camlheap.
DETERMINISTIC = ["ratio", "c", "comb", "fin", "sig"]


def _plain_run(args):
    p = subprocess.run([fixture("alloc_minor")] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout, p.stderr


def _plain_waiting_run(args):
    """The reference for a fixture run with --wait (reading the line
    allocates too)."""
    w = Waiting("alloc_minor", args)
    w.release()
    rc, out, err = w.finish()
    return rc, out.encode(), err.encode()


def test_minor_outputs_identical_with_and_without_camlheap():
    args = ["n=1000000"] + DETERMINISTIC
    ref = _plain_run(args)
    d = tmpdir()
    p = subprocess.run([CAMLHEAP, "record", "--rate", "1e-4", "-o", os.path.join(d, "r.txt"), "--",
                        fixture("alloc_minor")] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    assert (p.returncode, p.stdout) == ref[:2], (p.returncode, p.stdout[-300:], ref[1][-300:])


def test_minor_kill9_never_harms_target():
    """camlheap killed with -9 at random moments, attached with the ptrace
    executor, some of them while it is stopped (SIGSTOP) so that target
    threads sit in their ptrace stop waiting for it: the target's output and
    status never change."""
    args = ["n=2000000"] + DETERMINISTIC
    ref = _plain_waiting_run(args)
    rnd = random.Random(int.from_bytes(os.urandom(8), "little"))
    held = 0
    for i in range(12):
        w = Waiting("alloc_minor", args)
        r = Recorder(w.pid, 1e-4)
        if i % 4 == 0:
            time.sleep(rnd.uniform(0, 0.15))  # while it seizes the threads and attaches
            r.proc.kill()
            w.release()
        else:
            r.wait_attached()
            w.release()
            time.sleep(rnd.uniform(0, 0.4))
            if i % 2:
                # freeze the executor: the next stop waits for it
                r.proc.send_signal(signal.SIGSTOP)
                time.sleep(0.05)
                held += any(_ptrace_stopped(t) for t in _threads(w.pid))
            r.proc.kill()
        r.proc.wait()
        rc, out, err = w.finish()
        assert (rc, out.encode(), err.encode()) == ref, "run %d: target changed: rc %d (expected %d)%s" % (
            i, rc, ref[0], _changed(ref, out, err))
    assert held > 0, "no run caught a target thread in its ptrace stop"


def _changed(ref, out, err):
    """What differs from the reference run's stdout and stderr (bytes)."""
    import difflib
    d = []
    for name, a, b in (("stdout", ref[1].decode(errors="replace"), out), ("stderr", ref[2].decode(errors="replace"),
                                                                          err)):
        if a != b:
            d.append("%s: %s" % (name, " | ".join(list(difflib.unified_diff(a.splitlines(), b.splitlines(),
                                                                             lineterm="", n=0))[2:12])))
    return "; " + "; ".join(d) if d else ""


def _threads(pid):
    try:
        return os.listdir("/proc/%d/task" % pid)
    except FileNotFoundError:
        return []


def _ptrace_stopped(tid):
    try:
        with open("/proc/%s/stat" % tid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "t"
    except (FileNotFoundError, IndexError):
        return False


def test_register_executor_where_the_kernel_allows_it_and_a_clear_refusal_where_not():
    """--executor register needs a kernel whose uprobe programs may change
    registers (collect/regexec.h: a load check, then a behavioural check on
    camlheap's own code).  Where the kernel refuses (this machine's and CI's
    6.18: "invalid bpf_context access"), camlheap says which check failed,
    exits 2 before the command runs (the marker file the command would
    create is absent) and writes no report; `auto` then runs another
    executor.  Where the kernel allows it (make test-vm's Debian unstable
    kernel runs the full checks), the report's first line names it and no
    sample point is missed."""
    d = tmpdir()
    out, marker = os.path.join(d, "r.txt"), os.path.join(d, "ran")
    rc, so, se = chtest.run_record(["--executor", "register", "--rate", "1e-4", "-o", out],
                                   ["sh", "-c", "touch %s; exec %s n=400000" % (marker, fixture("alloc_minor"))])
    if rc == 2:
        assert re.search(r"--executor register: the kernel (refuses uprobe programs that write registers|"
                         r"has no uprobe_multi links|took the register write but still ran)", se), se
        assert "use --executor auto" in se, se
        assert not os.path.exists(marker) and not os.path.exists(out), "the command ran, or a report was written"
        rc, so, se = chtest.run_record(["--rate", "1e-4", "-o", out], [fixture("alloc_minor"), "n=1000"])
        assert rc == 0 and not open(out).read().startswith("camlheap: executor register"), se
    else:
        assert rc == 0, se
        rep = chtest.Report(open(out).read())
        assert rep.first_line().startswith("camlheap: executor register;"), rep.first_line()
        assert rep.minor()["missed"] == 0, rep.header.get("minor")


def test_minor_target_stopped_and_continued():
    """SIGSTOP / SIGCONT to a recorded target: the group-stop is kept as
    without camlheap (the target stays stopped), then it goes on and
    finishes with the same output."""
    args = ["n=3000000"] + DETERMINISTIC
    ref = _plain_waiting_run(args)
    w = Waiting("alloc_minor", args)
    r = Recorder(w.pid, 1e-4)
    r.wait_attached()
    w.release()
    time.sleep(0.1)
    os.kill(w.pid, signal.SIGSTOP)
    time.sleep(0.3)
    states = [open("/proc/%s/stat" % t).read().rsplit(")", 1)[1].split()[0] for t in _threads(w.pid)]
    os.kill(w.pid, signal.SIGCONT)
    rc, out, err = w.finish()
    r.stop()
    rrc, rep, rerr = r.finish()
    assert (rc, out.encode(), err.encode()) == ref, "target changed"
    assert rrc == 0, rerr
    assert states and all(s in "Tt" for s in states), states
    assert rep.minor()["samples"] > 0, rep.header


def test_another_tracer_is_a_clear_error():
    """strace holds the target: the ptrace executor cannot, and says who does."""
    w = subprocess.Popen(["strace", "-f", "-o", "/dev/null", fixture("alloc_minor"), "--wait"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = w.stdout.readline().decode()
    m = re.match(r"^READY (\d+)$", line.strip())
    assert m, line
    pid = int(m.group(1))
    try:
        p = subprocess.run([CAMLHEAP, "record", "-p", str(pid), "-o", os.path.join(tmpdir(), "r.txt")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        err = p.stderr.decode()
        assert p.returncode == 2, (p.returncode, err)
        assert "already traced by PID" in err and "strace" in err and "--executor observe" in err, err
        # and observe works on it
        p = subprocess.run([CAMLHEAP, "record", "-p", str(pid), "--executor", "observe", "--duration", "0.2",
                            "-o", os.path.join(tmpdir(), "r.txt")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        assert p.returncode == 0, p.stderr
    finally:
        w.communicate(b"go\n", timeout=120)


def test_observe_takes_the_programs_own_memprof_samples():
    """The program already runs Gc.Memprof (as memtrace does): camlheap
    attaches, writes nothing, and takes memprof's own sample points at its
    rate (not --rate).  Each block's first sample is memprof's own; a block
    with more than one sample gets the rest from camlheap's draws, so per
    site the two counts agree up to those, which the two-sample test covers
    (the sites as one check, as above)."""
    rate = 1e-4
    w = Waiting("alloc_minor", ["n=4000000", "memprof=%g" % rate, "early"] + DETERMINISTIC)
    r = Recorder(w.pid, 1e-3)
    r.wait_attached()
    w.release()
    rc, out, err = w.finish()
    rrc, rep, rerr = r.finish()
    assert rc == 0 and rrc == 0, (rc, rrc, rerr)
    assert "runs Gc.Memprof at rate 0.0001" in rerr, rerr
    assert rep.first_line().startswith("camlheap: executor observe; every allocation is sampled: minor heap "
                                       "(read-only, from the program's own Gc.Memprof"), rep.first_line()
    assert rep.header.get("rate", "").startswith("0.0001 samples/word"), rep.header.get("rate")
    assert rep.header.get("executor") == "observe: nothing written", rep.header
    mp = {int(a): int(b) for a, b in re.findall(r"^MEMPROF (\d+) (\d+)$", out, re.M)}
    truth = chtest.parse_truth(out)
    zcrit = chtest.z_limit(len(truth))
    for site in truth:
        lines = chtest.site_lines(site)
        n1 = rep.samples_at_lines(MOD, lines, "minor")
        n2 = sum(mp.get(line, 0) for line in lines)
        assert n1 > 0, site
        z = (n1 - n2) / math.sqrt(n1 + n2)
        assert abs(z) <= zcrit, "%s: camlheap %d vs Gc.Memprof %d samples (z = %.2f)" % (site, n1, n2, z)


def test_minor_budget_thins_samples_and_estimates_stay_unbiased():
    # --budget keeps samples with probability 2^-k in the kernel; each kept
    # one counts 2^k.  Per site, Var(estimated words) = sum over its words
    # of (1 - lambda_t)/lambda_t <= words / lambda_min, lambda_min the
    # smallest lambda in force (the report's budget line).
    rate, budget = 1e-3, 1000
    rc, out, rep, err = record_launch([fixture("alloc_minor"), "n=2000000"], rate,
                                      extra=["--budget", str(budget), "--top", "1000"])
    assert rc == 0, err
    line = rep.header.get("budget", "")
    shifts = [int(k) for k in re.findall(r"\(2\^-(\d+)\)", line)]
    assert shifts and max(shifts) >= 2, line  # the budget acted
    lam_min = rate * 2.0 ** -max(shifts)
    truth = chtest.parse_truth(out)
    for site, (kind, words) in truth.items():
        got = rep.samples_at_lines(MOD, chtest.site_lines(site), "minor") / rate
        bound = chtest.Z * math.sqrt(words / lam_min)
        assert abs(got - words) <= bound, (site, got, words, bound, line)
    # kept samples (events) stay near the budget: far fewer than lambda
    # alone would take
    total_words = sum(w for k, w in truth.values())
    assert rep.samples_total()[1] < total_words * rate / 4, (rep.samples_total(), total_words * rate)
    minor = rep.minor()
    assert minor["missed"] == 0, minor


def test_c_allocations_deep_in_a_recursion_trap_once_a_sample():
    """C code allocating deep in a recursion, OCaml code only on the way
    back up (the cdeep fixture: List.init 5000 string_of_int, List.map,
    Printf.sprintf, ^, Bytes.make).  In 4.x a dispatch called from C leaves
    caml_something_to_do set with nothing to act on, and young_limit at
    young_alloc_end or a crossed sample point, so that every allocation of
    C code traps until OCaml code allocates: 427 055 traps for 526 samples
    on 4.13.1 at 1e-4 before, each a uprobe hit (bpf/ocaml4/minor.bpf.h
    minor4_actions_idle).  At most 3 traps a sample (the runtime's own
    collections among them), the samples within the binomial bounds of
    Gc.minor_words, nothing missed, and the program's output as without camlheap."""
    args = [fixture("cdeep"), "n=200"]
    ref = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert ref.returncode == 0, ref.stderr
    rate = 1e-4
    rc, out, rep, err = record_launch(args, rate)
    assert rc == 0 and out == ref.stdout.decode(), (rc, out[-300:], err[-2000:])
    # the recursion is deeper than the stack limit: the whole sample
    # against the runtime's own count of minor words, not per site
    minor = rep.minor()
    check_binomial(minor["samples"], _minor_words(out), rate, "minor samples vs Gc.minor_words at %g" % rate)
    minor = rep.minor()
    assert minor and minor["missed"] == 0 and minor["samples"] > 5000, rep.header.get("minor")
    assert minor["traps"] <= 3 * minor["samples"], rep.header.get("minor")


def test_overhead_figure_counts_every_probe_hit_and_stop():
    """The overhead the report states is what the target's threads paid:
    the kernel's count of the probes' BPF runs (bpf_prog_info run_cnt and
    run_time_ns), each hit's trap as calibrated on this kernel
    (collect/probe_cost.c: an emulated entry, a single-stepped one, a
    uretprobe's return, each dearer than nothing and the single-step dearer
    than the emulation), and each ptrace stop from the probe's request to
    the resumption (so no shorter than the executor's service of it).  Every
    dispatch trap is two hits at least (its entry and return probes),
    each paying at least an emulated trap and the return one; the
    recording file keeps the figures (`camlheap report` renders them)."""
    import json
    d = tmpdir()
    ctf, js, txt = (os.path.join(d, f) for f in ("run.ctf", "r.json", "r.txt"))
    rc, so, se = chtest.run_record(["--rate", "1e-4", "-o", ctf], [fixture("cdeep"), "n=100"])
    assert rc == 0, se
    for fmt, path in (("json", js), ("text", txt)):
        p = subprocess.run([CAMLHEAP, "report", ctf, "--format", fmt, "-o", path], stderr=subprocess.PIPE, timeout=60)
        assert p.returncode == 0, p.stderr
    run = json.load(open(js))["run"]
    o, minor, ex = run["overhead"], run["minor"], run["ptrace"]
    t = o["trap_us"]
    assert o["counted"] and 0 < t["emulated"] < t["single_stepped"] and t["return"] > 0, o
    assert o["probe_hits"] >= 2 * minor["traps"] > 0, (o, minor)
    assert o["trap_s"] >= 0.99e-6 * minor["traps"] * (t["emulated"] + t["return"]), (o, minor)
    assert o["trap_s"] <= 1.01e-6 * o["probe_hits"] * (t["single_stepped"] + t["return"]), o
    assert o["bpf_s"] > 0 and ex["stops"] > 0 and o["stopped_s"] == ex["stopped_s"] >= ex["service_s"] > 0, (o, ex)
    assert abs(o["total_s"] - (o["bpf_s"] + o["trap_s"] + o["stopped_s"])) < 1e-6, o
    line = [l for l in open(txt) if l.startswith("overhead ")]
    assert line and re.match(r"overhead +the target paid [0-9.]+ s \([0-9.]+ %% of the [0-9.]+ s recorded\): %d probe "
                             r"hits, their traps [0-9.]+ s \(as calibrated" % o["probe_hits"], line[0]), line
