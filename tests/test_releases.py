"""Releases camlheap does not know, or that pretend to be another: refused
before anything is written into the program, or profiled read-only, and
the program unharmed either way.

The 4.12 runtime keeps young_ptr where 4.13 keeps young_limit
(runtime/caml/domain_state.tbl): a young_limit write at 4.13's offset
livelocks a 4.12 program.  Three layers stand between such a program and
a write, each tested here on a real 4.12.1 program whose Sys.ocaml_version
is altered or hidden: the release read from Sys.ocaml_version, the
young_limit offset read from the runtime's own caml_update_young_limit, and
the live invariants of bpf/minor.bpf.h (minor_layout_check), the last one
with the code check turned off (CAMLHEAP_TEST_NO_CODE_CHECK=1)."""
import os
import subprocess

import chtest
import test_versions as _versions
from chtest import CAMLHEAP, Waiting, fixture, tmpdir

DETERMINISTIC = ["ratio", "c", "comb", "fin", "sig"]


def _patched(src, old, new, name):
    """A copy of executable `src` with the bytes `old` (which must occur
    exactly once) replaced by `new`, of the same length."""
    assert len(old) == len(new)
    data = open(src, "rb").read()
    assert data.count(old) == 1, "%s: %r occurs %d times" % (src, old, data.count(old))
    exe = os.path.join(tmpdir(), name)
    with open(exe, "wb") as f:
        f.write(data.replace(old, new))
    os.chmod(exe, 0o755)
    return exe


def _v412(fixture_name, version_as):
    """Fixture `fixture_name` built with OCaml 4.12.1, its Sys.ocaml_version
    changed to `version_as` (6 bytes, NUL-padded; the OCaml string's padding kept)."""
    d = _versions._fixtures_for("4.12.1")
    return _patched(os.path.join(d, fixture_name), b"\x004.12.1\x00", b"\x00" + version_as + b"\x00",
                    "%s_as_%s" % (fixture_name, version_as.rstrip(b"\x00").decode().replace(".", "_")))


