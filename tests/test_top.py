"""camlheap top: the live view, driven for real.

Interactive: camlheap top runs in a detached tmux session (80x24, UTF-8) on
a private tmux server; keys are sent with `tmux send-keys` and the screen is
read with `tmux capture-pane`.  The fixture (tests/fixtures/leak.ml) has
sites of known, fixed proportions: per round churn_young allocates 800 000
words that die at once, churn_promoted 60 000 and churn_major 60 200 that
die later, leak_one 20 000 + 12 000 kept for ever.  So sorted by ALLOC/s
the top site is churn_young, and sorted by LIVE it is leak_one.

Batch: --batch output (also chosen when stdout is a pipe) is parsed; the
TOTAL column (bytes allocated since attach, estimated) of alloc_major's
sites is judged against the fixture's own word count with the binomial
bound of chtest.py (Z = 4.5), and two sites of equal allocation are judged
against each other with the printed 95 % bounds, widened to Z = 4.5.
"""
import gzip
import math
import os
import re
import signal
import subprocess
import time

import chtest
from chtest import CAMLHEAP, ROOT, Z, fixture, parse_truth, tmpdir

RATE = 1e-3
UNITS = {"B": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5}


def parse_bytes(s):
    """'12.3M' -> bytes (binary prefixes); '-' -> None."""
    s = s.strip().lstrip("+")
    if s in ("-", ""):
        return None
    m = re.match(r"^(-?[0-9.]+)([BKMGTP])$", s)
    assert m, "not a byte figure: %r" % s
    return float(m.group(1)) * UNITS[m.group(2)]


def rounding(s):
    """Half the last printed digit of a byte figure, in bytes."""
    s = s.strip().lstrip("+-")
    m = re.match(r"^([0-9]+)(?:\.([0-9]+))?([BKMGTP])$", s)
    decimals = len(m.group(2) or "")
    return 0.5 * 10 ** -decimals * UNITS[m.group(3)]


ROW = re.compile(r"^\s*(\S+) (?:\u00b1|\+-)\s*(\S+)\s+(\S+)\s+(\S+) (.{12}) +(\S+) +(\S+)  (.*)$")


def parse_batch(text):
    """Batch output -> list of refreshes: {'header': [4 lines], 'ended': reason
    or None, 'rows': [{rate, pm, live, growth, age, total, name, raw}]}."""
    blocks = []
    cur = None
    in_table = False
    for line in text.splitlines():
        if line.startswith("camlheap top - "):
            cur = {"header": [line], "ended": None, "rows": [], "columns": None}
            blocks.append(cur)
            in_table = False
            continue
        if cur is None:
            continue
        if line.startswith("ALLOC/s"):
            cur["columns"] = line.split()
            in_table = True
            continue
        if not line.strip():
            if in_table:
                in_table = False
                cur = None
            continue
        if in_table:
            m = ROW.match(line)
            assert m, "unparsable row: %r" % line
            cur["rows"].append({"rate": parse_bytes(m.group(1)), "pm": parse_bytes(m.group(2)),
                                "live": parse_bytes(m.group(3)), "growth": parse_bytes(m.group(4)),
                                "trend": m.group(5), "age": m.group(6), "total": parse_bytes(m.group(7)),
                                "total_text": m.group(7), "name": m.group(8), "raw": line})
        elif line.startswith("Ended: "):
            cur["ended"] = line[len("Ended: "):]
        else:
            cur["header"].append(line)
    return blocks


def depth(name):
    """A call-tree row's depth: its indentation, less the leaf's 2 columns
    where an inner node has its marker."""
    rest = name.lstrip(" ")
    spaces = len(name) - len(rest)
    return spaces if rest[:1] in ("\u25be", "\u25b8", "+", "-") else spaces - 2


def header_figure(block, pattern):
    m = re.search(pattern, "\n".join(block["header"]))
    assert m, "no %r in the header:\n%s" % (pattern, "\n".join(block["header"]))
    return m.group(1)


