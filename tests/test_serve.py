"""`camlheap serve`: the service run from the test suite (no systemd), with a
configuration naming fixture binaries.

- three instances of a fixture, one killed and restarted: every one gets
  profiles, the restarted one too, each within a second of its exec, and
  files rotate at `keep`;
- the HTTP endpoint fetched with curl: pprof profiles validated as in
  test_outputs, /metrics parsed as Prometheus text (python3-prometheus-client),
  then scraped by Debian's real Prometheus and fetched over HTTP by `go tool pprof`,
  /targets, a memtrace recording, the Unix socket and `camlheap status`;
- the overhead budget: achieved sample rate within the budget, estimated
  words within the sampling bound of the fixture's own count;
- the systemd unit: `systemd-analyze verify`, and its ExecStart run directly
  with NOTIFY_SOCKET / WATCHDOG_USEC / JOURNAL_STREAM as systemd sets them;
- a compressed soak: 1 000 short-lived target processes churned through the
  service, then its descriptors, memory, children and the host's BPF
  programs, maps and links compared with before.
"""
import contextlib
import gzip
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import chtest
from chtest import CAMLHEAP, Z, fixture
from test_outputs import PPROF_TYPES, decode_pprof

PORT_BASE = 17061


def curl(url, out=None, unix=None, timeout=90):
    """(HTTP status, body bytes) of GET url, through curl."""
    args = ["curl", "-s", "-m", str(timeout), "-o", out or "-", "-w", "\n%{http_code}"]
    if unix:
        args += ["--unix-socket", unix]
    p = subprocess.run(args + [url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout + 10)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code or 0), body


