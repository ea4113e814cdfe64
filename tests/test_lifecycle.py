"""Process lifecycle: exit status pass-through, target exit mid-run, duration,
signals, two recordings at once, forks, and camlheap killed with -9."""
import ctypes
import os
import random
import re
import signal
import subprocess
import time

import chtest
from chtest import CAMLHEAP, Recorder, Waiting, check_binomial, fixture, record_launch, tmpdir


def test_exit_status_and_output_pass_through():
    plain = subprocess.run([fixture("exit_code")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rc, out, rep, err = record_launch([fixture("exit_code")], 1e-3)
    assert plain.returncode == 3, "fixture should exit 3"
    assert rc == 3, (rc, err)
    assert out == plain.stdout.decode(), (out, plain.stdout)
    assert "target exited with status 3" in rep.header.get("duration", ""), rep.header


def test_command_killed_by_signal():
    d = tmpdir()
    out = os.path.join(d, "r.txt")
    p = subprocess.Popen([CAMLHEAP, "record", "-o", out, "--", fixture("idle")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    m = re.match(rb"READY (\d+)", p.stdout.readline())
    assert m, "idle did not start"
    os.kill(int(m.group(1)), signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGKILL, p.returncode
    rep = chtest.Report(open(out).read())
    assert "killed by signal 9" in rep.header.get("duration", ""), rep.header


def test_attached_target_end_reason_says_how_it_ended():
    """A recording attached by PID cannot wait for its target (only the
    parent can): the end reason comes from the kernel's exit tracepoint and
    the runtime's caml_fatal_uncaught_exception, not "target exited"."""
    cases = [(["n=500"], None, 3, "target exited with status 3"),
             (["n=500", "raise"], None, 2,
              "target exited with status 2 after the uncaught exception Exit_code.Gave_up"),
             (["n=500", "abort"], None, -signal.SIGABRT, "target killed by signal 6 (Aborted"),
             (["n=500"], signal.SIGKILL, -signal.SIGKILL, "target killed by signal 9 (Killed)")]
    for args, sig, want_rc, want in cases:
        w = Waiting("exit_code", args)
        r = Recorder(w.pid, 1e-3)
        r.wait_attached()
        if sig:
            os.kill(w.pid, sig)
        else:
            w.release()
        frc = w.proc.wait(timeout=60)
        rc, rep, err = r.finish()
        assert frc == want_rc and rc == 0, (args, frc, rc, err)
        assert want in rep.header.get("duration", ""), (args, rep.header)


def test_launched_target_end_reason_names_the_uncaught_exception():
    rc, out, rep, err = record_launch([fixture("exit_code"), "raise"], 1e-3)
    assert rc == 2, (rc, err)
    assert "Fatal error: exception Exit_code.Gave_up(\"100\")" in err, err
    assert rep.header.get("duration", "").endswith(
        "target exited with status 2 after the uncaught exception Exit_code.Gave_up"), rep.header


def test_attach_pid_target_exits_mid_run():
    rate = 1e-3
    w = Waiting("alloc_major", ["n=3000"])
    r = Recorder(w.pid, rate)
    r.wait_attached()
    w.release()
    frc, fout, _ = w.finish()
    rc, rep, err = r.finish()
    assert frc == 0 and rc == 0, (frc, rc, err)
    assert "target exited" in rep.header.get("duration", ""), rep.header
    for site, (kind, words) in chtest.parse_truth(fout).items():
        check_binomial(rep.samples_at(site, kind), words, rate, site)


def test_duration_and_sigterm_leave_target_running():
    w = Waiting("idle")
    try:
        r = Recorder(w.pid, 1e-3, extra=["--duration", "1"])
        r.wait_attached()
        rc, rep, err = r.finish(timeout=30)
        assert rc == 0 and "duration elapsed" in rep.header.get("duration", ""), (rc, err, rep.header)
        assert w.proc.poll() is None, "target died"
        r = Recorder(w.pid, 1e-3)
        r.wait_attached()
        r.stop(signal.SIGTERM)
        rc, rep, err = r.finish(timeout=30)
        assert rc == 0 and "stopped by SIGTERM" in rep.header.get("duration", ""), (rc, err, rep.header)
        time.sleep(0.2)
        assert w.proc.poll() is None, "target died after camlheap stopped"
    finally:
        w.proc.kill()
        w.proc.wait()


def test_two_recordings_same_binary_see_only_their_process():
    rate = 1e-3
    wa = Waiting("alloc_major", ["only-a", "n=3000"])
    wb = Waiting("alloc_major", ["only-b", "n=6000"])
    ra = Recorder(wa.pid, rate)
    rb = Recorder(wb.pid, rate)
    ra.wait_attached()
    rb.wait_attached()
    wa.release()
    wb.release()
    outs = [wa.finish(), wb.finish()]
    reps = [ra.finish(), rb.finish()]
    for (frc, fout, _), (rc, rep, err), mine, other in zip(outs, reps, ("site_a", "site_b"), ("site_b", "site_a")):
        assert frc == 0 and rc == 0, err
        truth = chtest.parse_truth(fout)
        check_binomial(rep.samples_at("Alloc_major." + mine, "major"), truth["Alloc_major." + mine][1], rate, mine)
        assert rep.samples_at("Alloc_major." + other) == 0, "saw the other process's %s" % other


def test_fork_child_is_never_probed():
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("forker")], rate)
    assert rc == 0, err
    assert "CHILD 0" in out, out
    truth = chtest.parse_truth(out)
    check_binomial(rep.samples_at("Forker.parent_site", "major"), truth["Forker.parent_site"][1], rate, "parent")
    assert rep.samples_at("Forker.child_site") == 0, "the fork child was sampled"
    # nor any of its minor allocations (the child's own loop, Forker.child)
    assert not any(f["function"] == "Forker.child" for s in rep.sites for f in s["frames"]), \
        "the fork child was sampled"
    # the child was never stopped for a write: the executor saw only the
    # parent's own signals (the child's SIGCHLD at exit)
    ex = rep.executor()
    assert ex and ex["errors"] == 0, rep.header.get("executor")


def _reference_run(args):
    p = subprocess.run([fixture("alloc_major")] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout, p.stderr


def test_kill9_attached_never_harms_target():
    ref = _reference_run(["n=4000"])
    rnd = random.Random(int.from_bytes(os.urandom(8), "little"))
    for i in range(25):
        w = Waiting("alloc_major", ["n=4000"])
        r = Recorder(w.pid, 1e-3)
        if i % 3 == 0:
            # while camlheap inspects the target and attaches its probes
            time.sleep(rnd.uniform(0, 0.15))
            r.proc.kill()
            w.release()
        else:
            # at a random moment of the run, or after it
            r.wait_attached()
            w.release()
            time.sleep(rnd.uniform(0, 0.6))
            r.proc.kill()
        r.proc.wait()
        rc, out, err = w.finish()
        got = (rc, out.encode(), err.encode())
        assert got == ref, "run %d: target changed: %r vs %r" % (i, got[:2], ref[:2])


PR_SET_CHILD_SUBREAPER = 36


def test_kill9_launch_mode_never_harms_command():
    # Become a subreaper so the command, orphaned when camlheap dies, is
    # reparented to us and its exit status can be read.
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    ref = _reference_run(["n=4000"])
    rnd = random.Random(int.from_bytes(os.urandom(8), "little"))
    d = tmpdir()
    try:
        for i in range(15):
            outp = os.path.join(d, "out%d" % i)
            with open(outp, "wb") as fo:
                p = subprocess.Popen([CAMLHEAP, "record", "-o", os.path.join(d, "r%d" % i), "--",
                                      fixture("alloc_major"), "n=4000"], stdout=fo, stderr=subprocess.DEVNULL)
            time.sleep(rnd.uniform(0, 0.8))  # during set-up, attach or the run
            p.kill()
            p.wait()
            # reap whatever was orphaned: the command's status
            status = None
            while True:
                try:
                    pid, st = os.waitpid(-1, 0)
                except ChildProcessError:
                    break
                status = os.waitstatus_to_exitcode(st)
            if status is None:  # killed before it forked the command
                continue
            assert status == ref[0], "run %d: command status %s" % (i, status)
            assert open(outp, "rb").read() == ref[1], "run %d: command output changed" % i
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def test_target_execs_another_program():
    # execer allocates, then execs a shell that waits for a line on stdin:
    # camlheap must notice the exec (its probes are gone), write its report,
    # and still pass the new program's status through.
    rate = 1e-3
    d = tmpdir()
    out = os.path.join(d, "r.txt")
    p = subprocess.Popen([CAMLHEAP, "record", "--rate", repr(rate), "--by", "stack", "-o", out, "--", fixture("execer")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    r = Recorder.__new__(Recorder)
    r.proc, r.stderr, r.out = p, b"", out
    r.wait_stderr(b"waiting for PID")
    so, se = p.communicate(b"go\n", timeout=60)
    so = so.decode()
    assert p.returncode == 5, (p.returncode, se)
    assert so.endswith("EXECED\n"), so
    rep = chtest.Report(open(out).read())
    now = "target called exec (now runs %s)" % os.path.realpath("/bin/sh")
    assert now in rep.header.get("duration", ""), rep.header
    truth = chtest.parse_truth(so)
    check_binomial(rep.samples_at("Execer.site_a", "major"), truth["Execer.site_a"][1], rate, "site_a")


def _sig_state(argv):
    """SigBlk and SigIgn of `idle` started by argv with SIGPIPE ignored and
    SIGUSR1 blocked by its parent."""
    def setup():
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=setup)
    try:
        m = re.match(rb"READY (\d+)", p.stdout.readline())
        assert m, "idle did not start"
        status = open("/proc/%s/status" % m.group(1).decode()).read()
        return {k: v for k, v in re.findall(r"^(SigBlk|SigIgn):\s+(\S+)$", status, re.M)}
    finally:
        os.kill(int(m.group(1)), signal.SIGKILL) if m else None
        p.wait()


def test_launched_command_keeps_signal_mask_and_dispositions():
    plain = _sig_state([fixture("idle")])
    under = _sig_state([CAMLHEAP, "record", "-o", os.path.join(tmpdir(), "r.txt"), "--", fixture("idle")])
    assert plain == under, (plain, under)


def test_target_execs_itself():
    # the same executable run again keeps its uprobes but not its load
    # address: nothing after the exec may be sampled with the old one
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("execer"), "self"], rate)
    assert rc == 0 and out.endswith("AGAIN\n"), (rc, out, err)
    ended = rep.header.get("duration", "")
    # (the new image's own exit status is camlheap's, rc above; the report,
    # written as soon as the exec is seen, need not wait for it)
    assert "target called exec (now runs %s)" % fixture("execer") in ended, ended
    walks = rep.walks()
    assert walks["read error"] == 0 and walks["unknown pc"] == 0, walks
    truth = chtest.parse_truth(out)
    check_binomial(rep.samples_at("Execer.site_a", "major"), truth["Execer.site_a"][1], rate, "site_a before exec")


def test_exec_while_attaching_never_touches_the_new_program():
    # The target execs a non-OCaml program at a random moment around
    # camlheap's inspection and attach.  The probes must land in the binary
    # camlheap parsed, never at those offsets in the program it became
    # (victim checksums its text: CORRUPT, exit 3, if a byte changed).
    rnd = random.Random(int.from_bytes(os.urandom(8), "little"))
    victim = fixture("victim")
    outcomes = set()
    for i in range(12):
        ms = rnd.uniform(0, 150)
        p = subprocess.Popen([fixture("execer"), "victim=%s:%d" % (victim, ms)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        m = re.match(rb"READY (\d+)", p.stdout.readline())
        assert m, "execer did not start"
        r = subprocess.run([CAMLHEAP, "record", "-p", m.group(1).decode(), "-o", "/dev/null"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0 and out == b"victim ok\n", "run %d (exec after %d ms): %r, status %d" % (
            i, ms, out, p.returncode)
        err = r.stderr.decode()
        assert r.returncode in (0, 2), (r.returncode, err)
        if r.returncode == 2:
            # the victim lives ~0.5 s after the exec: when the BPF load took
            # longer (a loaded machine), it has exited by the time the attach
            # fails, and camlheap says that instead
            assert ("called exec while camlheap was attaching" in err or "not a native OCaml program" in err or
                    "exited while camlheap was attaching" in err), err
        outcomes.add(r.returncode)
