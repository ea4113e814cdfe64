"""census --on: the census written at the moment memory runs out -- the
kernel's OOM kill in a memory cgroup, an RSS threshold, memory pressure
(PSI) -- and nothing written (exit 1) when the program ends first.

Fixture: tests/fixtures/oomleak.ml (its header says what it leaks and what
its LEAKED lines count).  Every leaked word is live when the census is
taken, so a site's live samples are binomial over its leaked words
(check_between: the truth is known between two of the fixture's lines).
"""
import itertools
import os
import re
import subprocess
import time

import chtest
from chtest import Z, fixture, site_lines

RATE = 1e-4
STEP_MIB = 4
_serial = itertools.count()


class MemoryCgroup:
    """A memory cgroup of its own limited to `limit` bytes: cgroup v2's
    memory.max where the memory controller is on the v2 hierarchy, else
    v1's memory.limit_in_bytes (this VM's kernel mounts memory as v1), and
    then a group of the v2 hierarchy too where one is mounted (PSI's
    memory.pressure is the v2 group's).  A process started with
    preexec_fn=cg.join runs in them."""

    def __init__(self, limit):
        name = "camlheap-test-%d-%d" % (os.getpid(), next(_serial))
        self.paths = []
        ctl = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(ctl) and "memory" in open(ctl).read().split():
            with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
                f.write("+memory")
            self.path = self._mkdir("/sys/fs/cgroup", name)
            self._write("memory.max", str(limit))
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                self._write("memory.swap.max", "0")
            self.version = 2
        else:
            if not os.path.isdir("/sys/fs/cgroup/memory"):
                raise chtest.Skip("no memory cgroup controller mounted")
            self.path = self._mkdir("/sys/fs/cgroup/memory", name)
            self._write("memory.limit_in_bytes", str(limit))
            self.version = 1
            if os.path.exists("/sys/fs/cgroup/unified/cgroup.procs"):
                self._mkdir("/sys/fs/cgroup/unified", name)

    def _mkdir(self, root, name):
        path = os.path.join(root, name)
        os.mkdir(path)
        self.paths.append(path)
        return path

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def join(self):
        for path in self.paths:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def oom_kills(self):
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in open(os.path.join(self.path, name)):
            k, v = line.split()
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self):
        for path in self.paths:
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.05)


class Leaker:
    """oomleak --wait ARGS (in cgroup `cg` if given); LEAKED lines read
    as they come."""

    def __init__(self, args, cg=None):
        self.proc = subprocess.Popen([fixture("oomleak"), "--wait"] + list(args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     preexec_fn=cg.join if cg else None)
        m = re.match(r"^READY (\d+)$", self.proc.stdout.readline().decode().strip())
        assert m, "oomleak did not start"
        self.pid = int(m.group(1))
        self.leaked = []  # (leak words, leak_cell words) after each step

    def go(self):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def next_line(self):
        line = self.proc.stdout.readline().decode()
        m = re.match(r"^LEAKED (\d+) (\d+)$", line.strip())
        if m:
            self.leaked.append((int(m.group(1)), int(m.group(2))))
        return line


def census_on(pid, trigger, extra=()):
    out = os.path.join(chtest.tmpdir(), "census.txt")
    p = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(pid), "--rate", repr(RATE), "--by", "stack",
                          "--on", trigger, "-o", out] + list(extra),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p, out


def wait_watching(p, timeout=60):
    """camlheap's stderr up to its 'the census will be written when' line."""
    return chtest.stderr_until(p, b"the census will be written when", timeout)


def live_rows(rep):
    """[(function, line, live samples)] of a census, first first: its sites
    (--by stack, the Oomleak frame nearest the allocation) or its points
    (--by point, as serve writes it)."""
    rows = []
    for s in rep.sites:
        own = [f for f in s["frames"] if f["function"].startswith("Oomleak.")]
        rows.append((own[0]["function"], own[0]["line"], s.get("live", 0)) if own else ("", 0, s.get("live", 0)))
    for p in rep.points:
        m = re.match(r"^(\S+) \(.*:(\d+)\)$", p["at"] or "")
        rows.append((m.group(1), int(m.group(2)), p["samples"]) if m else ("", 0, p["samples"]))
    return rows