class Service:
    """camlheap serve with a generated configuration, stderr to a file."""

    def __init__(self, targets, port, interval=1.0, keep=3, extra="", env=None, argv=None, args=(), prefix=()):
        self.dir = chtest.tmpdir()
        self.out = os.path.join(self.dir, "out")
        self.sock = os.path.join(self.dir, "serve.sock")
        self.port = port
        self.conf = os.path.join(self.dir, "camlheap.conf")
        with open(self.conf, "w") as f:
            f.write("[serve]\noutput = %s\ninterval = %g\nkeep = %d\nlisten = 127.0.0.1:%d\nsocket = %s\n%s\n" %
                    (self.out, interval, keep, port, self.sock, extra))
            for name, body in targets.items():
                f.write("[target:%s]\n%s\n" % (name, body))
        self.log = os.path.join(self.dir, "serve.log")
        self.logf = open(self.log, "w")
        self.proc = subprocess.Popen(argv or list(prefix) + [CAMLHEAP, "serve", "--config", self.conf] + list(args),
                                     stdout=self.logf,
                                     stderr=self.logf, env=env)
        self.wait_log(r"serving \d+ target")

    def text(self):
        with open(self.log) as f:
            return f.read()

    def wait_log(self, pattern, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self.text()):
                return
            assert self.proc.poll() is None, "serve exited %s:\n%s" % (self.proc.returncode, self.text())
            time.sleep(0.05)
        raise AssertionError("no %r in the service's log:\n%s" % (pattern, self.text()[-4000:]))

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def targets(self):
        code, body = curl(self.url("/targets"))
        assert code == 200, (code, body[:500])
        return json.loads(body)

    def processes(self):
        return {p["pid"]: p for t in self.targets()["targets"] for p in t["processes"]}

    def wait_state(self, pid, state, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            p = self.processes().get(pid)
            if p and p["state"] == state:
                return p
            time.sleep(0.1)
        raise AssertionError("PID %d never %s: %s\n%s" % (pid, state, self.processes().get(pid),
                                                          self.text()[-3000:]))

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self.logf.close()
        return rc


def files_of(out, target, pid):
    d = [x for x in os.listdir(os.path.join(out, target)) if x.startswith("%d-" % pid)]
    assert len(d) == 1, d
    d = os.path.join(out, target, d[0])
    return d, sorted(os.listdir(d))


def stop_both(svc, p):
    """Cleanup of a test: the service, then the fixture process if it runs on."""
    svc.stop()
    if p.poll() is None:
        p.kill()
        p.wait()


def start_idle(n=5):
    p = subprocess.Popen([fixture("idle"), "n=%d" % n], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t = time.time()
    line = p.stdout.readline().decode()
    assert line.startswith("READY"), line
    return p, t


@contextlib.contextmanager
def one_idle_worker(port):
    """A service following one idle fixture process, once its worker
    records: yields (service, process, the worker's PID)."""
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle")}, port, interval=60)
    p, _ = start_idle()
    try:
        svc.wait_state(p.pid, "recording")
        yield svc, p, svc.processes()[p.pid]["worker_pid"]
    finally:
        stop_both(svc, p)


def test_serve_follows_three_instances_and_a_restart_and_rotates_files():
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle")}, PORT_BASE, interval=1.0, keep=3)
    procs = []
    try:
        for _ in range(3):
            procs.append(start_idle())
        for p, t_exec in procs:
            info = svc.wait_state(p.pid, "recording")
            # the worker started within a second of the exec (discovery is
            # the exec tracepoint, not a poll)
            assert info["followed_since_unix"] - t_exec < 1.0, (info, t_exec)
        time.sleep(5.5)  # > keep + 1 intervals
        victim, _ = procs[0]
        victim.kill()
        victim.wait()
        svc.wait_state(victim.pid, "exited")
        again, t_exec = start_idle()
        info = svc.wait_state(again.pid, "recording")
        assert info["followed_since_unix"] - t_exec < 1.0, (info, t_exec)
        procs.append((again, t_exec))
        time.sleep(2.5)
        for p, _ in procs:
            d, names = files_of(svc.out, "idle", p.pid)
            heaps = [n for n in names if n.startswith("heap-")]
            census = [n for n in names if n.startswith("census-")]
            assert heaps and census, (p.pid, names)
            # rotation: never more than keep of each type
            assert len(heaps) <= 3 and len(census) <= 3, (p.pid, names)
        # the long-running ones wrote more than keep and were trimmed to it
        for p, _ in procs[1:3]:
            d, names = files_of(svc.out, "idle", p.pid)
            assert len([n for n in names if n.startswith("heap-")]) == 3, names
            assert svc.processes()[p.pid]["files_written"] >= 8, svc.processes()[p.pid]
        d, names = files_of(svc.out, "idle", victim.pid)
        assert any(n.endswith("-final.pb.gz") for n in names), names
        assert any(n.endswith("-final.txt") for n in names), names
        # the end reason says how it died (issue 24: it read "target exited")
        final = open(os.path.join(d, [n for n in names if n.endswith("-final.txt")][0])).read()
        assert "final: target killed by signal 9 (Killed)" in final, final[:2000]
        # every heap profile is a complete pprof of its process
        for p, _ in procs:
            d, names = files_of(svc.out, "idle", p.pid)
            path = os.path.join(d, [n for n in names if n.startswith("heap-")][-1])
            prof = decode_pprof(path)
            # its Time is when it was taken, as Go's heap profiles (issue 24 item 11: it was when
            # following started); its Duration what it covers
            taken = prof["time_nanos"][0] / 1e9
            assert abs(taken - os.stat(path).st_mtime) < 3.0, (taken, os.stat(path).st_mtime)
            if p is not victim:
                since = svc.processes()[p.pid]["followed_since_unix"]
                assert taken - since > 1.5, (taken, since)
            strings = prof["string_table"]
            assert strings[prof["mapping"][0]["filename"][0]].endswith("/idle")
            assert any("Idle.idle_site" in strings[f["name"][0]] for f in prof["function"])
        rc = svc.stop()
        assert rc == 0, svc.text()[-3000:]
        # SIGTERM: every live process got its final files, and kept running
        for p, _ in procs[1:]:
            assert p.poll() is None, "the target died with the service"
            d, names = files_of(svc.out, "idle", p.pid)
            assert any(n.endswith("-final.pb.gz") for n in names), names
        assert "stopped: every worker detached" in svc.text()
    finally:
        svc.stop()
        for p, _ in procs:
            p.kill()
            p.wait()


PROM_PARSE = '''
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    out[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
'''


def parse_prometheus(text):
    """{family: {type, samples: [[name, labels, value]]}} by the Prometheus
    client library's own parser (Debian's python3-prometheus-client, so
    Debian's python3 whatever python3 runs the tests)."""
    r = subprocess.run(["/usr/bin/python3", "-c", PROM_PARSE], input=text, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return json.loads(r.stdout)


def test_serve_caps_the_output_directory_at_keep_bytes():
    # (the file says 60 s; --interval overrides it)
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle")}, PORT_BASE + 7, interval=60, keep=1000,
                  extra="keep-bytes = 24K", args=["--interval", "0.2"])
    p, _ = start_idle()
    try:
        svc.wait_state(p.pid, "recording")
        time.sleep(4)
        # the newest file the service knows of (a newer one may be on disk
        # before its "wrote" message is read)
        info = svc.processes()[p.pid]
        last, written = os.path.basename(info["last_heap_profile"]), info["files_written"]
        d, names = files_of(svc.out, "idle", p.pid)
        sizes = [os.path.getsize(os.path.join(d, n)) for n in names]
        # files went (the byte cap, keep = 1000 never acts), oldest first:
        # what is left is the newest run of what was written
        assert written >= 20 and len(names) < written - 4, (written, names)
        kept_heaps = sorted(n for n in names if n.startswith("heap-"))
        assert len(kept_heaps) >= 2, names
        assert last in kept_heaps, (last, kept_heaps)
        # at most the pairs written since the last retention pass above the cap
        assert sum(sizes) <= 24 * 1024 + 4 * max(sizes), (sum(sizes), sizes)
        newest = max(names)
        time.sleep(0.5)
        assert svc.stop() == 0
        d, names = files_of(svc.out, "idle", p.pid)
        total = sum(os.path.getsize(os.path.join(d, n)) for n in names)
        assert total <= 24 * 1024 and any(n.endswith("-final.pb.gz") for n in names), (total, names)
    finally:
        svc.stop()
        p.kill()
        p.wait()


def test_serve_http_endpoints_pprof_metrics_targets_memtrace_status():
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle")}, PORT_BASE + 1, interval=60)
    p, _ = start_idle()
    try:
        svc.wait_state(p.pid, "recording")
        time.sleep(1.5)
        for kind, default in (("heap", "inuse_space"), ("allocs", "alloc_space")):
            for query in ("pid=%d" % p.pid, "target=idle"):
                path = os.path.join(svc.dir, "%s.pb.gz" % kind)
                code, _ = curl(svc.url("/debug/pprof/%s?%s" % (kind, query)), out=path)
                assert code == 200, (kind, query, open(path, "rb").read()[:300])
                prof = decode_pprof(path)
                s = prof["string_table"]
                types = [(s[t["type"][0]], s[t["unit"][0]]) for t in prof["sample_type"]]
                assert types == PPROF_TYPES, types
                assert s[prof["default_sample_type"][0]] == default
                assert prof["period"][0] == round(8 / 1e-3)
                assert s[prof["mapping"][0]["filename"][0]].endswith("/idle")
                alloc = sum(x["value"][1] for x in prof["sample"])
                inuse = sum(x["value"][3] for x in prof["sample"])
                assert alloc > 0 and 0 <= inuse <= alloc, (alloc, inuse)
                assert "PID %d" % p.pid in s[prof["comment"][0]]
        # go tool pprof reads it, as Pyroscope/Parca scrapers do
        # (golang-go is one of the Makefile's DEB_PKGS)
        g = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=alloc_space", path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert g.returncode == 0 and b"Idle.idle_site" in g.stdout, g.stderr.decode()[-500:]
        # nothing beyond the configured targets
        code, body = curl(svc.url("/debug/pprof/heap?pid=%d" % os.getpid()))
        assert code == 404 and b"not a process of a configured target" in body, (code, body)
        code, body = curl(svc.url("/debug/pprof/heap?pid=1"))
        assert code == 404, (code, body)
        code, body = curl(svc.url("/debug/pprof/heap?pid=%d&seconds=30" % p.pid))
        assert code == 400 and b"delta" in body, (code, body)
        code, body = curl(svc.url("/etc/passwd"))
        assert code == 404, code
        # /metrics: Prometheus text that parses, with this process's figures
        code, body = curl(svc.url("/metrics"))
        assert code == 200
        fams = parse_prometheus(body)
        samples = [v for n, lab, v in fams["camlheap_samples"]["samples"] if lab.get("pid") == str(p.pid)]
        assert samples and samples[0] > 0, fams.get("camlheap_samples")
        assert fams["camlheap_samples"]["type"] == "counter"
        lam = [v for n, lab, v in fams["camlheap_lambda"]["samples"] if lab.get("pid") == str(p.pid)]
        assert lam == [1e-3], lam
        for name in ("camlheap_dropped_events", "camlheap_executor_stops", "camlheap_overhead_seconds",
                     "camlheap_overhead_ratio", "camlheap_samples_per_second", "camlheap_processes_followed"):
            assert name in fams, (name, sorted(fams))
        # /targets
        t = svc.targets()
        assert t["targets"][0]["name"] == "idle"
        proc = svc.processes()[p.pid]
        assert proc["state"] == "recording" and proc["ocaml_version"] and proc["samples"] > 0, proc
        # a memtrace recording of the next second, readable by camlheap report
        ctf = os.path.join(svc.dir, "run.ctf")
        code, _ = curl(svc.url("/debug/memtrace?pid=%d&seconds=1" % p.pid), out=ctf)
        assert code == 200, open(ctf, "rb").read()[:300]
        r = subprocess.run([CAMLHEAP, "report", ctf], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert r.returncode == 0 and b"Idle.idle_site" in r.stdout, r.stderr.decode()
        # its clock is its own (issue 24 item 2): the worker had followed the
        # process for ~2 s before it, yet the recording lasts ~1 s, its peak
        # lies within that second, and a window of it keeps samples
        text = r.stdout.decode()
        dur = float(re.search(r"^duration\s+([\d.]+) s", text, re.M).group(1))
        assert 0.9 <= dur <= 1.6, text[:1500]
        peak_at = float(re.search(r"peak .* at ([\d.]+) s", text).group(1))
        assert peak_at <= dur + 0.05, text[:1500]
        assert "opened" in text and "on-demand recording" in text, text[:1500]
        r = subprocess.run([CAMLHEAP, "report", ctf, "--from", "0.2", "--to", "0.8"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        assert r.returncode == 0, r.stderr.decode()
        assert int(re.search(r"^samples\s+(\d+)", r.stdout.decode(), re.M).group(1)) > 0, r.stdout.decode()[:1500]
        # its counters are the recording's: fewer stops than the worker's whole run
        whole = svc.processes()[p.pid]
        stops = re.search(r"^executor\s+ptrace: (\d+) stops", text, re.M)
        assert stops and 0 < int(stops.group(1)) < whole["executor_stops"], (stops and stops.group(0), whole)
        # the Unix socket serves the same, and `camlheap status` reads it
        code, body = curl("http://localhost/targets", unix=svc.sock)
        assert code == 200 and json.loads(body)["targets"][0]["name"] == "idle"
        st = subprocess.run([CAMLHEAP, "status", "--socket", svc.sock], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
        assert st.returncode == 0, st.stderr.decode()
        row = [l for l in st.stdout.decode().splitlines() if l.startswith("idle") and str(p.pid) in l]
        assert row and "recording" in row[0], st.stdout.decode()
        st = subprocess.run([CAMLHEAP, "status", "--socket", os.path.join(svc.dir, "nope")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert st.returncode == 1 and b"no camlheap serve socket at" in st.stderr, st.stderr
        # a second service on the same socket is refused, and leaves it to the first
        other = os.path.join(svc.dir, "other.conf")
        with open(other, "w") as f:
            f.write("[serve]\noutput = %s/o2\nlisten = none\nsocket = %s\n[target:x]\nexe = /bin/true\n" %
                    (svc.dir, svc.sock))
        r = subprocess.run([CAMLHEAP, "serve", "--config", other], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=30)
        assert r.returncode == 2 and b"another camlheap serve answers there" in r.stderr, r.stderr
        code, body = curl("http://localhost/targets", unix=svc.sock)
        assert code == 200
        for bad in ("pid=99999999999999999999", "pid=abc", "pid=-1", "pid=%d&target=nope" % p.pid):
            code, body = curl(svc.url("/debug/pprof/heap?" + bad))
            assert code in (400, 404), (bad, code, body)
        # an ended process: its last profile, while it is kept
        p.kill()
        p.wait()
        svc.wait_state(p.pid, "exited")
        code, _ = curl(svc.url("/debug/pprof/heap?pid=%d" % p.pid), out=path)
        assert code == 200
        decode_pprof(path)
        assert svc.stop() == 0
    finally:
        stop_both(svc, p)


def test_serve_budget_holds_the_sample_rate_and_estimates_stay_unbiased():
    rate, budget = 1e-3, 2000.0
    svc = Service({"am": "exe = %s\nrate = %g\nbudget = %g" % (fixture("alloc_major"), rate, budget)},
                  PORT_BASE + 2, interval=60)
    p = subprocess.Popen([fixture("alloc_major"), "--wait", "n=300000"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout.readline().startswith(b"READY")
        svc.wait_state(p.pid, "recording")
        p.stdin.write(b"go\n")
        p.stdin.flush()
        t0 = time.time()
        seen = []  # (time, samples taken so far)
        while p.poll() is None:
            q = svc.processes().get(p.pid)
            if q and q["state"] == "recording":
                seen.append((time.time(), q["samples"]))
            time.sleep(0.25)
        out = p.stdout.read().decode()
        assert p.wait() == 0
        truth = chtest.parse_truth(out)
        svc.wait_state(p.pid, "exited")
        # achieved rate after the controller's first second
        late = [(t, s) for t, s in seen if t >= t0 + 1.0]
        assert len(late) >= 4, seen
        dt = late[-1][0] - late[0][0]
        got = (late[-1][1] - late[0][1]) / dt
        assert got <= budget * (1 + Z / math.sqrt(budget * dt)), (got, budget, late)
        d, names = files_of(svc.out, "am", p.pid)
        prof = decode_pprof(os.path.join(d, [n for n in names if n.endswith("-final.pb.gz")][0]))
        s = prof["string_table"]
        comment = s[prof["comment"][0]]
        shifts = [int(k) for k in re.findall(r"\(2\^-(\d+)\)", comment)]
        assert shifts and max(shifts) >= 3, comment  # the budget did act
        lam_min = rate * 2.0 ** -max(shifts)
        funcs = {f["id"][0]: s[f["name"][0]] for f in prof["function"]}
        locs = {l["id"][0]: l for l in prof["location"]}
        by_site, objs = {}, {}
        for smp in prof["sample"]:
            leaf = locs[smp["location_id"][0]]["line"]
            names_ = [funcs[ln["function_id"][0]] for ln in leaf]
            site = next((n for n in names_ if n.startswith("Alloc_major.site_")), None)
            if site:
                by_site[site] = by_site.get(site, 0) + smp["value"][1]
                objs[site] = objs.get(site, 0) + smp["value"][0]
        for site, blocks in (("Alloc_major.site_a", 3 * 300000), ("Alloc_major.site_b", 300000)):
            words = truth[site][1]
            est = by_site.get(site, 0) / 8.0
            # Var(estimate) = sum over words of (1 - lambda_t)/lambda_t <= words/lambda_min
            bound = Z * math.sqrt(words / lam_min)
            assert abs(est - words) <= bound, (site, est, words, bound, comment)
            # blocks (alloc_objects): each kept block counts 1/P(kept), P =
            # 1-(1-lambda_t)^1001; Var <= blocks / P_min
            assert words == blocks * 1001, (site, words)
            p_min = -math.expm1(1001 * math.log1p(-lam_min))
            bound = Z * math.sqrt(blocks / p_min)
            assert abs(objs.get(site, 0) - blocks) <= bound, (site, objs.get(site), blocks, bound, comment)
        assert svc.stop() == 0
    finally:
        svc.stop()
        if p.poll() is None:
            p.kill()


def test_serve_max_depth_key_reaches_the_workers_stack_walk():
    """Issue 24 item 7: serve's stacks were walked to record's default depth
    whatever the file said.  [serve] max-depth sets it for every target, a
    target's own key overrides it; the heap profile served over HTTP shows
    walks cut at that depth."""
    svc = Service({"idle": "exe = %s\nrate = 1e-3\nmax-depth = 2" % fixture("idle"),
                   "other": "exe = /nonexistent/prog"}, PORT_BASE + 11, interval=60, extra="max-depth = 300")
    p, _ = start_idle()
    try:
        r = subprocess.run([CAMLHEAP, "serve", "--config", svc.conf, "--check"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        out = r.stdout.decode()
        assert r.returncode == 0 and re.search(r"idle:.*stacks up to 2 frames", out) and \
            re.search(r"other:.*stacks up to 300 frames", out), (out, r.stderr.decode())
        svc.wait_state(p.pid, "recording")
        time.sleep(1.0)
        path = os.path.join(svc.dir, "heap.pb.gz")
        code, _ = curl(svc.url("/debug/pprof/allocs?pid=%d" % p.pid), out=path)
        assert code == 200, open(path, "rb").read()[:300]
        prof = decode_pprof(path)
        strings = prof["string_table"]
        funcs = {f["id"][0]: strings[f["name"][0]] for f in prof["function"]}
        locs = {l["id"][0]: [funcs[ln["function_id"][0]] for ln in l.get("line", [])] for l in prof["location"]}
        assert prof["sample"]
        cut = 0
        for smp in prof["sample"]:
            frames = [n for lid in smp["location_id"] for n in locs[lid]]
            assert len([n for n in frames if not n.startswith("[")]) <= 2, frames
            cut += "[stack walk ended: depth limit]" in frames
        assert cut > 0, locs
        assert svc.stop() == 0
    finally:
        stop_both(svc, p)


def test_serve_reload_applies_interval_to_running_workers_and_restarts_those_whose_rate_changed():
    """Issue 24 item 3: a reload kept `interval` and `rate` for processes
    already followed, silently.  Now the interval reaches the running
    workers; a changed rate restarts a worker (the log says why), and the
    new worker records at the new rate."""
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle"),
                   "keep": "exe = %s\nrate = 1e-3" % fixture("steady")}, PORT_BASE + 12, interval=60, keep=100)
    p, _ = start_idle(n=60)
    q = subprocess.Popen([fixture("steady"), "n=20"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def workers_of(pid):
        return [x for t in svc.targets()["targets"] for x in t["processes"] if x["pid"] == pid]

    try:
        svc.wait_state(p.pid, "recording")
        svc.wait_state(q.pid, "recording")
        old_worker = [x for x in workers_of(q.pid) if x["state"] == "recording"][0]["worker_pid"]
        with open(svc.conf) as f:
            text = f.read()
        text = text.replace("interval = 60", "interval = 1")
        text = text.replace("exe = %s\nrate = 1e-3" % fixture("steady"), "exe = %s\nrate = 1e-4" % fixture("steady"))
        with open(svc.conf, "w") as f:
            f.write(text)
        svc.proc.send_signal(signal.SIGHUP)
        svc.wait_log(r"reloaded ")
        svc.wait_log(r"reload: target keep, PID %d: rate 0.001 -> 0.0001; its worker is restarted" % q.pid)
        # the idle process's worker, not restarted, writes a pair every second now
        time.sleep(3.5)
        d, names = files_of(svc.out, "idle", p.pid)
        heaps = [n for n in names if n.startswith("heap-") and "final" not in n]
        assert len(heaps) >= 2, names
        assert "reload: target idle" not in svc.text(), svc.text()[-2000:]
        # the steady process: a new worker, at the new rate, in a directory of its own
        end = time.time() + 30
        while time.time() < end:
            now = [x for x in workers_of(q.pid) if x["state"] == "recording"]
            if now:
                break
            time.sleep(0.1)
        assert now and now[0]["worker_pid"] != old_worker and now[0]["rate"] == 1e-4, workers_of(q.pid)
        assert any(x["state"] == "detached" for x in workers_of(q.pid)), workers_of(q.pid)
        dirs = [x for x in os.listdir(os.path.join(svc.out, "keep")) if x.startswith("%d-" % q.pid)]
        assert len(dirs) == 2, dirs
        assert svc.stop() == 0
    finally:
        svc.stop()
        for x in (p, q):
            if x.poll() is None:
                x.kill()
                x.wait()


def test_serve_bad_configuration_is_refused_with_the_place_named():
    d = chtest.tmpdir()
    cases = [
        ("[serve]\nrate = 2\n[target:a]\nexe = /bin/true\n", "[serve] rate"),
        ("[serve]\n[target:a]\nrate = 1e-4\n", "no way to find its processes"),
        ("[serve]\nbogus = 1\n[target:a]\nexe = /bin/true\n", "[serve] bogus: unknown key"),
        ("[serve]\n", "no target"),
        ("[target:a b]\nexe = /bin/true\n", "a target's name"),
        ("[target:a]\nexe = bin/true\n", "not an absolute path"),
        ("[target:a]\nexe = /bin/true\nbudget = -1\n", "[target:a] budget"),
        ("[serve]\nlisten = localhost\n[target:a]\nexe = /bin/true\n", "HOST:PORT"),
        ("[serve]\nkeep-bytes = 12Q\n[target:a]\nexe = /bin/true\n", "keep-bytes"),
        ("not a key file\n", "the syntax: man 5 camlheap.conf"),
        ("[serve]\ninterval = 60   # a minute\n[target:a]\nexe = /bin/true\n", "put comments on lines of their own"),
        # what GKeyFile takes silently (issue 24 item 4)
        ("[target:a]\nexe = /bin/true\n[target:a]\nexe = /bin/false\n", "[target:a]: given twice (line 3)"),
        ("[target:a]\nexe = /bin/true\nrate = 1e-4\nrate=1e-3\n", "[target:a] rate: given twice (line 4)"),
        ("[target:a]\npidfile = /tmp\n", "[target:a] pidfile: '/tmp' is a directory"),
        ("[serve]\noutput = /etc/hostname\n[target:a]\nexe = /bin/true\n",
         "[serve] output: '/etc/hostname' exists and is not a directory"),
        ("[serve]\nmax-depth = 0\n[target:a]\nexe = /bin/true\n", "[serve] max-depth: '0' is not a number in [1, 2048]"),
        ("[target:a]\nexe = /bin/true\nmax-depth = 4096\n", "[target:a] max-depth: '4096' is not a number in [1, 2048]"),
        ("[target:a]\nexe = /bin/true\nmax-depth = 12.5\n", "[target:a] max-depth: not a whole number of frames"),
    ]
    for text, want in cases:
        conf = os.path.join(d, "c.conf")
        with open(conf, "w") as f:
            f.write(text)
        for args in (["--check"], []):
            r = subprocess.run([CAMLHEAP, "serve", "--config", conf] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            assert r.returncode == 2 and want in r.stderr.decode(), (text, args, r.stderr.decode())
    # parses, but looks wrong: said
    with open(conf, "w") as f:
        f.write("[target:a]\nexe = /nonexistent/prog\n[target:b]\nexe = /nonexistent/prog\n")
    r = subprocess.run([CAMLHEAP, "serve", "--config", conf, "--check"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    assert b"no such executable (yet)" in r.stderr and b"[target:b] matches what [target:a] matches" in r.stderr, \
        r.stderr
    # the README's example parses as it is
    readme = open(os.path.join(chtest.ROOT, "README.md")).read()
    block = re.search(r"```ini\n(.*?)```", readme, re.S).group(1)
    with open(conf, "w") as f:
        f.write(block)
    r = subprocess.run([CAMLHEAP, "serve", "--config", conf, "--check"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert r.returncode == 0 and b"coq: exe /usr/bin/coqc" in r.stdout, r.stderr
    # never removes a file at socket = ..., the configuration itself included
    with open(conf, "w") as f:
        f.write("[serve]\noutput = %s/out\nlisten = none\nsocket = %s\n[target:a]\nexe = /bin/true\n" % (d, conf))
    r = subprocess.run([CAMLHEAP, "serve", "--config", conf], stderr=subprocess.PIPE, timeout=30)
    assert r.returncode == 2 and b"not a socket" in r.stderr and os.path.exists(conf), r.stderr
    # an output that is a file
    with open(conf, "w") as f:
        f.write("[serve]\noutput = %s\nlisten = none\n[target:a]\nexe = /bin/true\n" % conf)
    r = subprocess.run([CAMLHEAP, "serve", "--config", conf], stderr=subprocess.PIPE, timeout=30)
    assert r.returncode == 2 and b"exists and is not a directory" in r.stderr, r.stderr
    # a port in use: one line, camlheap's, with libmicrohttpd's reason in it (issue 24 item 11: a
    # stray "Failed to bind to port" line came before it)
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        with open(conf, "w") as f:
            f.write("[serve]\noutput = %s/out\nlisten = 127.0.0.1:%d\n[target:a]\nexe = /bin/true\n"
                    % (d, busy.getsockname()[1]))
        r = subprocess.run([CAMLHEAP, "serve", "--config", conf], stderr=subprocess.PIPE, timeout=30)
    finally:
        busy.close()
    lines = [l for l in r.stderr.decode().splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("camlheap serve: ") and \
        "cannot listen on 127.0.0.1:" in lines[0] and "Address already in use" in lines[0], r.stderr
    # a FIFO as a PID file never blocks the service
    fifo = os.path.join(d, "fifo.pid")
    os.mkfifo(fifo)
    with open(conf, "w") as f:
        f.write("[serve]\noutput = %s/out\nlisten = none\n[target:a]\npidfile = %s\n" % (d, fifo))
    sp = subprocess.Popen([CAMLHEAP, "serve", "--config", conf], stderr=subprocess.PIPE)
    time.sleep(1.5)
    sp.terminate()
    _, err = sp.communicate(timeout=30)
    assert sp.returncode == 0 and b"serving 1 target" in err, err
    r = subprocess.run([CAMLHEAP, "serve", "--config", os.path.join(d, "missing.conf")], stderr=subprocess.PIPE)
    assert r.returncode == 2 and b"cannot read the configuration file" in r.stderr
    with open(conf, "w") as f:
        f.write("[serve]\nkeep-bytes = 2G\n[target:a]\nexe = /bin/true\nrate = 1e-4\nbudget = 500\n")
    r = subprocess.run([CAMLHEAP, "serve", "--config", conf, "--check"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert r.returncode == 0 and b"rate 0.0001, budget 500 samples/s, stacks up to 1024 frames\n" in r.stdout, r.stdout + r.stderr
    # --check states the budget that applies: the host's share, not "budget 0"
    with open(conf, "w") as f:
        f.write("[serve]\nhost-budget = 2000\n[target:a]\nexe = /bin/true\n[target:b]\nexe = /bin/ls\nbudget = 50\n"
                "[target:c]\nexe = /bin/cat\n")
    r = subprocess.run([CAMLHEAP, "serve", "--config", conf, "--check"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    out = r.stdout.decode()
    assert r.returncode == 0 and "budget 0" not in out, out
    assert "a: exe /usr/bin/true rate 1e-05, budget: its share of host-budget 2000 samples/s" in out, out
    assert "b: exe /usr/bin/ls rate 1e-05, budget 50 samples/s or its share of host-budget 2000" in out, out


def unit_text(bindir):
    with open(os.path.join(chtest.ROOT, "dist", "camlheap.service.in")) as f:
        return f.read().replace("@BINDIR@", bindir)


def test_systemd_unit_verifies_and_its_execstart_line_runs_as_systemd_would():
    d = chtest.tmpdir()
    inst = os.path.join(d, "inst")
    r = subprocess.run(["make", "-s", "-C", chtest.ROOT, "install", "DESTDIR=" + inst, "PREFIX=/usr"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr.decode()
    for f in ("usr/bin/camlheap", "usr/lib/systemd/system/camlheap.service", "usr/share/man/man1/camlheap.1",
              "usr/share/man/man5/camlheap.conf.5", "etc/camlheap/camlheap.conf"):
        assert os.path.exists(os.path.join(inst, f)), f
    unit = os.path.join(d, "camlheap.service")
    with open(unit, "w") as f:
        f.write(unit_text(os.path.dirname(CAMLHEAP)))
    env = dict(os.environ, MANPATH=os.path.join(inst, "usr/share/man"))
    v = subprocess.run(["systemd-analyze", "verify", unit], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert v.returncode == 0 and not v.stderr.strip(), v.stderr.decode()
    # the installed example configuration parses (and says it names no target yet)
    r = subprocess.run([CAMLHEAP, "serve", "--check", "--config", os.path.join(inst, "etc/camlheap/camlheap.conf")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert r.returncode == 2 and b"no target" in r.stderr, r.stderr

    # ExecStart run directly, with the environment systemd gives a
    # Type=notify service with WatchdogSec and journald on stderr
    line = re.search(r"^ExecStart=(.*)$", unit_text(os.path.dirname(CAMLHEAP)), re.M).group(1).split()
    assert line[0] == CAMLHEAP and line[1:3] == ["serve", "--config"], line
    notify = os.path.join(d, "notify.sock")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(notify)
    ns.settimeout(0.2)
    env = dict(os.environ, NOTIFY_SOCKET=notify, WATCHDOG_USEC="1000000")
    got = []

    def until(what, timeout=20):
        end = time.time() + timeout
        while time.time() < end:
            if any(what in m for m in got):
                return
            try:
                got.append(ns.recv(4096).decode())
            except socket.timeout:
                pass
        raise AssertionError("no %s from the service: %s" % (what, got))

    cfg_targets = {"idle": "exe = %s" % fixture("idle")}
    logpath = os.path.join(d, "journal")
    logf = open(logpath, "w")
    st = os.fstat(logf.fileno())
    env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
    conf_dir = chtest.tmpdir()
    conf = os.path.join(conf_dir, "camlheap.conf")
    with open(conf, "w") as f:
        f.write("[serve]\noutput = %s/out\nlisten = 127.0.0.1:%d\n[target:idle]\n%s\n" %
                (conf_dir, PORT_BASE + 3, cfg_targets["idle"]))
    proc = subprocess.Popen(line[:3] + [conf], stdout=logf, stderr=logf, env=env)
    try:
        until("READY=1")
        until("STATUS=")
        got.clear()
        until("WATCHDOG=1", timeout=5)
        proc.send_signal(signal.SIGHUP)
        until("RELOADING=1")
        until("READY=1")
        proc.send_signal(signal.SIGTERM)
        until("STOPPING=1")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        logf.close()
        ns.close()
    with open(logpath) as f:
        lines = f.read().splitlines()
    # journald priorities: <5> notice for start/stop, <6> info
    assert any(l.startswith("<5>serving 1 target") for l in lines), lines
    assert any(l.startswith("<6>reloaded") for l in lines), lines
    assert all(re.match(r"^<[0-7]>", l) for l in lines), lines


def count_bpf(kind):
    r = subprocess.run(["bpftool", "-j", kind, "show"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return len(json.loads(r.stdout or b"[]"))


def children_of(pid):
    r = subprocess.run(["pgrep", "-P", str(pid)], stdout=subprocess.PIPE)
    return r.stdout.split()


def proc_figures(pid):
    fds = len(os.listdir("/proc/%d/fd" % pid))
    with open("/proc/%d/status" % pid) as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    return fds, rss


def test_serve_soak_1000_short_lived_targets_leaks_nothing():
    svc = Service({"churn": "exe = %s\nrate = 1e-3" % fixture("exit_code")}, PORT_BASE + 4, interval=60,
                  keep=2, extra="keep-bytes = 4M\nmax-processes = 64")
    try:
        longs = []
        nlong = [0]

        def churn(count, batch=20):
            # short ones live ~10-50 ms (gone before or while their worker
            # attaches); beside them, one at a time, a ~5 s one (attached,
            # followed, detached)
            done = 0
            while done < count:
                for q in [q for q in longs if q.poll() is not None]:
                    assert q.wait() == 3
                    longs.remove(q)
                if not longs:
                    longs.append(subprocess.Popen([fixture("exit_code"), "n=1200000"], stdout=subprocess.DEVNULL))
                    nlong[0] += 1
                    done += 1
                ps = [subprocess.Popen([fixture("exit_code"), "n=%d" % (100 + 4000 * (i % 5))],
                                       stdout=subprocess.DEVNULL) for i in range(batch)]
                for q in ps:
                    assert q.wait() == 3  # the fixture's own status: never changed
                done += batch
            for q in longs:
                assert q.wait() == 3
            longs.clear()

        def settle():
            # every worker ended (short-lived targets), probes released
            end = time.time() + 60
            while time.time() < end:
                if not children_of(svc.proc.pid) and svc.targets()["service"]["processes_followed"] == 0:
                    break
                time.sleep(0.2)
            assert not children_of(svc.proc.pid), children_of(svc.proc.pid)
            time.sleep(2)
            return (proc_figures(svc.proc.pid), count_bpf("prog"), count_bpf("map"), count_bpf("link"))

        churn(100)  # warm-up: allocator pools, the kept table of ended processes
        before = settle()
        churn(900)
        after = settle()
        (fds0, rss0), prog0, map0, link0 = before
        (fds1, rss1), prog1, map1, link1 = after
        t = svc.targets()
        procs = t["targets"][0]["processes"]
        assert fds1 == fds0, (before, after)
        assert (prog1, map1, link1) == (prog0, map0, link0), (before, after)
        assert rss1 - rss0 < 4096, (before, after)  # KiB
        code, body = curl(svc.url("/metrics"))
        started = int(re.search(rb"^camlheap_workers_started_total (\d+)", body, re.M).group(1))
        failed = int(re.search(rb"^camlheap_workers_failed_total (\d+)", body, re.M).group(1))
        missed = int(re.search(rb"^camlheap_processes_missed_total (\d+)", body, re.M).group(1))
        gone = int(re.search(rb"^camlheap_processes_gone_before_seen_total (\d+)", body, re.M).group(1))
        # most got a worker; none failed (those that ended first were
        # missed, some before they were looked at: no worker); most
        # long-lived ones were followed to their end
        assert started >= 500 and failed == 0, body[:1500]
        assert started - (missed - gone) >= nlong[0] // 2, (started, missed, gone, nlong)
        done = [q for q in procs if q["state"] == "exited"]
        assert all(q["files_written"] >= 1 for q in done), [q for q in done if not q["files_written"]][:3]
        # the output directory stays under its cap
        total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(svc.out) for f in fs)
        assert total <= 4 * 1024 * 1024, total
        assert svc.stop() == 0
    finally:
        svc.stop()


def kill_service_and_wait_for_its_workers(svc, timeout=30):
    """kill -9 of the service; then every worker it had must end within timeout s."""
    workers = children_of(svc.proc.pid)
    assert workers, svc.text()
    svc.proc.kill()
    svc.proc.wait()
    end = time.time() + timeout
    while time.time() < end and any(os.path.exists("/proc/%s" % w.decode()) for w in workers):
        time.sleep(0.1)
    assert not any(os.path.exists("/proc/%s" % w.decode()) for w in workers), workers


def test_serve_killed_with_9_leaves_targets_running_and_workers_finish():
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle")}, PORT_BASE + 6, interval=60)
    p, _ = start_idle()
    try:
        svc.wait_state(p.pid, "recording")
        # each worker sees the service die (PR_SET_PDEATHSIG), writes its
        # last files and detaches
        kill_service_and_wait_for_its_workers(svc)
        assert p.poll() is None, "the target died with the service"
        d, names = files_of(svc.out, "idle", p.pid)
        assert any(n.endswith("-final.pb.gz") for n in names), names
        # nothing left attached: the target's own allocations go on, and
        # /proc shows no tracer
        with open("/proc/%d/status" % p.pid) as f:
            assert re.search(r"^TracerPid:\s+0$", f.read(), re.M)
    finally:
        svc.stop(sig=signal.SIGKILL)
        p.kill()
        p.wait()


def test_serve_tries_an_unprofilable_executable_once_until_reload():
    # a private copy of a program that is not OCaml: no other process on the
    # host runs it
    d = chtest.tmpdir()
    sleep = os.path.join(d, "not-ocaml")
    shutil.copy(os.path.realpath("/bin/sleep"), sleep)
    svc = Service({"sl": "exe = %s" % sleep}, PORT_BASE + 8, interval=60)
    ps = []
    try:
        ps.append(subprocess.Popen([sleep, "30"]))
        svc.wait_log(r"not a native OCaml program")
        svc.wait_log(r"not tried until a reload")
        for _ in range(3):
            ps.append(subprocess.Popen([sleep, "30"]))
        time.sleep(1)
        code, body = curl(svc.url("/metrics"))
        started = int(re.search(rb"^camlheap_workers_started_total (\d+)", body, re.M).group(1))
        skipped = int(re.search(rb"^camlheap_processes_skipped_total (\d+)", body, re.M).group(1))
        assert started == 1 and skipped == 3, body[:1200]
        q = svc.processes()[ps[0].pid]
        assert q["state"] == "failed" and "not a native OCaml program" in q["message"], q
        # a reload tries again (the executable may have been replaced)
        svc.proc.send_signal(signal.SIGHUP)
        svc.wait_log(r"reloaded")
        time.sleep(1)
        code, body = curl(svc.url("/metrics"))
        started = int(re.search(rb"^camlheap_workers_started_total (\d+)", body, re.M).group(1))
        assert started >= 2, body[:1200]
        assert all(p.poll() is None for p in ps)
        assert svc.stop() == 0
    finally:
        svc.stop()
        for p in ps:
            p.kill()
            p.wait()


def test_serve_http_flood_leaves_the_socket_and_then_http_usable():
    svc = Service({"idle": "exe = %s" % fixture("idle")}, PORT_BASE + 9, interval=60)
    conns = []
    try:
        for _ in range(300):  # half-sent requests, held open
            s_ = socket.create_connection(("127.0.0.1", svc.port), timeout=5)
            try:
                s_.sendall(b"GET /targets HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass
            conns.append(s_)
        st = subprocess.run([CAMLHEAP, "status", "--socket", svc.sock], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30)
        assert st.returncode == 0, st.stderr.decode()
        nthreads = len(os.listdir("/proc/%d/task" % svc.proc.pid))
        assert nthreads < 100, nthreads
        for s_ in conns:
            s_.close()
        conns = []
        end = time.time() + 10
        code = 0
        while time.time() < end and code != 200:
            code, _ = curl(svc.url("/targets"), timeout=5)
            time.sleep(0.2)
        assert code == 200
        assert svc.stop() == 0
    finally:
        for s_ in conns:
            s_.close()
        svc.stop()


def _forked_pids(p, n, timeout=30):
    """The n "FORKED <pid>" lines of a steady fixture started with forks=n."""
    pids, end = [], time.time() + timeout
    while len(pids) < n and time.time() < end:
        line = p.stdout.readline().decode()
        assert line.startswith("FORKED "), line
        pids.append(int(line.split()[1]))
    return pids


def test_serve_follows_fork_children_not_fork_exec_ones():
    # a pre-forking program: 2 children at once (before its worker has
    # attached: found among its children), 2 more 1.5 s later (reported by
    # the discovery program's fork tracepoint); before those, 5 fork+exec
    # children (/bin/true), which must get no worker of their own
    svc = Service({"steady": "exe = %s\nrate = 1e-4" % fixture("steady")}, PORT_BASE + 10, interval=1.0)
    ps, kids = [], []
    try:
        early = subprocess.Popen([fixture("steady"), "forks=2", "n=20"], stdout=subprocess.PIPE)
        ps.append(early)
        assert early.stdout.readline().decode().startswith("READY")
        kids += _forked_pids(early, 2)
        late = subprocess.Popen([fixture("steady"), "forks=2", "fork_delay=1500", "spawns=5", "n=20"],
                                stdout=subprocess.PIPE)
        ps.append(late)
        assert late.stdout.readline().decode().startswith("READY")
        svc.wait_state(late.pid, "recording")
        kids += _forked_pids(late, 2)
        for pid in [early.pid, late.pid] + kids:
            svc.wait_state(pid, "recording")
        for pid in kids:
            assert re.search(r"PID %d is a fork child of followed PID (%d|%d)" % (pid, early.pid, late.pid),
                             svc.text()), svc.text()[-3000:]
        # every child judged: the /bin/true ones forked (and were due) before late's children
        procs = svc.processes()
        # nobody else: not the /bin/true children, not the fixtures' threads
        assert set(procs) == {early.pid, late.pid} | set(kids), (sorted(procs), early.pid, late.pid, kids)
        code, body = curl(svc.url("/metrics"))
        failed = int(re.search(rb"^camlheap_workers_failed_total (\d+)", body, re.M).group(1))
        missed = int(re.search(rb"^camlheap_processes_missed_total (\d+)", body, re.M).group(1))
        forks = int(re.search(rb"^camlheap_forks_seen_total (\d+)", body, re.M).group(1))
        assert failed == 0 and missed == 0, body[:2000]
        assert forks >= 2 + 5, body[:2000]  # late's forks, its fork+exec ones; early's may predate its worker
        # each child's own profile: its allocation sites, under its own PID
        for pid in kids:
            end = time.time() + 30  # the first profile comes after one interval (1 s)
            while True:
                d, names = files_of(svc.out, "steady", pid)
                heaps = [n for n in names if n.startswith("heap-") and n.endswith(".pb.gz")]
                if heaps or time.time() > end:
                    break
                time.sleep(0.1)
            assert heaps, (pid, names)
            prof = decode_pprof(os.path.join(d, heaps[-1]))
            strings = prof["string_table"]
            assert any("Steady.minor_site" in strings[f["name"][0]] for f in prof["function"]), pid
        assert svc.stop() == 0, svc.text()[-3000:]
        assert all(p.poll() is None for p in ps)
    finally:
        svc.stop()
        for pid in [p.pid for p in ps] + kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for p in ps:
            p.wait()


def test_serve_scraped_by_a_real_prometheus_and_go_pprof_over_http():
    """Issue 24: what the endpoints promise, checked with the clients that
    read them in production, over HTTP on loopback: Debian's Prometheus
    2.42 scrapes /metrics (its own parser is stricter than the Python
    client's: a bad line fails the whole scrape, up = 0), and its query API
    then gives this process's samples counter; `go tool pprof` fetches
    /debug/pprof/heap itself (as Pyroscope's and Parca's scrapers do) and
    prints the fixture's allocation site with inuse_space, its default."""
    port, prom_port = PORT_BASE + 13, PORT_BASE + 14
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle")}, port, interval=60)
    p, _ = start_idle(n=30)
    prom = None
    try:
        svc.wait_state(p.pid, "recording")
        pdir = chtest.tmpdir()
        with open(os.path.join(pdir, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: camlheap\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % port)
        plog = open(os.path.join(pdir, "prometheus.log"), "w")
        prom = subprocess.Popen(["prometheus", "--config.file", os.path.join(pdir, "prometheus.yml"),
                                 "--storage.tsdb.path", os.path.join(pdir, "data"),
                                 "--web.listen-address", "127.0.0.1:%d" % prom_port], stdout=plog, stderr=plog)

        def query(expr):
            code, body = curl("http://127.0.0.1:%d/api/v1/query?query=%s" % (prom_port, expr), timeout=5)
            if code != 200:
                return []
            return json.loads(body)["data"]["result"]

        deadline = time.time() + 60
        up = samples = []
        while time.time() < deadline:
            up = query("up")
            samples = query("camlheap_samples_total")
            if up and samples:
                break
            time.sleep(0.5)
        assert up and up[0]["value"][1] == "1", (up, open(os.path.join(pdir, "prometheus.log")).read()[-2000:])
        mine = [s for s in samples if s["metric"].get("pid") == str(p.pid)]
        assert mine and float(mine[0]["value"][1]) > 0, samples
        assert mine[0]["metric"].get("target") == "idle", mine
        # go tool pprof over HTTP: the heap endpoint's default sample type
        g = subprocess.run(["go", "tool", "pprof", "-top", "-timeout", "30",
                            svc.url("/debug/pprof/heap?target=idle")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                           env=dict(os.environ, PPROF_TMPDIR=pdir, HOME=pdir))
        out = g.stdout.decode()
        assert g.returncode == 0 and "Idle.idle_site" in out and "inuse_space" in out, \
            (out[-1500:], g.stderr.decode()[-1500:])
        assert svc.stop() == 0
    finally:
        if prom:
            prom.terminate()
            prom.wait()
        svc.stop()
        if p.poll() is None:
            p.kill()
            p.wait()


def test_serve_worker_memory_of_a_small_program():
    """Issue 24 item 6: a worker cost 59-125 MiB (109 MiB for an 8 MiB
    target): a 16 MiB ring buffer mapped twice, a major set of 256 Ki
    entries and both families' young sets whatever the rate and the
    runtime.  Now the major set follows the rate (the sampled blocks of a
    16 GiB heap), a worker's ring is 4 MiB (its events are thinned to its
    budget), only the runtime's own young set is sized: for the idle
    fixture, at the default rate and at 1e-3, the worker's private memory
    plus the kernel memory of its BPF maps (chtest.worker_memory) stays
    within 32 MiB.  (make bench: MiB per 10 k live samples and per 10 k
    distinct stacks.)"""
    for i, extra in enumerate(("", "\nrate = 1e-3")):
        svc = Service({"idle": "exe = %s%s" % (fixture("idle"), extra)}, PORT_BASE + 15 + i, interval=1.0)
        p, _ = start_idle(n=10)
        try:
            proc = svc.wait_state(p.pid, "recording")
            time.sleep(2.5)  # two snapshots written
            wpid = svc.processes()[p.pid]["worker_pid"]
            mem = chtest.worker_memory(wpid)
            assert mem and mem["bpf"] > 0, (proc, mem)
            assert mem["total"] <= 32 << 20, ("rate", extra or "default", {k: v / 1048576 for k, v in mem.items()})
            assert svc.stop() == 0
        finally:
            svc.stop()
            if p.poll() is None:
                p.kill()
                p.wait()


def _groups(svc):
    """{pid: target name} of the processes the service follows now."""
    return {p["pid"]: t["name"] for t in svc.targets()["targets"] for p in t["processes"]
            if p["state"] in ("attaching", "recording")}


def test_serve_fork_children_are_in_their_parents_target_at_fork_start_and_reload():
    """Issue 24 item 8: a fork child (no exec since) belongs to its parent's
    target group, whichever matcher chose the parent: when the fork is seen,
    when the service starts with both running, and after a reload.  Here the
    parent is the server's by its PID file; its children match only the
    other target's exe, which took them at start-up (and a reload stopped
    their workers) before."""
    pidfile = os.path.join(chtest.tmpdir(), "server.pid")
    targets = {"server": "pidfile = %s\nrate = 1e-4" % pidfile,
               "others": "exe = %s\nrate = 1e-4" % fixture("steady")}
    svc = Service(targets, PORT_BASE + 17, interval=60)
    svc2 = None
    # the PID file written before the exec: the process is the server's from its exec on
    p = subprocess.Popen(["/bin/sh", "-c", 'echo $$ > %s; exec %s forks=2 fork_delay=1500 n=20' %
                          (pidfile, fixture("steady"))], stdout=subprocess.PIPE)
    kids = []
    try:
        assert p.stdout.readline().decode().startswith("READY")
        kids = _forked_pids(p, 2)
        for pid in [p.pid] + kids:
            svc.wait_state(pid, "recording")
        want = {p.pid: "server", kids[0]: "server", kids[1]: "server"}
        assert _groups(svc) == want, (svc.text()[-3000:], kids)
        assert svc.stop() == 0
        # a new service finds all three running: same groups
        svc2 = Service(targets, PORT_BASE + 18, interval=60)
        for pid in [p.pid] + kids:
            svc2.wait_state(pid, "recording")
        assert _groups(svc2) == want, (svc2.text()[-3000:], kids)
        workers = {pid: svc2.processes()[pid]["worker_pid"] for pid in want}
        svc2.proc.send_signal(signal.SIGHUP)
        svc2.wait_log(r"reloaded .*: 2 targets")
        assert "no longer a process of target" not in svc2.text(), svc2.text()[-3000:]
        assert _groups(svc2) == want
        assert {pid: svc2.processes()[pid]["worker_pid"] for pid in want} == workers
        assert svc2.stop() == 0
    finally:
        svc.stop()
        if svc2:
            svc2.stop()
        for pid in [p.pid] + kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        p.wait()


def test_serve_killed_with_9_while_workers_attach_leaves_no_worker_and_no_empty_directory():
    """Issue 24 item 9: kill -9 of the service just after it started the
    workers of 8 new processes.  Each worker sees it (PR_SET_PDEATHSIG, its
    signals blocked from its start; or its parent is not the service that
    made its socket), finishes the attach step it is in, and either writes
    its final pair or removes the directory the service made for it.
    Before, workers killed by the SIGTERM's default action or by a SIGPIPE
    on the dead service's stderr pipe left their directories empty."""
    svc = Service({"steady": "exe = %s\nrate = 1e-5" % fixture("steady")}, PORT_BASE + 19, interval=60)
    ps = [subprocess.Popen([fixture("steady"), "n=20"], stdout=subprocess.DEVNULL) for _ in range(8)]
    try:
        end = time.time() + 30
        while time.time() < end and len(re.findall(r"following PID", svc.text())) < len(ps):
            time.sleep(0.01)
        kill_service_and_wait_for_its_workers(svc)
        assert all(p.poll() is None for p in ps), "a target died with the service"
        dirs = [os.path.join(svc.out, "steady", x) for x in os.listdir(os.path.join(svc.out, "steady"))]
        empty = [x for x in dirs if not os.listdir(x)]
        assert not empty, (empty, dirs, svc.text()[-3000:])
        for x in dirs:
            assert any(n.endswith("-final.pb.gz") for n in os.listdir(x)), (x, os.listdir(x))
        for p in ps:
            with open("/proc/%d/status" % p.pid) as f:
                assert re.search(r"^TracerPid:\s+0$", f.read(), re.M)
    finally:
        svc.stop(sig=signal.SIGKILL)
        for p in ps:
            p.kill()
            p.wait()


def _nices(pid):
    """{thread name: [nice values]} of process pid's threads (/proc/PID/task/TID/stat field 19)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            st = f.read()
        name = st[st.index("(") + 1:st.rindex(")")]
        out.setdefault(name, []).append(int(st[st.rindex(")") + 2:].split()[16]))
    return out


def test_serve_starts_workers_at_the_attach_priority_and_they_return_to_the_services():
    """Issue 24 item 10: on a busy host, a short-lived process was missed
    while its worker started and attached in the busy processes' time
    slices.  The service's main thread (discovery, workers' starts) runs at
    the attach's nice value (-10), its workers start at it, and after the
    attach each worker and its holder return to the nice value the service
    was started with (5 here), its HTTP thread keeping it throughout."""
    svc = Service({"idle": "exe = %s\nrate = 1e-3" % fixture("idle")}, PORT_BASE + 20, interval=60,
                  prefix=("nice", "-n", "5"))
    p, _ = start_idle()
    try:
        svc.wait_state(p.pid, "recording")
        service = _nices(svc.proc.pid)
        assert service.pop("camlheap") == [-10] and service and all(v == 5 for vs in service.values() for v in vs), service
        wpid = svc.processes()[p.pid]["worker_pid"]
        # its main thread at 5; the ptrace executor's thread, if any, takes
        # the target's (ptexec.c: a stopped target must not wait at a lower
        # priority than its own)
        with open("/proc/%d/stat" % wpid) as f:
            st = f.read()
        assert int(st[st.rindex(")") + 2:].split()[16]) == 5, st
        worker = _nices(wpid)
        assert all(v in (5, 0) for vs in worker.values() for v in vs), worker
        # the holder of its probes: its fork, reparented (same command line)
        r = subprocess.run(["pgrep", "-f", "^camlheap record -p %d " % p.pid], stdout=subprocess.PIPE)
        holders = [h for h in r.stdout.split() if int(h) != wpid]
        assert holders, "no holder"
        for h in holders:
            assert all(v == 5 for vs in _nices(int(h)).values() for v in vs), (h, _nices(int(h)))
        # the target keeps its own
        assert all(v == 0 for vs in _nices(p.pid).values() for v in vs)
    finally:
        stop_both(svc, p)


def test_serve_accounts_for_every_process_of_its_program_even_those_gone_before_it_looked():
    """A process of a target's program that ended before the service looked
    at it (/proc empty by then: a busy host, the service descheduled) was
    counted nowhere, so a crowd of short processes showed fewer in
    /targets and the counters than had run.  The discovery program now
    gives the exec'd file's device and inode, so an exe-only target's
    process is counted as missed (and as gone before it was seen) even
    then.  Here the service is stopped (SIGSTOP) while 20 processes run
    and end, their exec events waiting in the ring buffer; then 20 more
    run with the service running: each of the 40 either got a worker or
    was counted gone."""
    svc = Service({"churn": "exe = %s\nrate = 1e-3" % fixture("exit_code")}, PORT_BASE + 21, interval=60)

    def metric(name):
        code, body = curl(svc.url("/metrics"))
        return int(re.search(rb"^camlheap_%s (\d+)" % name.encode(), body, re.M).group(1))

    try:
        svc.proc.send_signal(signal.SIGSTOP)
        try:
            for _ in range(20):
                assert subprocess.run([fixture("exit_code"), "n=0"], stdout=subprocess.DEVNULL).returncode == 3
        finally:
            svc.proc.send_signal(signal.SIGCONT)
        for _ in range(20):
            assert subprocess.run([fixture("exit_code"), "n=0"], stdout=subprocess.DEVNULL).returncode == 3
        end = time.time() + 60
        while time.time() < end and (children_of(svc.proc.pid) or
                                     svc.targets()["service"]["processes_followed"]):
            time.sleep(0.2)
        started, gone = metric("workers_started_total"), metric("processes_gone_before_seen_total")
        assert gone >= 20 and started + gone == 40, (started, gone, svc.text()[-3000:])
        assert metric("processes_missed_total") >= gone
        assert len(re.findall(r"ended before it was looked at", svc.text())) == gone
        assert svc.stop() == 0
    finally:
        svc.stop()


def test_http_libraries_load_only_where_used_and_a_broken_one_is_named():
    """libmicrohttpd and libcurl (and the GnuTLS, Kerberos, LDAP... they
    pull in: 28 libraries, 16 ms of each start) are loaded by serve's HTTP
    endpoints and `status` alone (user/cmd/ondemand.h): a worker maps
    neither.  Where the one found is not the right library, the command
    says which and what it lacks, and exits non-zero."""
    with one_idle_worker(PORT_BASE + 23) as (svc, _, wpid):
        with open("/proc/%d/maps" % wpid) as f:
            maps = f.read()
        with open("/proc/%d/maps" % svc.proc.pid) as f:
            service_maps = f.read()
        assert "libmicrohttpd" in service_maps
        assert "libmicrohttpd" not in maps and "libcurl" not in maps and "libgnutls" not in maps, \
            sorted({l.split()[-1] for l in maps.splitlines() if ".so" in l})
    d = chtest.tmpdir()
    for name in ("libmicrohttpd.so.12", "libcurl.so.4"):
        subprocess.run(["cc", "-shared", "-o", os.path.join(d, name), "-x", "c", "/dev/null"], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=d)
    st = subprocess.run([CAMLHEAP, "status", "--socket", os.path.join(d, "s.sock")], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, env=env)
    assert st.returncode == 1 and b"libcurl.so.4 has no curl_easy_" in st.stderr, st
    conf = os.path.join(d, "c.conf")
    with open(conf, "w") as f:
        f.write("[serve]\noutput = %s/out\nlisten = 127.0.0.1:%d\n[target:idle]\nexe = %s\n"
                % (d, PORT_BASE + 23, fixture("idle")))
    sv = subprocess.run([CAMLHEAP, "serve", "--config", conf], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        env=env, timeout=60)
    assert sv.returncode == 2 and b"libmicrohttpd.so.12 has no MHD_" in sv.stderr, sv
    ver = subprocess.run([CAMLHEAP, "--version"], stdout=subprocess.PIPE, env=env)
    assert ver.returncode == 0, ver