def test_batch_estimates_match_the_fixtures_allocation():
    """Stdout a pipe: batch output without --batch; the last refresh (the
    target's end) holds every sample; TOTAL per site within the binomial
    bound of the fixture's own count, and within the two-sample bound of
    the Gc.Memprof the fixture runs on itself at the same rate (both
    sample the same words independently: (n1 - n2) / sqrt(n1 + n2) is
    about standard normal)."""
    fx = chtest.Waiting("alloc_major", ["memprof=%g" % RATE])
    top = subprocess.Popen([CAMLHEAP, "top", "-p", str(fx.pid), "--rate", repr(RATE), "-d", "0.3", "--rows", "0"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # attached once the first refresh is printed
        first = top.stdout.readline().decode()
        assert first.startswith("camlheap top - "), (first, top.stderr.read()[:2000])
        fx.release()
        rc_fx, out_fx, _ = fx.finish()
        out, err = top.communicate(timeout=120)
    finally:
        if top.poll() is None:
            top.kill()
    assert rc_fx == 0
    assert top.returncode == 0, err.decode()
    blocks = parse_batch(first + out.decode())
    assert len(blocks) >= 2, out.decode()[:3000]
    last = blocks[-1]
    assert last["ended"] and last["ended"].startswith("target exited"), last
    assert last["columns"] == ["ALLOC/s", "\u00b195%" if "\u00b1" in last["rows"][0]["raw"] else "+-95%", "LIVE",
                               "GROWTH/s", "TREND", "AGE", "TOTAL", "SITE"], last["columns"]
    assert header_figure(last, r"lost (\d+)") == "0"
    truth = parse_truth(out_fx)
    for site in ("Alloc_major.site_a", "Alloc_major.site_b"):
        rows = [r for r in last["rows"] if r["name"].startswith(site + " (")]
        assert len(rows) == 1, (site, [r["name"] for r in last["rows"]])
        words = truth[site][1]
        est = rows[0]["total"] / 8 * RATE
        slack = rounding(rows[0]["total_text"]) / 8 * RATE
        mean, sd = words * RATE, math.sqrt(words * RATE * (1 - RATE))
        assert abs(est - mean) <= Z * sd + slack, \
            "%s: TOTAL %s = %.0f samples, expected %.0f +- %.0f" % (site, rows[0]["total_text"], est, mean, Z * sd)
        mp = int(re.search(r"^MEMPROF %s (\d+)$" % re.escape(site), out_fx, re.M).group(1))
        assert abs(est - mp) <= Z * math.sqrt(est + mp) + slack, \
            "%s: camlheap top %.0f samples vs Gc.Memprof %d" % (site, est, mp)
    # every refresh's rates carry a bound; the header's rate is their sum
    for b in blocks:
        for r in b["rows"]:
            assert r["pm"] is not None and r["pm"] > 0, r["raw"]


def test_batch_rates_of_equal_sites_agree_within_their_bounds():
    """leak forever: churn_promoted (60 000 words a round) and churn_major
    (60 200) allocate alike; their ALLOC/s over a 4 s window must agree
    within the printed 95 % bounds widened to Z = 4.5.  --sort and --tree
    shape the output."""
    proc = subprocess.Popen([fixture("leak"), "forever"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p = subprocess.run([CAMLHEAP, "top", "-p", str(proc.pid), "--batch", "--rate", repr(RATE), "-d", "0.5",
                            "--window", "4", "-n", "10", "--rows", "0"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        blocks = parse_batch(p.stdout.decode())
        assert len(blocks) == 10, len(blocks)
        last = blocks[-1]
        assert "rates over 4.0 s" in last["header"][3], last["header"]
        names = [r["name"] for r in last["rows"]]
        assert names[0].startswith("Leak.churn_young ("), names
        prom = [r for r in last["rows"] if r["name"].startswith("Leak.churn_promoted (")][0]
        maj = [r for r in last["rows"] if r["name"].startswith("Leak.churn_major (")][0]
        bound = Z / 1.96 * math.hypot(prom["pm"], maj["pm"])
        assert abs(prom["rate"] * 60200 / 60000 - maj["rate"]) <= bound, (prom["raw"], maj["raw"])
        # sorted by the live estimate, the leak comes first, and it grows.
        # Live counts what was sampled since this attach: the leak must
        # outgrow the young churn still in a minor heap (up to its 2 MiB),
        # ~10 s at the leak's pace on a busy machine (3 s were not enough
        # on OCaml 5.1 beside a compiler build)
        p = subprocess.run([CAMLHEAP, "top", "-p", str(proc.pid), "--batch", "--rate", repr(RATE), "-d", "0.5",
                            "-n", "20", "--sort", "live"], stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        last = parse_batch(p.stdout.decode())[-1]
        assert last["rows"][0]["name"].startswith("Leak.leak_one ("), [r["raw"] for r in last["rows"]]
        assert last["rows"][0]["growth"] > 0, last["rows"][0]["raw"]
        lives = [r["live"] for r in last["rows"]]
        assert lives == sorted(lives, reverse=True), lives
        # the header's live growth is the rows' (not the heap's)
        g = parse_bytes(header_figure(last, r"Live \S+ \S+ \((\S+)/s\)"))
        rows_g = sum(r["growth"] for r in last["rows"])
        assert abs(g - rows_g) <= 0.1 * abs(rows_g) + 1024 * len(last["rows"]), (g, rows_g, last["header"])
        # stdout closed under it (| head): camlheap stops, says why, exits 1,
        # and the program runs on untraced
        top = subprocess.Popen([CAMLHEAP, "top", "-p", str(proc.pid), "--batch", "--rate", repr(RATE), "-d", "0.2"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        top.stdout.readline()
        top.stdout.close()
        _, err = top.communicate(timeout=60)
        assert top.returncode == 1 and b"cannot write to stdout: Broken pipe" in err, (top.returncode, err)
        with open("/proc/%d/status" % proc.pid) as f:
            assert "TracerPid:\t0\n" in f.read()
        assert proc.poll() is None
        # the call tree: nested, each node at least the sum of its children
        p = subprocess.run([CAMLHEAP, "top", "-p", str(proc.pid), "--batch", "--rate", repr(RATE), "-d", "0.5",
                            "-n", "3", "--tree", "--rows", "0"], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr.decode()
        last = parse_batch(p.stdout.decode())[-1]
        assert last["columns"][-2:] == ["CALL", "TREE"], last["columns"]
        tree = [(depth(r["name"]), r) for r in last["rows"]]
        assert any("Leak.round (" in r["name"] and d > 0 for d, r in tree), [r["raw"] for _, r in tree]
        for i, (d, r) in enumerate(tree):
            kids = []
            for d2, r2 in tree[i + 1:]:
                if d2 <= d:
                    break
                if d2 == d + 1:
                    kids.append(r2)
            if kids:
                assert r["total"] * 1.01 >= sum(k["total"] for k in kids), (r["raw"], [k["raw"] for k in kids])
    finally:
        proc.kill()
        proc.wait()


class Pane:
    """A command in a detached tmux session on a private server."""

    def __init__(self, command, cwd, cols=80, rows=24):
        self.sock = os.path.join(cwd, "tmux.sock")
        self.cwd = cwd
        env = dict(os.environ, LC_ALL="C.UTF-8", TERM="xterm-256color")
        env.pop("TMUX", None)
        subprocess.run(["tmux", "-u", "-S", self.sock, "-f", "/dev/null", "new-session", "-d", "-s", "t",
                        "-x", str(cols), "-y", str(rows), "-c", cwd,
                        "env LC_ALL=C.UTF-8 %s; echo EXIT=$?; sleep 600" % command], check=True, env=env)
        subprocess.run(["tmux", "-S", self.sock, "set-option", "-t", "t", "remain-on-exit", "on"], check=False)

    def screen(self):
        p = subprocess.run(["tmux", "-S", self.sock, "capture-pane", "-p", "-t", "t"], capture_output=True)
        return p.stdout.decode(errors="replace")

    def keys(self, *keys, literal=False):
        subprocess.run(["tmux", "-S", self.sock, "send-keys", "-t", "t"] + (["-l"] if literal else []) + list(keys),
                       check=True)

    def wait(self, pred, what, timeout=30):
        deadline = time.time() + timeout
        s = ""
        while time.time() < deadline:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.2)
        raise AssertionError("screen never showed %s:\n%s" % (what, s))

    def close(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True)


def table(screen):
    """The table rows of a screen (between the column header and the bottom line)."""
    lines = screen.splitlines()
    for i, l in enumerate(lines):
        if l.startswith("ALLOC/s"):
            return [x for x in lines[i + 1:-1] if x.strip() and not x.startswith("  (")]
    return []


def test_tmux_keys_drive_the_view_and_q_leaves_the_program_unaffected():
    d = tmpdir()
    n = "n=600"
    ref = subprocess.Popen([fixture("leak"), n], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fx = chtest.Waiting("leak", [n])
    fx.release()
    pane = Pane("%s top -p %d --rate 1e-4 -d 0.5" % (CAMLHEAP, fx.pid), d)
    try:
        s = pane.wait(lambda s: len(table(s)) >= 4, "the sites")
        lines = s.splitlines()
        assert all(len(l) <= 80 for l in lines) and len(lines) <= 24, s
        assert lines[0].startswith("PID %d leak  OCaml " % fx.pid), s
        assert "Leak.churn_young (leak.ml:" in table(s)[0], s
        # sort by LIVE: the leak comes first
        pane.keys("l")
        s = pane.wait(lambda s: "sort LIVE" in s and table(s) and "Leak.leak_one (" in table(s)[0], "LIVE order")
        # < and > move the sort column; r reverses
        pane.keys(">")
        pane.wait(lambda s: "sort GROWTH/s" in s, "sort GROWTH/s")
        pane.keys("a")
        s = pane.wait(lambda s: "sort ALLOC/s" in s and table(s) and "churn_young" in table(s)[0], "ALLOC order")
        pane.keys("r")
        s = pane.wait(lambda s: "(reversed)" in s and table(s) and "churn_young" in table(s)[-1], "reversed order")
        pane.keys("r")
        # filter
        pane.keys("/")
        pane.keys("CHURN_MA", literal=True)
        pane.keys("Enter")
        s = pane.wait(lambda s: 'filter "CHURN_MA"' in s and len(table(s)) == 1 and "Leak.churn_major (" in table(s)[0],
                      "the filtered row")
        pane.keys("Escape")
        pane.wait(lambda s: "filter" not in s.splitlines()[3] and len(table(s)) >= 4, "the filter cleared")
        # the site's callstacks
        pane.keys("Enter")
        s = pane.wait(lambda s: "callstack" in s.splitlines()[0], "the callstack view")
        assert re.match(r"\d+ callstacks? of Leak\.churn_", s) and "Leak.round (" in s and "caml_program" in s, s
        pane.keys("q")  # back, not quit
        pane.wait(lambda s: s.startswith("PID "), "the main view again")
        # the call tree
        pane.keys("t")
        s = pane.wait(lambda s: "CALL TREE" in s and "caml_start_program" in s, "the call tree")
        pane.keys("e")
        s = pane.wait(lambda s: "Leak.churn_young (" in s and "Leak.round (" in s, "the expanded tree")
        pane.keys("t")
        pane.wait(lambda s: " SITE" in s, "the flat view")
        # freeze: the table stays as it is
        pane.keys("f")
        s1 = pane.wait(lambda s: "[FROZEN]" in s.splitlines()[0], "the frozen mark")
        time.sleep(1.6)
        s2 = pane.screen()
        assert table(s1) == table(s2), (s1, s2)
        pane.keys("f")
        pane.wait(lambda s: "[FROZEN]" not in s.splitlines()[0], "the thaw")
        # and thawed it moves again (the rates are fresh samples each refresh)
        pane.wait(lambda s: table(s) != table(s2), "the table moving after the thaw")
        # write pprof, then memtrace
        pane.keys("w")
        pane.wait(lambda s: "Write pprof to: camlheap-%d-" % fx.pid in s, "the pprof prompt")
        pane.keys("Enter")
        s = pane.wait(lambda s: re.search(r"wrote (camlheap-\d+-\S+\.pb\.gz)", s), "the pprof written")
        pb = os.path.join(d, re.search(r"wrote (camlheap-\d+-\S+\.pb\.gz)", s).group(1))
        raw = gzip.open(pb).read()
        dec = subprocess.run(["protoc", "--decode", "perftools.profiles.Profile", "--proto_path",
                              os.path.join(ROOT, "proto"), "profile.proto"], input=raw, capture_output=True)
        assert dec.returncode == 0 and b'"inuse_space"' in dec.stdout and b"Leak.churn_young" in dec.stdout, \
            dec.stderr
        pane.keys("m")
        pane.keys("C-u")
        pane.keys("live.ctf", literal=True)
        pane.keys("Enter")
        pane.wait(lambda s: "wrote live.ctf" in s, "the memtrace written")
        rep = subprocess.run([CAMLHEAP, "report", os.path.join(d, "live.ctf")], capture_output=True)
        assert rep.returncode == 0 and b"Leak.churn_young" in rep.stdout, rep.stderr
        # a wider terminal: GROWTH/s and TOTAL columns
        subprocess.run(["tmux", "-S", pane.sock, "resize-window", "-t", "t", "-x", "120", "-y", "30"], check=True)
        pane.wait(lambda s: "GROWTH/s" in s and "TOTAL" in s and len(s.splitlines()) > 24, "the wide layout")
        subprocess.run(["tmux", "-S", pane.sock, "resize-window", "-t", "t", "-x", "80", "-y", "24"], check=True)
        pane.wait(lambda s: "GROWTH/s" not in s, "the narrow layout")
        # help, any key back
        pane.keys("h")
        pane.wait(lambda s: "camlheap top - keys" in s, "the help")
        pane.keys("x")
        pane.wait(lambda s: s.startswith("PID "), "the main view")
        # q: detach, exit 0
        pane.keys("q")
        s = pane.wait(lambda s: "EXIT=" in s, "camlheap's exit")
        assert "EXIT=0" in s and "detached at the user's request (q)" in s, s
        # the program runs on, untraced, and ends as it would have
        assert fx.proc.poll() is None, "the fixture ended before camlheap detached: make n larger"
        with open("/proc/%d/status" % fx.pid) as f:
            assert "TracerPid:\t0\n" in f.read()
        rc, out, err = fx.finish(timeout=300)
        ref_out, ref_err = ref.communicate(timeout=300)
        assert (rc, out, err) == (ref.returncode, ref_out.decode(), ref_err.decode())
    finally:
        pane.close()
        for p in (fx.proc, ref):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_tmux_target_exit_keeps_the_last_figures_until_q():
    d = tmpdir()
    fx = chtest.Waiting("leak", ["n=20"])
    pane = Pane("%s top -p %d --rate 1e-3 -d 0.3" % (CAMLHEAP, fx.pid), d)
    try:
        pane.wait(lambda s: s.startswith("PID "), "the view")
        fx.release()
        rc, out, err = fx.finish()
        assert rc == 0
        s = pane.wait(lambda s: "[ENDED]" in s and "target exited" in s, "the end")
        assert any("Leak.churn_young (" in l for l in table(s)), s
        time.sleep(1)
        assert "EXIT=" not in pane.screen()
        pane.keys("w", "Enter")
        pane.wait(lambda s: "wrote camlheap-" in s, "the profile written after the end")
        pane.keys("q")
        s = pane.wait(lambda s: "EXIT=" in s, "camlheap's exit")
        assert "EXIT=0" in s, s
    finally:
        pane.close()
        if fx.proc.poll() is None:
            fx.proc.kill()


def test_bad_invocations_are_refused():
    p = subprocess.run([CAMLHEAP, "top"], capture_output=True)
    assert p.returncode == 2 and b"-p PID" in p.stderr, p.stderr
    p = subprocess.run([CAMLHEAP, "top", "-p", "1", "--", "ls"], capture_output=True)
    assert p.returncode == 2 and b"runs no command" in p.stderr, p.stderr
    p = subprocess.run([CAMLHEAP, "top", "-p", "1", "--sort", "size"], capture_output=True)
    assert p.returncode == 2 and b"unknown --sort" in p.stderr, p.stderr
    p = subprocess.run([CAMLHEAP, "top", "-p", "1", "--trend", "2"], capture_output=True)
    assert p.returncode == 2 and b"shorter than the rate window" in p.stderr, p.stderr
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        p = subprocess.run([CAMLHEAP, "top", "-p", str(sleeper.pid), "-b", "-n", "1"], capture_output=True,
                           timeout=60)
        assert p.returncode == 2 and b"is not a native OCaml program" in p.stderr, p.stderr
        assert p.stdout == b"", p.stdout
    finally:
        sleeper.kill()
        sleeper.wait()


def test_kill9_of_top_never_harms_the_target():
    """camlheap top --batch killed with -9 at random moments (during the
    attach, or while refreshing): the fixture's output and status equal
    those of a run without camlheap (a target left stopped or traced
    would not finish)."""
    import random
    ref = subprocess.run([fixture("leak"), "n=30"], capture_output=True, timeout=300)
    assert ref.returncode == 0
    for i in range(4):
        fx = chtest.Waiting("leak", ["n=30"])
        top = subprocess.Popen([CAMLHEAP, "top", "-p", str(fx.pid), "--batch", "--rate", "1e-3", "-d", "0.2"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if i % 2:
            time.sleep(random.uniform(0.0, 0.3))  # while attaching
        else:
            time.sleep(0.6)
            fx.release()
            time.sleep(random.uniform(0.0, 1.0))  # while the target allocates
        top.kill()
        top.wait()
        if i % 2:
            fx.release()
        rc, out, err = fx.finish(timeout=300)
        assert (rc, out, err) == (ref.returncode, ref.stdout.decode(), ref.stderr.decode()), (i, rc, err)