def live_at(rep, site):
    lines = site_lines("Oomleak." + site)
    return sum(n for fn, line, n in live_rows(rep) if fn.startswith("Oomleak.") and line in lines)


def check_between(samples, lo_words, hi_words, what):
    """samples binomial over some number of words in [lo_words, hi_words]."""
    lo = RATE * lo_words - Z * (lo_words * RATE) ** 0.5
    hi = RATE * hi_words + Z * (hi_words * RATE) ** 0.5
    assert lo <= samples <= hi, "%s: %d samples, expected %.1f..%.1f (truth %d..%d words)" % (
        what, samples, lo, hi, lo_words, hi_words)


def check_leak_first(rep, bounds):
    """The leak's two sites first and within binomial bounds of the truth:
    bounds = ((leak lo, cell lo), (leak hi, cell hi)) in words."""
    leak_lines = set(site_lines("Oomleak.leak") + site_lines("Oomleak.leak_cell"))
    rows = live_rows(rep)
    assert rows and rows[0][1] in leak_lines, rep.text[:3000]
    (lo_leak, lo_cell), (hi_leak, hi_cell) = bounds
    check_between(live_at(rep, "leak"), lo_leak, hi_leak, "live Oomleak.leak")
    check_between(live_at(rep, "leak_cell"), lo_cell, hi_cell, "live Oomleak.leak_cell")
    # churned tuples count until a minor collection finds them dead: at most
    # a minor heap's worth (256 k words by default) is in the census
    assert live_at(rep, "churn") <= RATE * 262144 + Z * (RATE * 262144) ** 0.5, rep.text[:3000]


