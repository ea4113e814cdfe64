#!/usr/bin/env python3
"""make test-vm: run the kernel executor where it can run.

This machine and CI run with kernel lockdown, which refuses
bpf_probe_write_user; the kernel executor is tested by booting Debian's stock
kernel (linux-image-amd64, lockdown off without Secure Boot) under
qemu-system-x86_64 (KVM if /dev/kvm works, else TCG), with an initramfs that
holds busybox, camlheap, the alloc_minor fixture, ocamlopt.opt with its
stdlib interfaces and `as`, and their shared libraries.  tests/vm/init.sh
runs in the VM and prints on the serial console; this script judges it with
the same checks as tests/test_minor.py and prints the measured times.

Under TCG (no KVM, or a KVM that does not boot, as in nested VMs) every
instruction is emulated: the ratios it measures are not the real machine's,
only their comparison between configurations is meaningful.

Last line: "N passed, N failed".  Environment: VM_MEM (MiB, default 2048),
VM_TIMEOUT (seconds, default 1800), VM_ITEMS (size of the module ocamlopt
compiles in the VM, default 150).
"""
import gzip
import io
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, TESTS)
import chtest  # noqa: E402

VMDIR = os.path.join(chtest.BUILD, "vm")
MOD = "Alloc_minor."


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw).stdout.decode()


def ensure_packages():
    need = [p for p, f in (("qemu-system-x86", "/usr/bin/qemu-system-x86_64"), ("busybox-static", "/bin/busybox"))
            if not os.path.exists(f)]
    if not need:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"] + need, env=env,
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends"] + need, env=env, check=True,
                       stdout=subprocess.DEVNULL)