def _plain(cmd, timeout=120, stdin=None):
    p = subprocess.run(cmd, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def _tracer(pid):
    with open("/proc/%d/status" % pid) as f:
        return int([l for l in f if l.startswith("TracerPid:")][0].split()[1])


def test_v4_12__misread_as_4_13_is_refused_before_it_runs():
    exe = _v412("alloc_minor", b"4.13.1")
    rc, out, err = chtest.run_record(["--rate", "1e-4", "-o", os.path.join(tmpdir(), "r.txt")], [exe, "n=1000"])
    assert rc == 2, (rc, err)
    assert "says it is OCaml 4.13.1, but its runtime's code does not match that release's layout" in err, err
    assert "stores young_limit at byte 8 of Caml_state" in err and "keeps young_limit at byte 0" in err, err
    assert "the command was not run" in err and "TRUTH" not in out, (out, err)


def test_v4_12__misread_as_4_13_attached_is_refused_and_unharmed():
    exe = _v412("alloc_minor", b"4.13.1")
    args = ["n=300000"] + DETERMINISTIC
    rc, ready_out, ready_err = _plain([exe, "--wait"] + args, stdin=b"go\n")
    ref = (rc, ready_out.split(b"\n", 1)[1], ready_err)  # without its READY line
    p = subprocess.Popen([exe, "--wait"] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert line.startswith("READY"), line
    pid = int(line.split()[1])
    r = subprocess.run([CAMLHEAP, "record", "-p", str(pid), "-o", os.path.join(tmpdir(), "r.txt")],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 2 and "does not match that release's layout" in err, (r.returncode, err)
    assert _tracer(pid) == 0
    out, perr = p.communicate(b"go\n", timeout=120)
    assert (p.returncode, out, perr) == ref, (p.returncode, out[-300:], ref[1][-300:])


def test_v4_12__live_checks_alone_keep_every_write_out():
    """With the code check off, the program taken for 4.13.1 (young_limit
    at byte 0, where 4.12 keeps young_ptr): the first live invariant that
    breaks stops minor sampling before any write; the program ends as
    without camlheap (it livelocked before the checks)."""
    exe = _v412("alloc_minor", b"4.13.1")
    args = ["n=300000"] + DETERMINISTIC
    ref = _plain([exe] + args)
    out_path = os.path.join(tmpdir(), "r.txt")
    env = dict(os.environ, CAMLHEAP_TEST_NO_CODE_CHECK="1")
    rc, out, err = chtest.run_record(["--rate", "1e-3", "--executor", "ptrace", "-o", out_path], [exe] + args,
                                     timeout=120, env=env)
    assert (rc, out.encode()) == ref[:2], (rc, err, out[-300:])
    rep = chtest.Report(open(out_path).read())
    assert "(OCaml 4.13.1)" in rep.header["target"], rep.header["target"]
    ex = rep.executor()
    assert ex and ex["writes"] == 0 and ex["stops"] == 0, rep.header.get("executor")
    assert "warning     minor-heap sampling stopped: the program's domain state broke an invariant" in rep.text
    assert "minor-heap allocations are not sampled (camlheap stopped at the first sign" in rep.first_line(), \
        rep.first_line()


def test_v4_12__release_hidden_is_profiled_read_only():
    """Sys.ocaml_version unreadable: the release is unknown, nothing is
    written (executor observe), and the direct major allocations are still
    sampled without bias."""
    d = _versions._fixtures_for("4.12.1")
    exe = _patched(os.path.join(d, "alloc_major"), b"\x004.12.1\x00", b"\x00x.12.1\x00", "alloc_major_hidden")
    rate = 1e-3
    rc, out, rep, err = chtest.record_launch([exe, "n=2000"], rate)
    assert rc == 0, err
    assert "(OCaml 4.x, release unknown)" in rep.header["target"], rep.header["target"]
    assert rep.first_line().startswith("camlheap: executor observe; minor-heap allocations are not sampled (the "
                                       "program's OCaml release is unknown"), rep.first_line()
    truth = chtest.parse_truth(out)
    assert truth, out
    for site, (kind, words) in truth.items():
        if kind == "major":
            chtest.check_binomial(rep.samples_at(site, "major"), words, rate, site)


def test_v4_12__refusals_name_the_release_and_the_supported_ones():
    for version, why in ((b"4.11.0", "calls no hook per custom block (caml_memprof_track_custom came with 4.12)"),
                         (b"4.10.2", "no hook to follow a sampled block to its death"),
                         (b"4.09.1", "none of the Gc.Memprof hooks camlheap probes (they came with 4.10)"),
                         (b"5.0.0\x00", "(OCaml 5.0 has no Gc.Memprof to profile in-process either)")):
        exe = _v412("exit_code", version)
        rc, out, err = chtest.run_record(["-o", os.path.join(tmpdir(), "r.txt")], [exe])
        assert rc == 2 and why in err and "uses the OCaml %s runtime, which camlheap does not support" % (
            version.rstrip(b"\x00").decode()) in err, (rc, err)
        assert "supported: 4.12, 4.13, 4.14, 5.1, 5.2, 5.3, 5.4; tested: 4.12.0, 4.12.1, 4.13.1, 4.14.0, " \
               "4.14.2, 5.1.0, 5.2.0, 5.3.0, 5.4.1" in err, err
        assert "the command was not run" in err, err


def test_development_release_is_refused():
    # "4.13.1" + 1 padding byte + the padding count (1) -> "4.13.1+" + count 0
    exe = _patched(fixture("alloc_minor"), b"\x004.13.1\x00\x01", b"\x004.13.1+\x00", "alloc_minor_dev")
    rc, out, err = chtest.run_record(["-o", os.path.join(tmpdir(), "r.txt")], [exe, "n=1000"])
    assert rc == 2, (rc, err)
    assert "uses OCaml 4.13.1+, a development or pre-release build" in err, err
    assert "the command was not run" in err and "TRUTH" not in out, (out, err)