def test_census_on_oom_is_the_census_of_the_kill():
    limit = 160 << 20
    cg = MemoryCgroup(limit)
    try:
        w = Leaker(["step=%d" % STEP_MIB], cg)
        p, out = census_on(w.pid, "oom")
        err = wait_watching(p)
        assert "OOM killer" in err and "limit: 160.0 MiB" in err, err
        w.go()
        while w.next_line():
            pass
        w.proc.wait(timeout=120)
        _, e = p.communicate(timeout=120)
        err += e.decode()
        # killed by the kernel, exactly as it would be without camlheap
        assert w.proc.returncode == -9, (w.proc.returncode, w.proc.stderr.read())
        assert cg.oom_kills() == 1
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
        cg.remove()
    assert p.returncode == 0, err
    rep = chtest.Report(open(out).read())
    assert re.search(r"OOM kill: the kernel's OOM killer chose the target \(oom:mark_victim\); its RSS was "
                     r"[\d.]+ MiB \d+ ms before, memory cgroup limit 160\.0 MiB", rep.text), rep.text[:2000]
    # the kill comes in the step after the last line printed, or in the step
    # that would have printed the next one
    last = w.leaked[-1] if w.leaked else (0, 0)
    per = (STEP_MIB * 1024 * 1024 // 64 * 5, STEP_MIB * 1024 * 1024 // 64 * 3)
    assert last[0] * 8 > limit // 4, w.leaked
    check_leak_first(rep, (last, (last[0] + per[0], last[1] + per[1])))


def rss_of(pid):
    with open("/proc/%d/statm" % pid) as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_census_on_rss_is_the_census_at_the_crossing():
    threshold = 64 << 20
    w = Leaker(["n=30", "step=%d" % STEP_MIB, "pause=400", "idle"])
    p, out = census_on(w.pid, "rss=64M")
    try:
        err = wait_watching(p)
        assert "its RSS reaches 64.0 MiB (now" in err, err
        w.go()
        # the step after which the RSS is above the threshold: camlheap
        # sees it within 50 ms, late in that step or in the 400 ms pause
        # that follows
        crossed = None
        while p.poll() is None or crossed is None:
            line = w.next_line()
            assert line and line != "DONE\n", (line, w.leaked)
            if crossed is None and rss_of(w.pid) >= threshold:
                crossed = len(w.leaked) - 1
        _, e = p.communicate(timeout=120)
        err += e.decode()
    finally:
        w.proc.stdin.close()
        w.proc.kill()
        w.proc.wait()
    assert p.returncode == 0, err
    rep = chtest.Report(open(out).read())
    m = re.search(r"RSS trigger: the target's RSS reached ([\d.]+) MiB \(rss=64\.0 MiB\)", rep.text)
    assert m and float(m.group(1)) >= 64.0, rep.text[:2000]
    lo = w.leaked[crossed - 1] if crossed else (0, 0)
    hi = w.leaked[min(crossed + 1, len(w.leaked) - 1)]
    check_leak_first(rep, (lo, hi))


def test_census_on_pressure_is_the_census_when_the_cgroup_stalls():
    # the leak done and idle (its truth known), then a file written over and
    # over in the same memory cgroup, 48 MiB above what the fixture holds:
    # the page cache is reclaimed in the cgroup, its tasks stall on memory
    cg = MemoryCgroup(112 << 20)
    writer = None
    try:
        w = Leaker(["n=4", "step=%d" % STEP_MIB, "idle"], cg)
        p, out = census_on(w.pid, "pressure=1")
        err = wait_watching(p)
        assert re.search(r"its memory pressure is high \(PSI, /\S+/memory\.pressure\)", err), err
        w.go()
        while w.next_line() != "DONE\n":
            pass
        scratch = os.path.join(chtest.tmpdir(), "scratch")
        writer = subprocess.Popen(["sh", "-c", "while :; do dd if=/dev/zero of=%s bs=1M count=192 status=none; "
                                   "done" % scratch], preexec_fn=cg.join)
        _, e = p.communicate(timeout=120)
        err += e.decode()
    finally:
        if writer:
            writer.kill()
            writer.wait()
        w.proc.kill()
        w.proc.wait()
        cg.remove()
    assert p.returncode == 0, err
    rep = chtest.Report(open(out).read())
    m = re.search(r"pressure trigger: tasks of the target's cgroup stalled on memory 1 % of 2 s or more "
                     r"\(PSI /\S+/memory\.pressure: some: stalled (\d+) ms of the last ([\d.]+) s \(\d+ %\), avg10=[\d.]+ %\); "
                     r"its RSS [\d.]+ MiB, memory cgroup "
                     r"limit 112\.0 MiB", rep.text)
    assert m, rep.text[:2000]
    # the stall camlheap read off the PSI file's total over the last window
    # (or since it started watching, if that was less than a window ago)
    assert int(m.group(1)) > 0 and float(m.group(2)) > 0, m.group(0)
    check_leak_first(rep, (w.leaked[-1], w.leaked[-1]))


def test_record_on_writes_a_census_at_the_trigger_and_records_on():
    d = chtest.tmpdir()
    out = os.path.join(d, "run.txt")
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "--by", "stack", "--on", "rss=48M", "-o", out],
                                   [fixture("oomleak"), "n=20", "step=%d" % STEP_MIB])
    assert rc == 0, se
    files = sorted(os.listdir(d))
    census = [f for f in files if re.match(r"census-\d{8}T\d{6}\.\d{3}Z-rss\.txt$", f)]
    assert len(census) == 1 and any(re.match(r"heap-.*-rss\.pb\.gz$", f) for f in files), files
    text = open(os.path.join(d, census[0])).read()
    m = re.search(r"RSS trigger: the target's RSS reached ([\d.]+) MiB", text)
    assert m and float(m.group(1)) >= 48.0, text[:2000]
    # the resident breakdown is read at the trigger (the leak only grows:
    # at least what fired it), not a reading of another moment
    r = re.search(r"^resident    RSS ([\d.]+) MiB \(peak [\d.]+ MiB; read at the trigger\)", text, re.M)
    assert r and float(r.group(1)) >= float(m.group(1)) - 0.1, text[:2000]
    # the recording went on to the program's end: its report has every step
    leaked = [tuple(map(int, l.split()[1:])) for l in so.splitlines() if l.startswith("LEAKED")]
    assert len(leaked) == 20
    rep = chtest.Report(open(out).read())
    check_between(sum(s["samples"] for s in rep.sites if any(f["function"] == "Oomleak.leak_one" for f in s["frames"])),
                  sum(leaked[-1]), sum(leaked[-1]), "samples in Oomleak.leak_one")


