"""Helpers shared by camlheap's end-to-end tests: run fixtures and camlheap
for real (BPF programs loaded, uprobes attached to real OCaml processes),
parse TRUTH lines and reports, and judge sample counts against the sampling
variance.

Statistics: each allocated word is sampled independently with probability
lambda, so the samples at a site that allocated W words are Binomial(W,
lambda): mean lambda*W, variance lambda*W*(1-lambda).  A check passes when the
observed count lies within Z standard deviations of the mean.  Z = 4.5 gives a
two-sided false-alarm probability of 6.8e-6 per check; with fewer than 150
such checks in a full `make test`, a correct sampler fails a run with
probability below 1e-3 (Bonferroni).  A test that makes k checks as one
(per-site agreement of two samplers) takes z_limit(k) for each, so that
together they count as one such check.  Nothing is tuned to the observed
data.
"""
import math
import os
import re
import select
import statistics
import signal
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build")
CAMLHEAP = os.path.join(BUILD, "camlheap")
FIXTURES = os.path.join(BUILD, "fixtures")
FIXTURE_SRC = os.path.join(ROOT, "tests", "fixtures")

Z = 4.5


class Skip(Exception):
    """Raised by a test whose precondition is missing (reported, not failed)."""


def fixture(name):
    return os.path.join(FIXTURES, name)


_tmpdirs = []


def tmpdir():
    """A fresh directory under $TMPDIR; run_tests.py removes it after a run
    without failures (CAMLHEAP_KEEP_TMP=1 keeps every one)."""
    d = tempfile.mkdtemp(prefix="camlheap-test-")
    _tmpdirs.append(d)
    return d


def remove_tmpdirs():
    import shutil
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)
    del _tmpdirs[:]


