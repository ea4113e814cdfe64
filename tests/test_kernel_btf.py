"""The kernel types the sampler's BPF object reads, cut out of the kernel's
BTF (user/collect/kernel_btf.c): a load with the cut relocates exactly as
one with the whole BTF, a worker of the service reads the service's cut and
never the kernel's 5.5 MB.  The cut's types against bpftool's own cut:
tests/unit_kernel_btf.c."""
import os
import re
import subprocess

import chtest
from chtest import fixture

PATCHED = re.compile(r"prog '(\w+)': relo #(\d+): patched insn #(\d+) .*")
LOADING = "loading kernel BTF '/sys/kernel/btf/vmlinux'"


def _bpftool_cut():
    """bpftool's minimal BTF of the running kernel for alloc.bpf.o (a file)."""
    path = os.path.join(chtest.tmpdir(), "min.btf")
    subprocess.run([os.environ.get("BPFTOOL", "bpftool"), "gen", "min_core_btf", "/sys/kernel/btf/vmlinux", path,
                    os.path.join(chtest.BUILD, "bpf", "alloc.bpf.o")], check=True)
    return path


def _relocations(extra):
    """record (launch mode, a short fixture) under CAMLHEAP_DEBUG: the
    libbpf lines of the CO-RE relocations it patched, and its whole log."""
    out = os.path.join(chtest.tmpdir(), "r.txt")
    env = dict(os.environ, CAMLHEAP_DEBUG="1")
    rc, _, err = chtest.run_record(["--rate", "1e-3", "-o", out] + extra, [fixture("exit_code")], env=env)
    assert rc == 3 and os.path.getsize(out), (rc, err[-3000:])  # the fixture's own status
    return {m.group(0) for m in PATCHED.finditer(err)}, err


def test_record_relocates_the_same_with_its_own_cut_bpftools_and_the_kernels_whole_btf():
    """The same instructions patched to the same offsets whichever BTF the
    load is given: the cut record makes itself (the default), bpftool's
    min_core_btf of the same object, the kernel's whole BTF; and given a
    file, the kernel's own BTF is not read (libbpf's "loading kernel BTF"
    line: once by default, the cut's read)."""
    own, own_log = _relocations([])
    theirs, theirs_log = _relocations(["--kernel-btf", _bpftool_cut()])
    whole, _ = _relocations(["--kernel-btf", "/sys/kernel/btf/vmlinux"])
    assert len(own) >= 20, own
    assert own == whole, sorted(own ^ whole)[:10]
    assert own == theirs, sorted(own ^ theirs)[:10]
    assert own_log.count(LOADING) == 1, own_log.count(LOADING)
    assert LOADING not in theirs_log


def test_record_refuses_a_kernel_btf_file_that_is_not_btf():
    """A --kernel-btf that is no BTF (a worker given a wrong descriptor):
    the load fails with a message, the process runs on untouched."""
    bad = os.path.join(chtest.tmpdir(), "bad.btf")
    with open(bad, "w") as f:
        f.write("not btf\n")
    w = chtest.Waiting("alloc_minor")
    r = chtest.Recorder(w.pid, 1e-3, ["--kernel-btf", bad])
    rc, _, err = r.finish()
    w.release()
    wrc, out, _ = w.finish()
    assert rc != 0 and "cannot load the BPF programs" in err, (rc, err[-2000:])
    assert wrc == 0 and "TRUTH" in out, (wrc, out[-500:])


def test_serve_workers_read_the_services_cut_of_the_kernel_btf():
    """Each worker is given the service's cut (a sealed memfd as its
    descriptor 4, record --kernel-btf /proc/self/fd/4), so 20 workers
    attaching at once do not each read and parse the kernel's 5.5 MB."""
    from test_serve import PORT_BASE, one_idle_worker
    with one_idle_worker(PORT_BASE + 22) as (_, _, wpid):
        with open("/proc/%d/cmdline" % wpid) as f:
            argv = f.read().split("\0")
        assert argv[argv.index("--kernel-btf") + 1] == "/proc/self/fd/4", argv
        assert os.readlink("/proc/%d/fd/4" % wpid).startswith("/memfd:camlheap-kernel-btf"), \
            os.readlink("/proc/%d/fd/4" % wpid)
        with open("/proc/%d/fd/4" % wpid, "rb") as f:
            data = f.read()
        assert data[:2] == b"\x9f\xeb" and len(data) < 64 * 1024, (data[:16], len(data))