def test_census_on_writes_json_with_its_trigger():
    w = Leaker(["n=30", "step=%d" % STEP_MIB, "pause=100", "idle"])
    out = os.path.join(chtest.tmpdir(), "census.json")
    p = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(w.pid), "--rate", repr(RATE), "--on", "rss=40M",
                          "-o", out], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        err = wait_watching(p)
        w.go()
        while p.poll() is None:
            line = w.next_line()
            assert line and line != "DONE\n", (line, w.leaked)
        err += p.communicate(timeout=60)[1].decode()
    finally:
        w.proc.stdin.close()
        w.proc.kill()
        w.proc.wait()
    assert p.returncode == 0 and "census written to %s (trigger: rss)" % out in err, err
    import json
    j = json.load(open(out))
    assert j["format"] == "camlheap-report" and j["run"]["trigger"].startswith(
        "RSS trigger: the target's RSS reached"), j["run"]
    assert j["census"] and j["census"]["live_samples"] > 0, j["census"]
    # the leak's live samples are the bulk of the live sampled heap
    leak = sum(x["live"]["samples"] for x in j["sites"] if x.get("live") and x["stack"] is not None and any(
        j["frames"][i]["function"] == "Oomleak.leak_one" for i in j["stacks"][x["stack"]]["frames"]))
    assert leak >= 0.9 * j["census"]["live_samples"], (leak, j["census"])


def test_serve_keeps_the_trigger_files_past_keep_intervals():
    """serve's retention (keep = N files a type) counts census-on's files
    apart from the periodic ones: the rss pair outlives `keep` intervals."""
    from test_serve import PORT_BASE, Service
    svc = Service({"leak": "exe = %s\nrate = %r\ncensus-on = rss=24M" % (fixture("oomleak"), RATE)},
                  PORT_BASE + 25, interval=1, keep=2)
    w = None
    try:
        w = Leaker(["n=8", "step=%d" % STEP_MIB, "idle"])
        svc.wait_state(w.pid, "recording")
        w.go()
        while w.next_line() != "DONE\n":
            pass
        svc.wait_log(r"PID %d: census-on rss fired" % w.pid, timeout=60)
        # 5 periodic pairs written after the trigger: 2 of them kept
        d = os.path.join(svc.out, "leak", [x for x in os.listdir(os.path.join(svc.out, "leak"))
                                           if x.startswith("%d-" % w.pid)][0])
        time.sleep(6)
        # retention runs right after each write: a listing in between may see
        # one pair more for a moment
        for _ in range(40):
            files = sorted(os.listdir(d))
            if len([f for f in files if re.match(r"(census|heap)-\d{8}T\d{6}\.\d{3}Z\.(txt|pb\.gz)$", f)]) <= 4:
                break
            time.sleep(0.05)
    finally:
        if w and w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
        svc.stop()
    rss = [f for f in files if f.endswith(("-rss.txt", "-rss.pb.gz"))]
    periodic = [f for f in files if re.match(r"(census|heap)-\d{8}T\d{6}\.\d{3}Z\.(txt|pb\.gz)$", f)]
    assert len(rss) == 2 and len(periodic) == 4, files