def stock_kernel():
    """vmlinuz of Debian's linux-image-amd64 (downloaded, not installed)."""
    os.makedirs(VMDIR, exist_ok=True)
    for f in os.listdir(VMDIR):
        if f.startswith("vmlinuz-"):
            return os.path.join(VMDIR, f)
    deps = sh(["apt-cache", "depends", "linux-image-amd64"])
    m = re.search(r"Depends: (linux-image-\S+)", deps)
    if not m:
        subprocess.run(["apt-get", "update", "-q"], check=True, stdout=subprocess.DEVNULL)
        m = re.search(r"Depends: (linux-image-\S+)", sh(["apt-cache", "depends", "linux-image-amd64"]))
    pkg = m.group(1)
    subprocess.run(["apt-get", "download", pkg], cwd=VMDIR, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    deb = [f for f in os.listdir(VMDIR) if f.endswith(".deb")][0]
    x = os.path.join(VMDIR, "x")
    subprocess.run(["dpkg-deb", "-x", os.path.join(VMDIR, deb), x], check=True)
    boot = os.path.join(x, "boot")
    vml = [f for f in os.listdir(boot) if f.startswith("vmlinuz-")][0]
    shutil.copy(os.path.join(boot, vml), os.path.join(VMDIR, vml))
    shutil.rmtree(x)
    os.unlink(os.path.join(VMDIR, deb))
    return os.path.join(VMDIR, vml)


def libs_of(path):
    out = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
    libs = set()
    for line in out.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            libs.add(m.group(1))
    return libs


def ondemand_libs():
    """The libraries serve and status load when they need them
    (user/cmd/ondemand.h), with what they link."""
    libs = set()
    for soname in ("libmicrohttpd.so.12", "libcurl.so.4"):
        m = re.search(r"\s%s \(libc6,x86-64\) => (\S+)" % re.escape(soname),
                      subprocess.run(["ldconfig", "-p"], stdout=subprocess.PIPE).stdout.decode())
        if m:
            libs |= {m.group(1)} | libs_of(m.group(1))
    return libs


class Cpio:
    """A newc cpio archive (the initramfs format), written by hand: no
    dependency on the cpio tool."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1
        self.dirs = set()

    def _entry(self, name, mode, data=b""):
        name_b = name.encode() + b"\0"
        hdr = "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x" % (
            self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name_b), 0)
        self.ino += 1
        self.buf.write(hdr.encode() + name_b)
        self.buf.write(b"\0" * ((4 - (110 + len(name_b)) % 4) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * ((4 - len(data) % 4) % 4))

    def mkdir(self, path):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d and d not in self.dirs:
                self.dirs.add(d)
                self._entry(d, 0o040755)

    def add(self, dest, data, mode=0o100755):
        self.mkdir(os.path.dirname(dest))
        self._entry(dest.strip("/"), mode, data)

    def add_file(self, src, dest=None):
        real = os.path.realpath(src)
        self.add(dest or src, open(real, "rb").read(), 0o100000 | (os.stat(real).st_mode & 0o777))

    def symlink(self, dest, target):
        self.mkdir(os.path.dirname(dest))
        self._entry(dest.strip("/"), 0o120777, target.encode())

    def add_tree(self, root, skip=()):
        """Every directory, file and symlink under `root`, with its mode,
        at the same path under / (but those under a path in `skip`)."""
        for d, dirs, files in os.walk(root):
            rel = os.path.relpath(d, root)
            dirs[:] = [x for x in dirs if os.path.normpath(os.path.join(rel, x)) not in skip
                       and not os.path.islink(os.path.join(d, x))]
            for x in sorted(os.listdir(d)):
                path = os.path.join(d, x)
                name = os.path.normpath(os.path.join(rel, x))
                if name in skip:
                    continue
                st = os.lstat(path)
                if os.path.islink(path):
                    self._entry(name, 0o120777, os.readlink(path).encode())
                elif os.path.isdir(path):
                    self.dirs.add(name)
                    self._entry(name, st.st_mode)
                elif os.path.isfile(path):
                    self._entry(name, st.st_mode, open(path, "rb").read())

    def close(self):
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def build_initramfs(init="init.sh"):
    c = Cpio()
    for d in ("proc", "sys", "dev", "tmp", "bin", "usr/bin"):
        c.mkdir(d)
    c.add_file("/bin/busybox", "/bin/busybox")
    c.add("/init", open(os.path.join(HERE, init), "rb").read())
    c.add("/lib.sh", open(os.path.join(HERE, "lib.sh"), "rb").read(), 0o100644)
    c.add_file(chtest.CAMLHEAP, "/work/camlheap")
    c.add_file(chtest.fixture("alloc_minor"), "/work/fixtures/alloc_minor")
    c.add_file(chtest.fixture("leak"), "/work/fixtures/leak")
    c.add_file(chtest.fixture("cmalloc"), "/work/fixtures/cmalloc")
    c.add_file(chtest.fixture("cdeep"), "/work/fixtures/cdeep")
    c.add_file(chtest.fixture("gctiming"), "/work/fixtures/gctiming")
    c.add_file(chtest.fixture("oomleak"), "/work/fixtures/oomleak")
    # OCaml 5 fixtures, built with the cached toolchains as `make test` does
    import test_versions
    fx5 = {v: test_versions._fixtures_for(v) for v in ("5.3.0", "5.1.0")}
    for v, d in fx5.items():
        for name in ("alloc_minor", "domains", "cmalloc", "gctiming", "dropall"):
            c.add_file(os.path.join(d, name), "/work/fx%s/%s" % (v.replace(".", "")[:2], name))
    c.add_file("/usr/bin/ocamlopt.opt")
    c.add_file("/usr/bin/as")
    as_real = "/usr/bin/x86_64-linux-gnu-as"  # what ocamlopt.opt runs (Debian's Config.asm)
    if os.path.exists(as_real):
        c.add_file(as_real)
    # a small module: under TCG every instruction is emulated
    gen = subprocess.run([sys.executable, os.path.join(TESTS, "gen_module.py"), os.environ.get("VM_ITEMS", "150")],
                         stdout=subprocess.PIPE, check=True).stdout
    c.add("/work/big.ml", gen, 0o100644)
    for f in sorted(os.listdir("/usr/lib/ocaml")):
        if f.endswith((".cmi", ".cmx")):
            c.add_file(os.path.join("/usr/lib/ocaml", f))
    libs = set()
    for b in (chtest.CAMLHEAP, chtest.fixture("alloc_minor"), chtest.fixture("leak"), chtest.fixture("oomleak"),
              "/usr/bin/ocamlopt.opt",
              "/usr/bin/as", os.path.join(fx5["5.3.0"], "domains"), os.path.join(fx5["5.1.0"], "domains")):
        libs |= libs_of(b)
    libs |= ondemand_libs()
    for lib in sorted(libs):
        c.add_file(lib)
        # the loader path and the /lib -> /usr/lib merge of Debian 12
        if lib.startswith("/lib/"):
            c.add_file(lib, "/usr" + lib)
    data = c.close()
    path = os.path.join(VMDIR, init.replace(".sh", "") + ".cpio.gz")
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(data)
    return path


def run_qemu(kernel, initrd, kvm, first_line_within=None, append=""):
    """Boot; returns the console text, or None if `first_line_within`
    seconds passed without the init's first line (@@UNAME)."""
    import select
    import time
    cmd = ["qemu-system-x86_64", "-m", os.environ.get("VM_MEM", "2048"), "-smp", "2", "-nographic",
           "-no-reboot", "-kernel", kernel, "-initrd", initrd,
           "-append", ("console=ttyS0 panic=-1 quiet loglevel=1 " + append).strip()]
    cmd += ["-enable-kvm", "-cpu", "host"] if kvm else ["-cpu", "max"]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = b""
    # the console as it comes, to follow a long run (tail -f build/vm/console-live.log)
    live = open(os.path.join(VMDIR, "console-live.log"), "wb")
    start = time.time()
    deadline = start + int(os.environ.get("VM_TIMEOUT", "1800"))
    while True:
        if first_line_within and b"@@UNAME" not in out and time.time() - start > first_line_within:
            p.kill()
            p.wait()
            return None
        if time.time() > deadline:
            p.kill()
            break
        r, _, _ = select.select([p.stdout], [], [], 1.0)
        if r:
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            out += chunk
            live.write(chunk)
            live.flush()
    p.wait()
    live.close()
    return out.decode(errors="replace").replace("\r", "")


def boot(kernel, initrd, append=""):
    kvm = False
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
        kvm = True
    except OSError:
        pass
    if kvm:
        print("booting %s under qemu with KVM" % os.path.basename(kernel), flush=True)
        text = run_qemu(kernel, initrd, True, first_line_within=90, append=append)
        if text is not None:
            return text, "KVM"
        # seen in a nested VM: /dev/kvm opens, the guest kernel never prints
        print("  no output from the KVM guest in 90 s: booting again under TCG (software emulation)", flush=True)
    else:
        print("booting %s under qemu (TCG: no usable /dev/kvm)" % os.path.basename(kernel), flush=True)
    return run_qemu(kernel, initrd, False, append=append), "TCG"


def sections(text):
    out = {}
    for m in re.finditer(r"^@@BEGIN (\S+)\n@@RC (\d+)\n@@STDOUT\n(.*?)@@STDERR\n(.*?)@@REPORT\n(.*?)@@END \1$",
                         text, re.M | re.S):
        out[m.group(1)] = {"rc": int(m.group(2)), "out": m.group(3), "err": m.group(4),
                           "rep": chtest.Report(m.group(5))}
    return out


def minor_words(out):
    return int(re.search(r"^MINOR_WORDS (\d+)$", out, re.M).group(1))


def check_sites(s, rate, executor="kernel"):
    assert s["rc"] == 0, s["err"]
    rep = s["rep"]
    assert rep.first_line().startswith("camlheap: executor %s; every allocation is sampled" % executor), \
        rep.first_line()
    truth = chtest.parse_truth(s["out"])
    assert len(truth) == 10, s["out"]
    for site, (_, words) in truth.items():
        chtest.check_binomial(rep.samples_at_lines(MOD, chtest.site_lines(site), "minor"), words, rate, site)
    chtest.check_binomial(rep.minor()["samples"], minor_words(s["out"]), rate, "all minor vs Gc.minor_words")
    assert rep.minor()["missed"] == 0, rep.header.get("minor")


# -- checks shared by the executors' VMs (sections of the console text) --

def rate_one(sec, text, executor):
    s = sec["rate_one"]
    assert s["rc"] == 0, s["err"]
    for site, (_, words) in chtest.parse_truth(s["out"]).items():
        got = s["rep"].samples_at_lines(MOD, chtest.site_lines(site), "minor")
        assert got == words, "%s: %d samples for %d words at rate 1" % (site, got, words)

def memprof(sec, text, executor):
    import statistics as st
    s = sec["memprof"]
    assert s["rc"] == 0, s["err"]
    mp = {int(a): int(b) for a, b in re.findall(r"^MEMPROF (\d+) (\d+)$", s["out"], re.M)}
    truth = chtest.parse_truth(s["out"])
    zcrit = st.NormalDist().inv_cdf(1 - 0.01 / (2 * len(truth)))
    for site in truth:
        lines = chtest.site_lines(site)
        n1 = s["rep"].samples_at_lines(MOD, lines, "minor")
        n2 = sum(mp.get(line, 0) for line in lines)
        assert n1 + n2 > 0, "%s: no sample at all" % site
        z = (n1 - n2) / math.sqrt(n1 + n2)
        assert abs(z) <= zcrit, "%s: camlheap %d vs Gc.Memprof %d (z = %.2f)" % (site, n1, n2, z)

def census(sec, text, executor):
    # the census programs load and run on this kernel's verifier:
    # live at end per site within the binomial bound of the truth
    s = sec["census"]
    assert s["rc"] == 0, s["err"]
    rep = s["rep"]
    c = rep.census()
    assert c and c["clean_phases"] >= 6, rep.header.get("census")
    truth = {}
    for kind, site, w in re.findall(r"^TRUTH (live|alloc) Leak\.(\w+) (\d+)$", s["out"], re.M):
        truth[(kind, site)] = int(w)
    for site in ("leak", "leak_cell", "churn_promoted", "churn_major", "cache"):
        lines = chtest.site_lines("Leak." + site)
        live = 0
        for st in rep.sites:
            own = [f for f in st["frames"] if f["function"].startswith("Leak.")]
            if own and own[0]["line"] in lines:
                live += st.get("live", 0)
        chtest.check_binomial(live, truth[("live", site)], 1e-3, "VM live Leak.%s" % site)
    assert c["followed"] == c["dead_minor"] + c["dead_major"] + rep.live_blocks_total(), c

def identical(sec, text, executor):
    assert sec["plain"]["rc"] == sec["profiled"]["rc"] == 0
    assert sec["plain"]["out"] == sec["profiled"]["out"], "outputs differ"

def kill9_runs(text, tag, nruns):
    """tests/vm/lib.sh kill9's lines: each run's status and output equal
    to the program's alone, and camlheap recording when killed in the even
    runs (those that wait for it): a camlheap that cannot attach at all
    fails here instead of passing on an unharmed target."""
    ref = re.search(r"^@@%s ref (rc=\d+ md5=\w+)$" % tag, text, re.M).group(1)
    runs = re.findall(r"^@@%s (\d+) (rc=\d+ md5=\w+) attached=(\d)$" % tag, text, re.M)
    assert len(runs) == nruns, runs
    for i, got, attached in runs:
        assert got == ref, "run %s: %s vs %s" % (i, got, ref)
        assert int(i) % 2 or attached == "1", "run %s: camlheap was not recording when killed" % i
    return ref


def kill9(sec, text, executor):
    kill9_runs(text, "KILL9", 8)


def v5_sites(sec, text, executor, v):
    import test_minor
    s = sec["v%s_sites" % v]
    assert s["rc"] == 0, s["err"]
    rep = s["rep"]
    assert rep.first_line().startswith("camlheap: executor %s;" % executor), rep.first_line()
    truth = chtest.parse_truth(s["out"])
    assert len(truth) >= 9, s["out"]
    test_minor._check_sites(rep, truth, 1e-4, "(OCaml %s, %s executor)" % (v, executor))
    total = sum(x["samples"] for x in rep.sites if x["kind"] == "minor")
    chtest.check_binomial(total, minor_words(s["out"]), 1e-4, "all minor vs Gc.minor_words")
    assert rep.minor()["missed"] == 0, rep.header.get("minor")

def v5_rate_one(sec, text, executor, v):
    s = sec["v%s_rate_one" % v]
    assert s["rc"] == 0, s["err"]
    truth = chtest.parse_truth(s["out"])
    assert len(truth) == 5, s["out"]
    for site, (_, words) in truth.items():
        got = s["rep"].samples_at_lines(MOD, chtest.site_lines(site), "minor")
        assert got == words, "%s: %d samples for %d words at rate 1" % (site, got, words)

def v5_domains(sec, text, executor, v):
    import json
    s = sec["v%s_domains" % v]
    assert s["rc"] == 0, s["err"]
    j = json.loads(s["rep"].text)
    so = s["out"]
    truth = chtest.parse_truth(so)
    doms = {l.split()[1]: int(l.split()[2]) for l in so.splitlines() if l.startswith("DOMAIN ")}
    assert len(truth) == 6 and "spins 1" in so, so
    assert j["run"]["executor"] == executor, j["run"]
    for fn, (kind, words) in truth.items():
        site = fn.split(".", 1)[1]
        found = []
        for x in j["sites"]:
            if x["stack"] is None or x["kind"] != kind:
                continue
            fr = [j["frames"][i] for i in j["stacks"][x["stack"]]["frames"]]
            if fr and fr[0]["function"] == fn:
                found.append(x)
        assert found, fn
        assert {x["domain"] for x in found} == {doms[site]}, (fn, [x["domain"] for x in found], doms)
        chtest.check_binomial(sum(x["samples"] for x in found), words, 1e-3, fn)
    assert j["run"]["minor"]["missed"] == 0, j["run"]["minor"]

def v5_identical(sec, text, executor, v):
    a, b = sec["v%s_plain" % v], sec["v%s_profiled" % v]
    assert a["rc"] == b["rc"] == 0, b["err"]
    assert a["out"] == b["out"], "outputs differ"


def kill9_domains(sec, text, executor, nruns=8):
    assert kill9_runs(text, "KILL9D", nruns).startswith("rc=0 ")


def main():
    """VM_ONLY=stock, cgroup2, systemd or register runs one part (default all)."""
    if os.geteuid() != 0:
        sys.exit("test-vm: needs root")
    ensure_packages()
    only = os.environ.get("VM_ONLY", "")
    results = []

    def check(name, fn):
        try:
            fn()
            results.append(True)
            print("PASS vm.%s" % name)
        except AssertionError as e:
            results.append(False)
            print("FAIL vm.%s: %s" % (name, e))
        except Exception as e:  # a section missing from a VM that did not finish
            results.append(False)
            print("FAIL vm.%s: %s: %s" % (name, type(e).__name__, e))

    if only in ("", "stock"):
        stock(check)
    if only in ("", "cgroup2"):
        cgroup2(check)
    if only in ("", "systemd"):
        systemd(check)
    if only in ("", "register"):
        kernel = unstable_kernel()
        initrd = build_initramfs("init_register.sh")
        for lockdown in (False, True):
            register(check, kernel, initrd, lockdown)
    print("%d passed, %d failed" % (results.count(True), results.count(False)))
    sys.exit(0 if results and all(results) else 1)


def stock(check):
    """The kernel executor under Debian 12's stock kernel (init.sh)."""
    kernel = stock_kernel()
    initrd = build_initramfs()
    text, kvm = boot(kernel, initrd)
    with open(os.path.join(VMDIR, "console.log"), "w") as f:
        f.write(text)
    sec = sections(text)
    K = (sec, text, "kernel")

    def booted():
        assert "@@DONE" in text, "the VM did not finish: see %s/console.log" % VMDIR
        m = re.search(r"^@@LOCKDOWN (.*)$", text, re.M)
        assert m and "[none]" in m.group(1), "lockdown in the VM: %r" % (m and m.group(1))
        assert "probe" in sec and sec["probe"]["rc"] == 0, sec.get("probe", {}).get("err")

    def ocamlopt_runs():
        s = sec.get("ocamlopt_check")
        assert s and s["rc"] == 0, "ocamlopt.opt fails in the VM: %s" % (s and s["err"][-500:])

    def malloc(name):
        import json
        import test_malloc
        s, plain = sec[name], sec[name + "_plain"]
        assert s["rc"] == 0 and plain["rc"] == 0, s["err"]
        assert s["out"] == plain["out"], "the target's output changed under --malloc"
        test_malloc.check_json(s["out"], json.loads(s["rep"].text), "(VM %s) " % name)

    def budget():
        s = sec["budget"]
        assert s["rc"] == 0, s["err"]
        line = s["rep"].header.get("budget", "")
        shifts = [int(k) for k in re.findall(r"\(2\^-(\d+)\)", line)]
        assert shifts and max(shifts) >= 1, line
        lam_min = 1e-3 * 2.0 ** -max(shifts)
        for site, (_, words) in chtest.parse_truth(s["out"]).items():
            got = s["rep"].samples_at_lines(MOD, chtest.site_lines(site), "minor") / 1e-3
            bound = chtest.Z * (words / lam_min) ** 0.5
            assert abs(got - words) <= bound, (site, got, words, bound, line)

    def serve():
        def grab(tag):
            m = re.search(r"^@@%s (.*)$" % tag, text, re.M)
            assert m, "no @@%s" % tag
            return m.group(1)
        assert grab("SERVE_RC") == "0" and grab("SERVE_TARGET_RC") == "0", text[text.find("@@SERVE"):][:3000]
        log = text[text.find("@@SERVE_LOG"):text.find("@@SERVE_STATUS\n")]
        assert "following PID" in log and "recording PID" in log, log
        status = text[text.find("@@SERVE_STATUS\n"):text.find("@@SERVE_FILES")]
        assert grab("SERVE_STATUS_RC") == "0" and re.search(r"^am\s+\d+ (recording|exited)", status, re.M), status
        files = grab("SERVE_FILES")
        assert "-final.pb.gz" in files and "census-" in files, files

    check("booted_without_lockdown", booted)
    check("ocamlopt_runs_in_the_vm", ocamlopt_runs)
    if sec:
        check("kernel_executor_sites_rate_1e4", lambda: check_sites(sec["sites_1e4"], 1e-4))
        check("kernel_executor_sites_rate_1e5", lambda: check_sites(sec["sites_1e5"], 1e-5))
        check("kernel_executor_exact_at_rate_one", lambda: rate_one(*K))
        check("kernel_executor_agrees_with_in_process_memprof", lambda: memprof(*K))
        check("kernel_executor_outputs_identical", lambda: identical(*K))
        check("kernel_executor_census_live_at_end", lambda: census(*K))
        check("kernel_executor_kill9_never_harms_target", lambda: kill9(*K))
        for v in ("53", "51"):
            name = "ocaml_%s_%s_" % (v[0], v[1])
            check(name + "kernel_executor_sites_rate_1e4", lambda v=v: v5_sites(*K, v))
            check(name + "kernel_executor_exact_at_rate_one", lambda v=v: v5_rate_one(*K, v))
            check(name + "kernel_executor_four_domains", lambda v=v: v5_domains(*K, v))
            check(name + "kernel_executor_outputs_identical", lambda v=v: v5_identical(*K, v))
        check("ocaml_5_3_kernel_executor_kill9_four_domains_never_harms_target", lambda: kill9_domains(*K))
        check("malloc_sites_live_and_c_thread", lambda: malloc("malloc"))
        check("ocaml_5_3_malloc_sites_live_and_c_thread", lambda: malloc("malloc53"))
        check("kernel_executor_budget_estimates_unbiased", budget)
        check("serve_discovers_profiles_and_stops_cleanly", serve)
        report_times(text, kvm)

def cgroup2(check):
    """census --on and serve's census-on with the memory controller on
    cgroup v2, in groups laid out as systemd's units (init_cgroup2.sh),
    judged as tests/test_census_on.py judges them on the host's v1."""
    import test_census_on as tco
    kernel = stock_kernel()
    text, kvm = boot(kernel, build_initramfs("init_cgroup2.sh"))
    with open(os.path.join(VMDIR, "console-cgroup2.log"), "w") as f:
        f.write(text)
    sec = sections(text)
    per = (2 * 1024 * 1024 // 64 * 5, 2 * 1024 * 1024 // 64 * 3)  # words a 2 MiB step leaks

    def leaked(out):
        return [tuple(map(int, m)) for m in re.findall(r"^LEAKED (\d+) (\d+)$", out, re.M)]

    def booted():
        assert "@@DONE" in text, "the VM did not finish: see %s/console-cgroup2.log" % VMDIR
        assert re.search(r"^@@CGROUP2 .*\bmemory\b", text, re.M), text[:2000]

    def oom():
        s = sec["oom_v2"]
        assert "@@OOM camlheap never watching" not in text, s["err"]
        assert "limit: 96.0 MiB" in s["err"], s["err"]
        # killed by the kernel as without camlheap: 128 + SIGKILL in the shell
        assert re.search(r"^TARGET_RC 137$", s["out"], re.M) and re.search(r"^OOM_KILL oom_kill 1$", s["out"], re.M), \
            s["out"][-2000:]
        assert s["rc"] == 0, s["err"]
        rep = s["rep"]
        assert re.search(r"OOM kill: the kernel's OOM killer chose the target \(oom:mark_victim\); its RSS was "
                         r"[\d.]+ MiB \d+ ms before, memory cgroup limit 96\.0 MiB", rep.text), rep.text[:2000]
        last = leaked(s["out"])[-1]
        assert last[0] * 8 > (96 << 20) // 4, s["out"][-2000:]
        tco.check_leak_first(rep, (last, (last[0] + per[0], last[1] + per[1])))

    def pressure():
        s = sec["pressure_v2"]
        assert "@@PRESSURE camlheap never watching" not in text, s["err"]
        assert "PSI, /sys/fs/cgroup/system.slice/stall.service/memory.pressure" in s["err"], s["err"]
        assert s["rc"] == 0, s["err"] + s["out"][-1000:]
        rep = s["rep"]
        m = re.search(r"pressure trigger: tasks of the target's cgroup stalled on memory 10 % of 2 s or more "
                      r"\(PSI /sys/fs/cgroup/system\.slice/stall\.service/memory\.pressure: some: stalled (\d+) ms of "
                      r"the last ([\d.]+) s \(\d+ %\), avg10=[\d.]+ %\); its RSS [\d.]+ MiB, memory cgroup limit "
                      r"160\.0 MiB", rep.text)
        assert m and int(m.group(1)) > 0 and float(m.group(2)) > 0, rep.text[:2000]
        last = leaked(s["out"])[-1]
        tco.check_leak_first(rep, (last, last))

    def serve():
        s = sec["serve_v2"]
        log = s["err"]
        assert "@@SERVE camlheap never recording" not in text, log[-3000:]
        assert s["rc"] == 0, log[-3000:]
        assert re.search(r"^TARGET_RC 137$", s["out"], re.M), s["out"][-2000:]
        # the cgroup's memory.pressure is read-only here: the system's, and why
        assert "census-on oom fired" in log, log[-3000:]
        assert re.search(r"the whole system's memory pressure is high \(PSI, /proc/pressure/memory: "
                         r"/sys/fs/cgroup/system\.slice/leak2\.service/memory\.pressure cannot be opened for "
                         r"writing: Read-only file system\)", log), log[-3000:]
        files = re.search(r"^FILES (.*)$", s["out"], re.M).group(1).split()
        assert any(re.match(r"census-.*-oom\.txt$", f) for f in files) and \
            any(re.match(r"heap-.*-oom\.pb\.gz$", f) for f in files), files
        rep = s["rep"]
        assert "OOM kill: the kernel's OOM killer chose the target" in rep.text, rep.text[:2000]
        last = leaked(s["out"])[-1]
        tco.check_leak_first(rep, (last, (last[0] + per[0], last[1] + per[1])))

    check("cgroup2_booted_with_the_memory_controller", booted)
    check("cgroup2_census_on_oom_is_the_census_of_the_kill_under_memory_max", oom)
    check("cgroup2_census_on_pressure_under_memory_high", pressure)
    check("cgroup2_serve_census_on_in_a_read_only_cgroup_fs", serve)


def systemd_rootfs():
    """Debian 12 with systemd (debootstrap --variant=minbase), without its
    documentation and package lists; built once into build/vm."""
    root = os.path.join(VMDIR, "rootfs-systemd")
    if os.path.exists(os.path.join(root, "lib/systemd/systemd")):
        return root
    if not shutil.which("debootstrap"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    tmp = root + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["debootstrap", "--variant=minbase", "--include=systemd,systemd-sysv", "bookworm", tmp,
                    "http://deb.debian.org/debian"], check=True, stdout=subprocess.DEVNULL)
    for d in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info", "var/cache/apt",
              "var/lib/apt/lists"):
        shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
    os.rename(tmp, root)
    return root


def build_systemd_initramfs():
    """The rootfs above as the initramfs (systemd is PID 1: rdinit), with
    camlheap and its libraries, the oomleak fixture, the unit make install
    ships (dist/camlheap.service.in, camlheap at /work), tests/vm/systemd's
    units, configuration and test script."""
    root = systemd_rootfs()
    c = Cpio()
    c.add_tree(root, skip=("dev", "proc", "sys", "run"))
    for d in ("dev", "proc", "sys", "run"):
        c.mkdir(d)
    sd = os.path.join(HERE, "systemd")
    c.add_file(chtest.CAMLHEAP, "/work/camlheap")
    c.add_file(chtest.fixture("oomleak"), "/work/fixtures/oomleak")
    c.add("/work/vmtest.sh", open(os.path.join(sd, "vmtest.sh"), "rb").read())
    unit = open(os.path.join(TESTS, "..", "dist", "camlheap.service.in")).read().replace("@BINDIR@", "/work")
    c.add("/etc/systemd/system/camlheap.service", unit.encode(), 0o100644)
    for f in ("oomleak.service", "vmtest.service"):
        c.add("/etc/systemd/system/" + f, open(os.path.join(sd, f), "rb").read(), 0o100644)
    c.add("/etc/camlheap/camlheap.conf", open(os.path.join(sd, "camlheap.conf"), "rb").read(), 0o100644)
    c.symlink("/etc/systemd/system/multi-user.target.wants/vmtest.service", "/etc/systemd/system/vmtest.service")
    for masked in ("serial-getty@ttyS0.service", "getty@tty1.service", "apt-daily.timer", "apt-daily-upgrade.timer",
                   "e2scrub_all.timer", "fstrim.timer"):
        c.symlink("/etc/systemd/system/" + masked, "/dev/null")
    libs = libs_of(chtest.CAMLHEAP) | ondemand_libs()
    for lib in sorted(libs):
        dest = "/usr" + lib if lib.startswith("/lib/") else lib
        if not os.path.exists(os.path.join(root, dest.lstrip("/"))):
            c.add_file(lib, dest)
    data = c.close()
    path = os.path.join(VMDIR, "systemd.cpio.gz")
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(data)
    return path


def systemd(check):
    """camlheap serve as the shipped unit under systemd (Debian 12's 252,
    cgroup v2), census-on = oom, and a program of the target in a unit with
    MemoryMax= leaking until the OOM kill (tests/vm/systemd/vmtest.sh)."""
    import test_census_on as tco
    kernel = stock_kernel()
    text, kvm = boot(kernel, build_systemd_initramfs(),
                     append="rdinit=/lib/systemd/systemd systemd.show_status=0 systemd.unit=multi-user.target")
    with open(os.path.join(VMDIR, "console-systemd.log"), "w") as f:
        f.write(text)

    def grab(tag):
        m = re.search(r"^@@%s ?(.*)$" % tag, text, re.M)
        assert m, "no @@%s: see %s/console-systemd.log" % (tag, VMDIR)
        return m.group(1)

    def part(tag, end):
        # between the line @@tag and the line @@end
        return text[text.find("@@" + tag + "\n") + len(tag) + 3:text.find("@@" + end + "\n")]

    def booted():
        assert "@@DONE" in text, "the VM did not finish: see %s/console-systemd.log" % VMDIR
        assert grab("SYSTEMD").startswith("systemd ") and grab("CGROUP") == "cgroup2fs", text[:3000]

    def unit_starts_and_stops():
        # Type=notify: `systemctl start` returns once camlheap sent READY=1
        assert grab("SERVE_START") == "rc=0 active", part("JOURNAL_ALL", "JOURNAL_JSON")[-3000:]
        assert grab("SERVE_AFTER") == "active restarts=0", part("JOURNAL_ALL", "JOURNAL_JSON")[-3000:]
        assert grab("SERVE_STOP") == "rc=0 result=success", part("JOURNAL_ALL", "JOURNAL_JSON")[-3000:]

    def oom_census():
        assert "@@NEVER_RECORDING" not in text and "@@NEVER_UNFOLLOWED" not in text, \
            part("JOURNAL_ALL", "JOURNAL_JSON")[-3000:]
        # the program dies as it would without camlheap: systemd's oom-kill,
        # SIGKILL (ExecMainCode 2: CLD_KILLED)
        assert grab("LEAK_RESULT") == "oom-kill status=9 code=2", grab("LEAK_RESULT")
        warn = part("JOURNAL_WARNING", "JOURNAL_ALL")
        pid = grab("LEAK_PID")
        assert re.search(r"target leak: PID %s: census-on oom fired, census and heap profile into "
                         r"/var/lib/camlheap/leak/%s-\S+: OOM kill: .* memory cgroup limit 96\.0 MiB" % (pid, pid), warn), \
            warn[-3000:]
        # the journal's priorities: warning for the trigger, info for a
        # process followed, and -p warning shows no info line
        import json
        prio = {}
        for line in part("JOURNAL_JSON", "LEAK_OUT").splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                for key in ("census-on oom fired", "following PID %s" % pid):
                    if isinstance(e.get("MESSAGE"), str) and key in e["MESSAGE"]:
                        prio[key] = e.get("PRIORITY")
        assert prio == {"census-on oom fired": "4", "following PID %s" % pid: "6"}, prio
        assert "following PID" not in warn, warn
        files = grab("FILES").split()
        assert any(re.match(r"census-.*-oom\.txt$", f) for f in files) and \
            any(re.match(r"heap-.*-oom\.pb\.gz$", f) for f in files), files
        rep = chtest.Report(part("CENSUS", "DONE"))
        assert re.search(r"OOM kill: the kernel's OOM killer chose the target \(oom:mark_victim\); its RSS was "
                         r"[\d.]+ MiB \d+ ms before, memory cgroup limit 96\.0 MiB", rep.text), rep.text[:2000]
        leaked = [tuple(map(int, m)) for m in re.findall(r"^LEAKED (\d+) (\d+)$", part("LEAK_OUT", "FILES"), re.M)]
        last = leaked[-1]
        assert last[0] * 8 > (96 << 20) // 4, leaked
        per = (2 * 1024 * 1024 // 64 * 5, 2 * 1024 * 1024 // 64 * 3)
        tco.check_leak_first(rep, (last, (last[0] + per[0], last[1] + per[1])))

    check("systemd_booted_with_cgroup2", booted)
    check("systemd_shipped_unit_starts_ready_and_stops", unit_starts_and_stops)
    check("systemd_serve_census_on_oom_under_memory_max", oom_census)


UNSTABLE = "https://deb.debian.org/debian"


def unstable_kernel():
    """vmlinuz of Debian unstable's linux-image-amd64, whose uprobe programs
    may change registers (Debian 12's 6.1 and this machine's 6.18 refuse).
    The package is found through unstable's Packages index (the image
    package the metapackage depends on, then the linux-binary package of
    the same version, which holds the vmlinuz), checked against the
    index's SHA256, unpacked, and kept in build/vm/unstable."""
    import hashlib
    import lzma
    import urllib.request
    d = os.path.join(VMDIR, "unstable")
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("vmlinuz-"):
            return os.path.join(d, f)
    with urllib.request.urlopen(UNSTABLE + "/dists/sid/main/binary-amd64/Packages.xz", timeout=300) as r:
        index = lzma.decompress(r.read()).decode(errors="replace")
    stanzas = {}
    for st in index.split("\n\n"):
        m = re.search(r"^Package: (\S+)$", st, re.M)
        if m:
            stanzas[m.group(1)] = st
    meta = stanzas["linux-image-amd64"]
    img = re.search(r"\b(linux-image-(\S+?)-amd64) \(", re.search(r"^Depends: .*$", meta, re.M).group(0))
    assert img, meta
    pkg = "linux-binary-%s-amd64" % img.group(2)
    st = stanzas.get(pkg) or stanzas[img.group(1)]
    fname = re.search(r"^Filename: (\S+)$", st, re.M).group(1)
    sha = re.search(r"^SHA256: (\w+)$", st, re.M).group(1)
    with urllib.request.urlopen(UNSTABLE + "/" + fname, timeout=600) as r:
        data = r.read()
    assert hashlib.sha256(data).hexdigest() == sha, "%s: checksum mismatch" % fname
    deb = os.path.join(d, "k.deb")
    with open(deb, "wb") as f:
        f.write(data)
    x = os.path.join(d, "x")
    subprocess.run(["dpkg-deb", "-x", deb, x], check=True)
    found = None
    for root, _, files in os.walk(x):
        for f in files:
            if f.startswith("vmlinuz"):
                found = os.path.join(root, f)
    assert found, "no vmlinuz in %s" % fname
    out = os.path.join(d, "vmlinuz-" + img.group(2))
    shutil.copy(found, out)
    shutil.rmtree(x)
    os.unlink(deb)
    return out


def register(check, kernel, initrd, lockdown):
    """The register executor (init_register.sh) on a kernel that allows it,
    booted plainly or with lockdown=integrity: the sampling, census,
    identity, GC timing and kill -9 checks of the other executors."""
    import json
    tag = "lockdown" if lockdown else "plain"
    text, kvm = boot(kernel, initrd, "lockdown=integrity" if lockdown else "")
    with open(os.path.join(VMDIR, "console-register-%s.log" % tag), "w") as f:
        f.write(text)
    sec = sections(text)
    K = (sec, text, "register")
    pre = "register_%s_" % tag

    def booted():
        assert "@@DONE" in text, "the VM did not finish: see %s/console-register-%s.log" % (VMDIR, tag)
        m = re.search(r"^@@LOCKDOWN (.*)$", text, re.M)
        want = "[integrity]" if lockdown else "[none]"
        assert m and want in m.group(1), "lockdown in the VM: %r, wanted %s" % (m and m.group(1), want)

    def auto_picks_register():
        s = sec["probe"]
        assert s["rc"] == 0, s["err"]
        assert s["rep"].first_line().startswith("camlheap: executor register;"), s["rep"].first_line()
        # under lockdown the kernel executor is refused, and says why
        k = sec["kernel_allowed"]
        if lockdown:
            assert k["rc"] == 2 and "lockdown" in k["err"], (k["rc"], k["err"])
        else:
            assert k["rc"] == 0, k["err"]

    def storm_and_output(name, plain):
        # the program's output as without camlheap; the idiom's traps a sample
        s = sec[name]
        assert s["rc"] == 0 and sec[plain]["rc"] == 0, s["err"][-2000:]
        assert s["out"] == sec[plain]["out"], "the output changed under the register executor"
        minor = json.loads(s["rep"].text)["run"]["minor"]
        assert minor["missed"] == 0 and minor["samples"] > 100, minor
        return minor

    def cdeep():
        minor = storm_and_output("cdeep", "cdeep_plain")
        chtest.check_binomial(minor["samples"], minor_words(sec["cdeep"]["out"]), 1e-4, "cdeep minor samples")
        print("    cdeep (4.13) at 1e-4: %d traps for %d samples (%.2f a sample)" % (
            minor["traps"], minor["samples"], minor["traps"] / max(1, minor["samples"])))

    def census5(v):
        s = sec["v%s_census" % v]
        assert s["rc"] == 0 and "DROPPED 4" in s["out"], (s["rc"], s["out"][-300:], s["err"][-1000:])
        j = json.loads(s["rep"].text)
        c = j["census"]
        assert c["born_in_minor_heap"] > 100 and c["not_followed"] == 0, c
        live = 0
        for x in j["sites"]:
            fr = [j["frames"][i] for i in j["stacks"][x["stack"]]["frames"]] if x["stack"] is not None else []
            if fr and fr[0]["function"].startswith("Dropall.work"):
                live += x["live"]["samples"]
        assert live == 0, "%d samples of dropped blocks counted live" % live

    def no_oops(before_multi):
        part = text[:text.find("@@MULTI")] if before_multi and "@@MULTI" in text else text
        m = re.search(r"^.*(BUG:|Oops:).*$", part, re.M)
        rip = re.search(r"^.*RIP: 0010:(\S+).*$", part[m.start():], re.M) if m else None
        assert not m, "the kernel oopsed: %s at %s (see %s/console-register-%s.log)" % (
            m.group(0).strip(), rip and rip.group(1), VMDIR, tag)

    check(pre + "booted", booted)
    if not sec:
        return
    check(pre + "no_kernel_oops_with_one_domain", lambda: no_oops(True))
    check(pre + "no_kernel_oops_with_several_domains", lambda: no_oops(False))
    check(pre + "auto_picks_the_register_executor", auto_picks_register)
    check(pre + "sites_rate_1e4", lambda: check_sites(sec["sites_1e4"], 1e-4, "register"))
    check(pre + "exact_at_rate_one", lambda: rate_one(*K))
    check(pre + "agrees_with_in_process_memprof", lambda: memprof(*K))
    check(pre + "census_live_at_end", lambda: census(*K))
    check(pre + "outputs_identical", lambda: identical(*K))
    check(pre + "idiom_output_identical_and_samples_unbiased", cdeep)
    check(pre + "gc_timing_unchanged", lambda: storm_and_output("gctiming", "gctiming_plain"))
    check(pre + "kill9_never_harms_target", lambda: kill9(*K))
    for v in ("53", "51"):
        name = pre + "ocaml_%s_%s_" % (v[0], v[1])
        check(name + "sites_rate_1e4", lambda v=v: v5_sites(*K, v))
        check(name + "exact_at_rate_one", lambda v=v: v5_rate_one(*K, v))
        check(name + "four_domains", lambda v=v: v5_domains(*K, v))
        check(name + "outputs_identical", lambda v=v: v5_identical(*K, v))
        check(name + "gc_timing_unchanged",
              lambda v=v: storm_and_output("v%s_gctiming" % v, "v%s_gctiming_plain" % v))
        check(name + "census_of_four_domains_that_drop_everything", lambda v=v: census5(v))
    check(pre + "ocaml_5_3_kill9_four_domains_never_harms_target", lambda: kill9_domains(*K, nruns=6))
    report_register_times(text, kvm, tag)


def report_register_times(text, kvm, tag):
    """Medians of the target's wall time per configuration (3 rounds)."""
    times = {}
    for w, conf, rate, us, rc in re.findall(r"^@@TIME (\S+) (\S+) (\S+) (\d+) rc=(\d+)$", text, re.M):
        if rc == "0":
            times.setdefault((w, rate), {}).setdefault(conf, []).append(int(us) / 1e6)
    print("\nregister executor in the VM (%s, %s; medians of 3; seconds, ratio to plain):" % (kvm, tag))
    for (w, rate), confs in sorted(times.items()):
        base = confs.get("plain")
        if not base:
            continue
        b = statistics.median(base)
        line = "  %-14s rate %-5s plain %.3f" % (w, rate, b)
        for conf in ("memprof", "register", "kernel"):
            if confs.get(conf):
                t = statistics.median(confs[conf])
                line += "  %s %.3f (x%.3f)" % (conf, t, t / b)
        print(line)


def report_times(text, kvm):
    """The VM's measurements: target time plain, with in-process memprof,
    and under the kernel executor (from camlheap's report), medians."""
    times = {}
    for w, conf, rate, us, rc in re.findall(r"^@@TIME (\S+) (\S+) (\S+) (\d+) rc=(\d+)$", text, re.M):
        if rc == "0":  # a failed run's time means nothing
            times.setdefault((w, conf, rate), []).append(int(us) / 1e6)
    rep = {}
    for w, conf, rate, hdr in re.findall(r"^@@REPORTED (\S+) (\S+) (\S+) (.*)$", text, re.M):
        d = re.search(r"duration\s+([\d.]+) s.*target exited with status 0", hdr)
        n = re.search(r"samples\s+(\d+)", hdr)
        wr = re.search(r"kernel: (\d+) writes", hdr)
        if d and n:
            rep.setdefault((w, rate), []).append((float(d.group(1)), int(n.group(1)),
                                                  int(wr.group(1)) if wr else 0))
    print("\nkernel executor in the VM (%s; medians of 3; target seconds):" % kvm)
    for w in ("alloc_minor", "ocamlopt", "alloc_minor53", "domains53"):
        for rate in ("1e-5", "1e-4"):
            base = times.get((w, "plain", rate))
            if not base:
                continue
            b = statistics.median(base)
            line = "  %-12s rate %-5s plain %.3f" % (w, rate, b)
            mp = times.get((w, "memprof", rate))
            if mp:
                line += "  memprof %.3f (x%.3f)" % (statistics.median(mp), statistics.median(mp) / b)
            k = rep.get((w, rate))
            if k:
                t = statistics.median(x[0] for x in k)
                n = statistics.median(x[1] for x in k)
                wr = statistics.median(x[2] for x in k)
                line += "  kernel %.3f (x%.3f, %d samples, %d writes, %.2f us/sample)" % (
                    t, t / b, n, wr, (t - b) / n * 1e6 if n else float("nan"))
            print(line)


if __name__ == "__main__":
    main()