def parse_truth(stdout):
    """{site: (kind, words)} from 'TRUTH kind site words' lines."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^TRUTH (\w+) (\S+) (\d+)$", line)
        if m:
            out[m.group(2)] = (m.group(1), int(m.group(3)))
    return out


def site_lines(site):
    """Source line numbers of the '(* SITE:name *)' markers for Module.name."""
    mod, fn = site.split(".", 1)
    path = os.path.join(FIXTURE_SRC, mod[0].lower() + mod[1:] + ".ml")
    for sub in ("plugin", "ocaml5"):
        if not os.path.exists(path):
            path = os.path.join(FIXTURE_SRC, sub, mod[0].lower() + mod[1:] + ".ml")
    lines = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if "(* SITE:%s *)" % fn in line:
                lines.append(i)
    return lines


class Report:
    """A parsed text report."""

    def __init__(self, text):
        self.text = text
        self.lines = text.splitlines()
        self.header = {}
        self.sites = []      # --by stack: one per callstack
        self.points = []     # --by point (default): allocation points in detail
        self.point_rows = [] # the table of allocation points
        self.functions = []  # the table of functions
        cur = None
        section = None
        for line in self.lines:
            if re.match(r"^(Allocation points by|Functions by|Allocation points in detail|Top \d+ callstacks?|"
                        r"All \d+ callstacks?|Live callstacks|Leak suspects)", line):
                section = ("Allocation points in detail" if line.startswith("Allocation points in detail")
                           else line.split(" ")[0] + " " + line.split(" ")[1])
                cur = None
                continue
            m = re.match(r"^(\w+)\s{2,}(.*)$", line)
            if m and section is None and not line.startswith("#"):
                self.header[m.group(1)] = m.group(2)
                continue
            if section == "Allocation points" and re.match(r"^\s+\d+\s", line):
                m = re.match(r"^\s+(\d+)\s+(\w+)\s+(.+?) \[(.+?) \.\. (.+?)\]\s+([\d.]+)%\s+([\d.]+)%\s+(.*)$", line)
                assert m, line
                self.point_rows.append({"rank": int(m.group(1)), "kind": m.group(2), "estimate": m.group(3),
                                        "share": float(m.group(6)), "sum": float(m.group(7)), "point": m.group(8)})
                continue
            if section == "Functions by" and re.match(r"^  \S.*%  \S", line) and "flat [95% CI]" not in line:
                m = re.match(r"^  (.+?) \[.+?\]\s+([\d.]+)%\s+([\d.]+)%\s+(.+?) \[.+?\]\s+([\d.]+)%\s+(.*)$", line)
                assert m, line
                self.functions.append({"flat": m.group(1), "flat_pct": float(m.group(2)), "sum_pct": float(m.group(3)),
                                       "cum": m.group(4), "cum_pct": float(m.group(5)), "function": m.group(6)})
                continue
            if section == "Allocation points in detail":
                m = re.match(r"^#(\d+)\s+(\w+)\s+(?:live )?(.+?)\s+\[95% CI (.+?) \.\. (.+?)\]\s+(\d+) samples?", line)
                if m:
                    cur = {"kind": m.group(2), "samples": int(m.group(6)), "at": None, "callers": [], "stacks": [],
                           "more_stacks": 0}
                    self.points.append(cur)
                    continue
                if cur is None:
                    continue
                m = re.match(r"^    at (.*)$", line)
                if m:
                    cur["at"] = m.group(1)
                    continue
                m = re.match(r"^      \s*([\d.]+)%  .+? \[.+?\]\s+(.*)$", line)
                if m and not cur["stacks"]:
                    cur["callers"].append((float(m.group(1)), m.group(2)))
                    continue
                m = re.match(r"^    callstack (\d+) of (\d+): ([\d.]+)% of the point, .+?, (\d+) samples?$", line)
                if m:
                    cur["nstacks"] = int(m.group(2))
                    cur["stacks"].append({"samples": int(m.group(4)), "frames": []})
                    continue
                if line.startswith("      ") and cur["stacks"]:
                    cur["stacks"][-1]["frames"].append(line.strip())
                continue
            if section is not None and section.split(" ")[0] not in ("Top", "All", "Live"):
                continue
            m = re.match(r"^#(\d+)\s+(\w+)\s+live (.+?)\s+\[95% CI (.+?) \.\. (.+?)\]\s+(\d+) samples? in (\d+) blocks?", line)
            if m:  # a census site
                cur = {"kind": m.group(2), "samples": int(m.group(6)), "live": int(m.group(6)),
                       "live_blocks": int(m.group(7)), "frames": [], "end": None}
                self.sites.append(cur)
                continue
            m = re.match(r"^#(\d+)\s+(\w+)\s+(.+?)\s+\[95% CI (.+?) \.\. (.+?)\]\s+(\d+) samples?", line)
            if m:
                cur = {"kind": m.group(2), "samples": int(m.group(6)), "frames": [], "end": None}
                self.sites.append(cur)
                continue
            m = re.match(r"^    live at end .+?\] (\d+) samples? in (\d+) blocks?; peak live", line)
            if m and cur is not None:
                cur["live"], cur["live_blocks"] = int(m.group(1)), int(m.group(2))
                continue
            m = re.match(r"^    age: median ([\d.-]+) major GCs(?:; leak score (.+?)/cycle \(live blocks born in "
                         r"(\d+) of (\d+) judged major cycles\)(  LEAK SUSPECT)?)?", line)
            if m and cur is not None:
                cur["median_age"] = float(m.group(1))
                cur["score"] = m.group(2)
                cur["retaining"] = int(m.group(3)) if m.group(3) else None
                cur["cycles"] = int(m.group(4)) if m.group(4) else None
                cur["suspect"] = bool(m.group(5))
                continue
            if cur is not None and line.startswith("      "):
                fr = line.strip()
                repeat = 1
                mr = re.match(r"^(.*) \[x(\d+)\]$", fr)
                if mr:  # a run of identical frames, printed once
                    fr, repeat = mr.group(1), int(mr.group(2))
                me = re.match(r"^\[stack walk ended: (.+)\]$", fr)
                if me:
                    cur["end"] = me.group(1)
                    continue
                mf = re.match(r"^(\S+)(?: \((.*?)(?::(\d+))?\))?( \[inlined\])?$", fr)
                if mf:
                    frame = {"function": mf.group(1), "file": mf.group(2),
                             "line": int(mf.group(3)) if mf.group(3) else None, "inlined": bool(mf.group(4))}
                else:
                    frame = {"function": fr, "file": None, "line": None, "inlined": False}
                cur["frames"].extend(dict(frame) for _ in range(repeat))

    def first_line(self):
        return self.lines[0] if self.lines else ""

    def samples_total(self):
        m = re.match(r"^(\d+) in (\d+) sampled blocks; dropped events (\d+)", self.header.get("samples", ""))
        return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None

    def walks(self):
        w = self.header.get("stacks", "")
        out = {}
        for k in ("clean", "unknown pc", "read error", "depth limit"):
            m = re.search(k + r" (\d+)", w)
            out[k] = int(m.group(1)) if m else None
        return out

    def observed_words(self, kind):
        m = re.search(kind + r" (\d+) words", self.header.get("observed", ""))
        return int(m.group(1)) if m else None

    def sites_at(self, function, kind=None):
        """Sites whose innermost frame in `function`'s module is `function`
        (stdlib wrappers such as Stdlib.Marshal.from_string sit below it)."""
        mod = function.split(".", 1)[0] + "."
        out = []
        for s in self.sites:
            if kind is not None and s["kind"] != kind:
                continue
            own = [f for f in s["frames"] if f["function"].startswith(mod)]
            if own and own[0]["function"] == function:
                out.append(s)
        return out

    def samples_at(self, function, kind=None):
        return sum(s["samples"] for s in self.sites_at(function, kind))

    def samples_at_lines(self, module, lines, kind=None):
        """Samples of the sites whose innermost frame in `module` (e.g.
        "Alloc_minor.") is on one of `lines`: a Comballoc'd allocation is
        told apart from its neighbours by its own line."""
        n = 0
        for s in self.sites:
            if kind is not None and s["kind"] != kind:
                continue
            own = [f for f in s["frames"] if f["function"].startswith(module)]
            if own and own[0]["line"] in lines:
                n += s["samples"]
        return n

    def census(self):
        """Counts from the 'census' line: followed, minor_born, promoted, dead_minor, dead_major,
        minor_gcs, major_gcs, clean_phases."""
        m = re.match(r"^(\d+) sampled blocks? followed \((\d+) born in the minor heap\): (\d+) promoted, "
                     r"(\d+) died in the minor heap, (\d+) in the major heap; (\d+) minor and (\d+) major "
                     r"collections seen \((\d+) reached their clean phase\)", self.header.get("census", ""))
        if not m:
            return None
        return dict(zip(("followed", "minor_born", "promoted", "dead_minor", "dead_major", "minor_gcs",
                         "major_gcs", "clean_phases"), map(int, m.groups())))

    def live_blocks_total(self):
        m = re.search(r"in (\d+) sampled blocks?;", self.header.get("live", ""))
        return int(m.group(1)) if m else None

    def suspects(self):
        """The leak-suspect list: [(function, line, suspect flag)] best first."""
        out = []
        for line in self.lines:
            m = re.match(r"^  \d+\. \S+ \S+/cycle  \w+  (\S+) \(.*?:(\d+)\)  retained in \d+/\d+ cycles(  LEAK SUSPECT)?$",
                         line)
            if m:
                out.append((m.group(1), int(m.group(2)), bool(m.group(3))))
        return out

    def minor(self):
        """{samples, traps, cycles, missed, untracked} from the 'minor' line."""
        m = re.match(r"^(\d+) samples; (\d+) traps into caml_alloc_small_dispatch, (\d+) minor cycles; "
                     r"sample points missed (\d+), in untracked blocks (\d+)$", self.header.get("minor", ""))
        if not m:
            return None
        return dict(zip(("samples", "traps", "cycles", "missed", "untracked"), map(int, m.groups())))

    def executor(self):
        """{stops, writes, stale, pending, errors, passed} from the 'executor' line (ptrace)."""
        m = re.match(r"^ptrace: (\d+) stops \(([\d.]+) us of service each\), (\d+) writes, (\d+) stale, "
                     r"(\d+) left to a pending action, (\d+) errors; (\d+) of the program's own signals",
                     self.header.get("executor", ""))
        if not m:
            return None
        g = m.groups()
        return {"stops": int(g[0]), "service_us": float(g[1]), "writes": int(g[2]), "stale": int(g[3]),
                "pending": int(g[4]), "errors": int(g[5]), "passed": int(g[6])}


def z_limit(k):
    """The |z| limit for each of k checks that together count as one
    check of the suite: their family-wise false-alarm probability is that
    of a single check at Z, 2 (1 - Phi(Z)) = 6.8e-6 (Bonferroni)."""
    nd = statistics.NormalDist()
    return nd.inv_cdf(1 - (1 - nd.cdf(Z)) / k)


def check_binomial(samples, words, rate, what):
    mean = rate * words
    sd = math.sqrt(words * rate * (1 - rate))
    if sd == 0:
        assert samples == 0, "%s: %d samples where none are possible" % (what, samples)
        return
    z = (samples - mean) / sd
    assert abs(z) <= Z, "%s: %d samples, expected %.1f +- %.1f (z = %.2f, limit %.1f)" % (
        what, samples, mean, sd, z, Z)


def run_record(args, cmd, timeout=300, stdin=None, env=None):
    """camlheap record ARGS -- CMD (stdin: bytes fed to it, or nothing);
    returns (returncode, stdout, stderr)."""
    p = subprocess.run([CAMLHEAP, "record"] + args + ["--"] + cmd, input=stdin,
                       stdin=None if stdin is not None else subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=env)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def record_launch(cmd, rate, extra=(), timeout=300, stdin=None):
    """Launch-mode recording to a text report; returns (rc, fixture stdout, Report, stderr)."""
    d = tmpdir()
    out = os.path.join(d, "report.txt")
    rc, so, se = run_record(["--rate", repr(rate), "--top", "100000", "--by", "stack", "-o", out] + list(extra), cmd,
                            timeout=timeout, stdin=stdin)
    text = open(out).read() if os.path.exists(out) else ""
    return rc, so, Report(text), se


def stderr_until(p, text, timeout=60):
    """The stderr of Popen p (a pipe) read up to `text` (bytes): what was
    read, decoded; the rest stays for p.communicate()."""
    buf = b""
    deadline = time.time() + timeout
    while text not in buf:
        assert time.time() < deadline, buf
        r, _, _ = select.select([p.stderr], [], [], 1)
        if r:
            chunk = os.read(p.stderr.fileno(), 4096)
            assert chunk, "camlheap exited early: %r" % buf
            buf += chunk
    return buf.decode(errors="replace")


class Waiting:
    """A fixture started with --wait: READY printed, blocked on stdin."""

    def __init__(self, name, args=(), stdout_file=None):
        self.proc = subprocess.Popen([fixture(name), "--wait"] + list(args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()
        m = re.match(r"^READY (\d+)$", line.strip())
        assert m, "fixture %s did not print READY: %r" % (name, line)
        self.pid = int(m.group(1))

    def line(self):
        """Send one line (a fixture waiting on stdin goes on)."""
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def expect(self, text, timeout=60):
        """Read the fixture's stdout up to a line equal to `text`."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = self.proc.stdout.readline().decode()
            assert line, "fixture ended before printing %r" % text
            if line.strip() == text:
                return
        raise AssertionError("fixture did not print %r" % text)

    def release(self):
        self.line()
        self.proc.stdin.close()
        self.proc.stdin = None

    def finish(self, timeout=120):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out.decode(), err.decode()