def test_census_on_without_the_trigger_writes_nothing():
    w = Leaker(["n=2", "step=1"])
    out = os.path.join(chtest.tmpdir(), "census.txt")
    with open(out, "w") as f:
        f.write("an earlier census\n")
    p = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(w.pid), "--on", "oom,rss=10G", "-o", out],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = wait_watching(p)
    w.go()
    w.proc.communicate(timeout=60)
    _, e = p.communicate(timeout=60)
    err += e.decode()
    assert w.proc.returncode == 0
    assert p.returncode == 1, err
    assert re.search(r"no census written: target exited with status 0 before any trigger \(--on oom,rss=10G\) "
                     r"fired", err), err
    assert open(out).read() == "an earlier census\n"


def test_census_on_names_the_smallest_limit_of_the_cgroup_and_its_ancestors():
    # a unit in a slice: the slice's limit bounds it (systemd's MemoryMax= on
    # a .slice), the unit has none of its own
    cg = MemoryCgroup(200 << 20)
    child = os.path.join(cg.path, "unit")
    os.mkdir(child)
    cg.paths.insert(0, child)

    def join():
        with open(os.path.join(child, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    w = None
    try:
        w = subprocess.Popen([fixture("oomleak"), "--wait", "n=1", "step=1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=join)
        pid = int(w.stdout.readline().split()[1])
        p, out = census_on(pid, "oom")
        err = wait_watching(p)
        assert "the OOM killer chooses the target (its memory cgroup's limit: 200.0 MiB)" in err, err
        w.communicate(b"go\n", timeout=60)
        _, e = p.communicate(timeout=60)
        assert p.returncode == 1 and not os.path.exists(out), err + e.decode()
    finally:
        if w and w.poll() is None:
            w.kill()
            w.wait()
        cg.remove()


def test_census_on_pressure_ends_when_the_cgroup_is_removed():
    # the group whose memory.pressure camlheap watches is removed (the
    # program moved out first): the kernel signals POLLERR on the trigger;
    # camlheap says pressure is no longer watched and follows the program on
    cg = MemoryCgroup(256 << 20)
    w = None
    try:
        w = Leaker(["n=1", "step=1"], cg)
        p, out = census_on(w.pid, "pressure=50")
        err = wait_watching(p)
        m = re.search(r"\(PSI, (/\S+)/memory\.pressure\)", err)
        assert m and m.group(1) in cg.paths, (err, cg.paths)
        group = m.group(1)
        with open(os.path.join(os.path.dirname(group), "cgroup.procs"), "w") as f:
            f.write(str(w.pid))
        os.rmdir(group)
        cg.paths.remove(group)
        err += chtest.stderr_until(p, b"memory pressure no longer watched", 30)
        assert "--on pressure: %s/memory.pressure is gone" % group in err, err
        w.go()
        w.proc.communicate(timeout=60)
        _, e = p.communicate(timeout=60)
        err += e.decode()
        assert w.proc.returncode == 0 and p.returncode == 1, err
        assert "no census written: target exited with status 0" in err, err
    finally:
        if w and w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
        cg.remove()


def test_census_on_refuses_bad_triggers():
    cases = [
        (["--on", "foo"], "unknown trigger 'foo'"),
        (["--on", "rss=lots"], "rss=SIZE takes a size"),
        (["--on", "pressure=0"], "0 < PCT <= 100"),
        (["--on", "oom,oom"], "given twice"),
        (["--on", ""], "names no trigger"),
        (["--on", "rss=2GiB"], "rss=SIZE takes a size"),
        (["--on", "oom", "--wait-major", "2"], "give no --wait-major"),
        (["--on", "oom", "--exact"], "--exact takes no"),
        (["--on", "oom", "--format", "svg"], "census writes text or json"),
        (["--on", "oom", "-o", "/tmp/at-oom.pb.gz"], "census writes text or json"),
        (["--on", "oom rss=1G"], "unknown trigger 'oom rss=1G'"),
    ]
    for args, text in cases:
        p = subprocess.run([chtest.CAMLHEAP, "census", "-p", "1"] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        err = p.stderr.decode()
        assert p.returncode == 2 and text in err, (args, p.returncode, err)
    # blanks are ignored, as a configuration file's "census-on = oom, pressure = 20" has them: the
    # options parse, and the PID (none such) is what is refused
    p = subprocess.run([chtest.CAMLHEAP, "census", "-p", "999999999", "--on", " oom , pressure = 20,\trss = 1.5G"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 2 and "--on" not in p.stderr.decode(), p.stderr.decode()


def test_serve_census_on_writes_one_census_a_trigger_counted_and_logged():
    """serve's census-on: the rss crossing and then the OOM kill of a
    process of the target each write a census (and heap profile) named for
    the trigger in its directory, counted in /metrics, with a warning in the
    service's log; the process dies as it would without camlheap."""
    from test_serve import PORT_BASE, Service, curl
    svc = Service({"leak": "exe = %s\nrate = %r\ncensus-on = oom, rss=48M" % (fixture("oomleak"), RATE)},
                  PORT_BASE + 24, interval=600)
    cg = MemoryCgroup(128 << 20)
    w = None
    try:
        check = subprocess.run([chtest.CAMLHEAP, "serve", "--config", svc.conf, "--check"], stdout=subprocess.PIPE)
        assert b"a census at oom, rss=48M" in check.stdout, check.stdout
        bad = os.path.join(svc.dir, "bad.conf")
        with open(bad, "w") as f:
            f.write("[serve]\noutput = %s\n[target:leak]\nexe = %s\ncensus-on = oom, rss=lots\n"
                    % (svc.out, fixture("oomleak")))
        check = subprocess.run([chtest.CAMLHEAP, "serve", "--config", bad, "--check"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        assert check.returncode == 2 and re.search(r"bad\.conf: \[target:leak\] census-on: 'rss=lots': rss=SIZE "
                                                   r"takes a size", check.stderr.decode()), check
        w = Leaker(["step=%d" % STEP_MIB, "pause=100"], cg)
        svc.wait_state(w.pid, "recording")
        w.go()
        while w.next_line():
            pass
        assert w.proc.wait(timeout=120) == -9
        svc.wait_log(r"census-on oom fired", timeout=60)
        code, body = curl(svc.url("/metrics"))
        assert code == 200
        counts = dict(re.findall(r'^camlheap_census_triggers_total\{target="leak",trigger="(\w+)"\} (\d+)$',
                                 body.decode(), re.M))
        assert counts == {"oom": "1", "rss": "1", "pressure": "0"}, body.decode()[:3000]
        log = svc.text()
        assert re.search(r"target leak: PID %d: census-on rss fired, census and heap profile into \S+: RSS trigger: the "
                         r"target's RSS reached [\d.]+ MiB \(rss=48\.0 MiB\)" % w.pid, log), log[-3000:]
        svc.wait_log(r"PID %d no longer followed" % w.pid, timeout=60)
        d = [x for x in os.listdir(os.path.join(svc.out, "leak")) if x.startswith("%d-" % w.pid)]
        files = sorted(os.listdir(os.path.join(svc.out, "leak", d[0])))
        oom = [f for f in files if re.match(r"census-.*-oom\.txt$", f)]
        rss = [f for f in files if re.match(r"census-.*-rss\.txt$", f)]
        assert len(oom) == 1 and len(rss) == 1 and any(re.match(r"heap-.*-oom\.pb\.gz$", f) for f in files), files
        rep = chtest.Report(open(os.path.join(svc.out, "leak", d[0], oom[0])).read())
        assert "OOM kill: the kernel's OOM killer chose the target" in rep.text, rep.text[:2000]
        last = w.leaked[-1]
        per = (STEP_MIB * 1024 * 1024 // 64 * 5, STEP_MIB * 1024 * 1024 // 64 * 3)
        check_leak_first(rep, (last, (last[0] + per[0], last[1] + per[1])))
    finally:
        if w and w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()
        svc.stop()
        cg.remove()