class Recorder:
    """camlheap record -p PID in the background; waits until probes are attached."""

    def __init__(self, pid, rate, extra=(), out=None):
        self.dir = tmpdir()
        self.out = out or os.path.join(self.dir, "report.txt")
        self.proc = subprocess.Popen([CAMLHEAP, "record", "-p", str(pid), "--rate", repr(rate), "--top", "100000",
                                      "--by", "stack", "-o", self.out] + list(extra),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.stderr = b""

    def wait_attached(self, timeout=60):
        self.wait_stderr(b"probes attached", timeout)

    def wait_stderr(self, text, timeout=60):
        """Wait until camlheap's stderr contains `text` (bytes)."""
        deadline = time.time() + timeout
        fd = self.proc.stderr.fileno()
        while text not in self.stderr:
            left = deadline - time.time()
            assert left > 0, "camlheap did not attach: %r" % self.stderr
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise AssertionError("camlheap exited before attaching (rc %s): %s" % (
                        self.proc.wait(), self.stderr.decode(errors="replace")))
                self.stderr += chunk

    def finish(self, timeout=120):
        out, err = self.proc.communicate(timeout=timeout)
        self.stderr += err
        text = open(self.out).read() if os.path.exists(self.out) else ""
        return self.proc.returncode, Report(text), self.stderr.decode(errors="replace")

    def stop(self, sig=signal.SIGINT):
        self.proc.send_signal(sig)


def kill9_runs(name, args, ref, rate, runs, extra=(), attach_every=3, max_delay=0.3, sigstop_odd=False):
    """Run fixture `name` --wait ARGS `runs` times under `camlheap record -p`
    and kill camlheap with -9: every `attach_every`-th run while it attaches,
    the others at a uniform random moment up to `max_delay` s into the run
    (with `sigstop_odd`, odd runs first SIGSTOP camlheap for 50 ms, so that
    target threads wait on a frozen camlheap).  Asserts that each run's
    (status, stdout, stderr) equals `ref` (Waiting.finish of a plain run).
    Returns how many runs still had the target running at the kill."""
    import random
    rnd = random.Random(int.from_bytes(os.urandom(8), "little"))
    running_at_kill = 0
    for i in range(runs):
        w = Waiting(name, args)
        r = Recorder(w.pid, rate, extra=extra)
        if i % attach_every == 0:
            time.sleep(rnd.uniform(0, 0.15))  # while it attaches
            r.proc.kill()
            w.release()
        else:
            r.wait_attached()
            w.release()
            time.sleep(rnd.uniform(0, max_delay))
            if sigstop_odd and i % 2:
                r.proc.send_signal(signal.SIGSTOP)
                time.sleep(0.05)
            running_at_kill += w.proc.poll() is None
            r.proc.kill()
        r.proc.wait()
        got = w.finish()
        assert got == ref, "run %d: target changed: %r" % (i, got[:2])
    return running_at_kill


def worker_memory(pid):
    """Memory a camlheap process costs the host beyond what it shares, in
    bytes: {"private": its and its link holder's (the process with the same
    command line, user/collect/sampler_holder.c) private resident
    pages (smaps_rollup Private_Clean + Private_Dirty; the ring buffer's
    mapping is the kernel's, counted below), "bpf": the kernel memory of
    the BPF maps they hold (fdinfo memlock, each map once), "total"}."""
    try:
        cmd = open("/proc/%d/cmdline" % pid, "rb").read()
    except OSError:
        return None
    pids = [pid]
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != pid:
            try:
                if open("/proc/%s/cmdline" % d, "rb").read() == cmd:
                    pids.append(int(d))
            except OSError:
                pass
    private = 0
    maps = {}
    for p in pids:
        try:
            for line in open("/proc/%d/smaps_rollup" % p):
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    private += int(line.split()[1]) * 1024
            for fd in os.listdir("/proc/%d/fd" % p):
                try:
                    if os.readlink("/proc/%d/fd/%s" % (p, fd)) != "anon_inode:bpf-map":
                        continue
                    info = dict(l.split(":", 1) for l in open("/proc/%d/fdinfo/%s" % (p, fd)) if ":" in l)
                    maps[int(info["map_id"])] = int(info["memlock"])
                except (OSError, KeyError, ValueError):
                    pass
        except OSError:
            pass
    return {"private": private, "bpf": sum(maps.values()), "total": private + sum(maps.values())}
