"""Census: sampled blocks followed to their death (promotion, minor death,
major death at the clean phase, compaction), live and peak figures,
`camlheap census` and its leak-suspect score.

Fixture: tests/fixtures/leak.ml (its header says what each site does and
what its TRUTH lines mean).  Live samples of a site are binomial over its
live words (every word is sampled independently with probability lambda),
so they are checked with check_binomial against the fixture's own count
of the words it still holds (Z = 4.5, chtest.py).
"""
import math
import os
import re
import signal
import subprocess
import time

import chtest
from chtest import check_binomial, fixture, record_launch, site_lines

RATE = 1e-3
LIVE_SITES = ["leak", "leak_cell", "churn_young", "churn_promoted", "churn_major", "cache", "cache_cell"]


def truth(stdout):
    """{('live'|'alloc', site): words} from the fixture's TRUTH lines."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^TRUTH (live|alloc) Leak\.(\w+) (\d+)$", line)
        if m:
            out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def sites_of(rep, site):
    """Report sites whose innermost Leak frame is on the SITE line of `site`."""
    lines = site_lines("Leak." + site)
    out = []
    for s in rep.sites:
        own = [f for f in s["frames"] if f["function"].startswith("Leak.")]
        if own and own[0]["line"] in lines:
            out.append(s)
    return out


def live_of(rep, site):
    return sum(s.get("live", 0) for s in sites_of(rep, site))


def test_live_at_end_matches_the_fixtures_own_count():
    rc, out, rep, err = record_launch([fixture("leak")], RATE, extra=["--live"])
    assert rc == 0, err
    t = truth(out)
    c = rep.census()
    assert c, rep.text[:2000]
    for site in LIVE_SITES:
        check_binomial(live_of(rep, site), t[("live", site)], RATE, "live Leak.%s" % site)
        check_binomial(sum(s["samples"] for s in sites_of(rep, site)), t[("alloc", site)], RATE,
                       "allocated Leak.%s" % site)
    # the last Gc.full_major killed every churned tuple: exactly none is left
    assert live_of(rep, "churn_young") == 0
    # every followed block is accounted for exactly once
    assert c["followed"] == c["dead_minor"] + c["dead_major"] + rep.live_blocks_total(), (c, rep.header["live"])
    assert c["promoted"] <= c["minor_born"] and c["clean_phases"] >= 6, c
    assert "warning" not in rep.header, rep.header


def test_collapsed_live_value():
    d = chtest.tmpdir()
    out = os.path.join(d, "live.folded")
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "--format", "collapsed", "--value", "live", "-o", out],
                                   [fixture("leak"), "n=3"])
    assert rc == 0, se
    lines = open(out).read().splitlines()
    assert lines and all(re.match(r"^\S.* \d+$", l) for l in lines), lines[:5]
    by_leaf = {}
    for l in lines:
        stack, b = l.rsplit(" ", 1)
        by_leaf[stack.split(";")[-1]] = by_leaf.get(stack.split(";")[-1], 0) + int(b)
    # the leak is live, the young churn is not (it is not even listed)
    assert by_leaf.get("Leak.leak_one", 0) > 0, by_leaf
    assert "Leak.churn_young" not in by_leaf, by_leaf


def check_fates(ours, mp):
    """camlheap's census counts against Gc.Memprof's tracker's, both
    {minor, promoted, dead_minor, major, dead_major} in sampled blocks: the
    fractions promoted, dead young and dead in the major heap agree.
    Two-proportion z tests; the 3 count as one check of the suite
    (chtest.z_limit(3), Bonferroni)."""
    def z2(k1, n1, k2, n2):
        p = (k1 + k2) / (n1 + n2)
        sd = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
        return 0.0 if sd == 0 else (k1 / n1 - k2 / n2) / sd

    checks = [
        ("promoted / minor-born", ours["promoted"], ours["minor"], mp["promoted"], mp["minor"]),
        ("dead young / minor-born", ours["dead_minor"], ours["minor"], mp["dead_minor"], mp["minor"]),
        ("dead in the major heap / in the major heap",
         ours["dead_major"], ours["promoted"] + ours["major"], mp["dead_major"], mp["promoted"] + mp["major"]),
    ]
    zcrit = chtest.z_limit(len(checks))
    for what, k1, n1, k2, n2 in checks:
        assert n1 > 100 and n2 > 100, (what, ours, mp)
        z = z2(k1, n1, k2, n2)
        assert abs(z) <= zcrit, "%s: camlheap %d/%d vs Gc.Memprof %d/%d (z = %.2f, limit %.2f)" % (
            what, k1, n1, k2, n2, z, zcrit)


def test_fates_agree_with_in_process_memprof():
    """Gc.Memprof's own tracker (promote, dealloc_minor, dealloc_major) and
    camlheap, sampling the same run independently at the same rate: the
    fractions of sampled blocks promoted, dead young and dead in the major
    heap agree (check_fates).  Gc.Memprof's sample is a fresh draw in
    every run (Fixture.memprof_reseed), not the one its fixed seed gives.
    camlheap also samples Gc.Memprof's own callback records (about 40
    dead-young blocks in 5 400, measured): that moves the promoted
    fraction by about -0.15 standard deviations, left in."""
    rc, out, rep, err = record_launch([fixture("leak"), "memprof=%g" % RATE], RATE,
                                      extra=["--executor", "ptrace"])
    assert rc == 0, err
    m = re.search(r"MEMPROF_FATES minor=(\d+) promoted=(\d+) dead_minor=(\d+) major=(\d+) dead_major=(\d+)", out)
    assert m, out
    mp = dict(zip(("minor", "promoted", "dead_minor", "major", "dead_major"), map(int, m.groups())))
    c = rep.census()
    assert c, rep.text[:2000]
    ours = {"minor": c["minor_born"], "promoted": c["promoted"], "dead_minor": c["dead_minor"],
            "major": c["followed"] - c["minor_born"], "dead_major": c["dead_major"]}

    check_fates(ours, mp)


def test_ring_buffer_overflow_loses_no_death():
    """A 16 KiB ring (test knob CAMLHEAP_RINGBUF_BYTES) at a high rate:
    most sample events are dropped (counted), and the fate events of the
    blocks that were followed find the ring full too.  They are kept in the
    kernel and sent later (or read at the end), so every followed block is
    accounted for and no young churn is left live."""
    env = dict(os.environ, CAMLHEAP_RINGBUF_BYTES="16384")
    d = chtest.tmpdir()
    path = os.path.join(d, "r.txt")
    rc, so, se = chtest.run_record(["--rate", "1e-2", "--live", "--top", "100000", "-o", path],
                                   [fixture("leak"), "n=3"], env=env)
    assert rc == 0, se
    rep = chtest.Report(open(path).read())
    c = rep.census()
    assert rep.samples_total()[2] > 0, "the ring did not overflow: %s" % rep.header["samples"]
    assert "nothing lost" in rep.header.get("note", ""), rep.header
    assert c["followed"] == c["dead_minor"] + c["dead_major"] + rep.live_blocks_total(), c
    assert live_of(rep, "churn_young") == 0
    assert c["clean_phases"] >= 4, c


def test_full_tracking_set_is_reported():
    """--max-tracked 50: most promoted blocks find no room; they are
    counted live, no longer followed, and the report says so."""
    rc, out, rep, err = record_launch([fixture("leak"), "n=3"], RATE, extra=["--live", "--max-tracked", "50"])
    assert rc == 0, err
    c = rep.census()
    m = re.search(r"(\d+) sampled blocks? could not be followed \(tracking set full\)", rep.text)
    assert m and int(m.group(1)) > 0 and "--max-tracked" in rep.text, rep.header
    assert c["followed"] == c["dead_minor"] + c["dead_major"] + rep.live_blocks_total(), c


def test_compaction_marks_blocks_relocated():
    rc, out, rep, err = record_launch([fixture("leak"), "compact", "n=4"], RATE, extra=["--live"])
    assert rc == 0, err
    t = truth(out)
    c = rep.census()
    w = [v for k, v in rep.header.items() if k == "warning"]
    ocaml5 = "(OCaml 5." in rep.header.get("target", "")
    assert w and "moved by a compaction" in w[0] and \
        ("only at Gc.compact" if ocaml5 else "OCAMLRUNPARAM=O=1000000") in w[0], rep.header
    m = re.search(r"(\d+) sampled blocks? moved by a compaction \((\d+) seen\)", w[0])
    assert m and int(m.group(1)) > 0 and int(m.group(2)) >= 1, w
    # the leak never dies, relocated or not: its live estimate stays right
    check_binomial(live_of(rep, "leak"), t[("live", "leak")], RATE, "live Leak.leak after compaction")
    # every followed block is accounted for exactly once, none negative
    assert c["followed"] == c["dead_minor"] + c["dead_major"] + rep.live_blocks_total(), c
    for s in rep.sites:
        assert s.get("live", 0) >= 0


def test_compaction_off_keeps_blocks_followed():
    """The advice the report gives: with OCAMLRUNPARAM=O=1000000 the
    automatic compaction never runs, so nothing is relocated (the
    fixture's explicit Gc.compact is not asked for here)."""
    env = dict(os.environ, OCAMLRUNPARAM="O=1000000")
    d = chtest.tmpdir()
    rep_path = os.path.join(d, "r.txt")
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "--live", "-o", rep_path], [fixture("leak"), "n=3"], env=env)
    assert rc == 0, se
    rep = chtest.Report(open(rep_path).read())
    assert "moved by a compaction" not in rep.text, rep.header


def _census(pid, args, timeout=120):
    d = chtest.tmpdir()
    out = os.path.join(d, "census.txt")
    p = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(pid), "--by", "stack", "-o", out] + list(args),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p, out


def _wait_attached(p, timeout=60):
    return chtest.stderr_until(p, b"probes attached", timeout)


def test_census_finds_the_leak():
    # no cycle count or duration ends this census: Ctrl-C does, once the
    # fixture has printed its truth and idles (nothing allocates then)
    w = chtest.Waiting("leak", ["idle", "n=6"])
    p, out = _census(w.pid, ["--rate", repr(RATE), "--wait-major", "1000000"])
    try:
        _wait_attached(p)
        w.line()  # the rounds start only now: everything they allocate is after attach
        fixture_out = ""
        while "TRUTH alloc Leak.cache_cell" not in fixture_out:
            line = w.proc.stdout.readline().decode()
            assert line, fixture_out
            fixture_out += line
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    finally:
        w.release()
        rc, _, _ = w.finish()
    assert rc == 0
    t = truth(fixture_out)
    rep = chtest.Report(open(out).read())
    assert rep.first_line().startswith("camlheap census:") and "older ones are not sampled" in rep.first_line(), \
        rep.first_line()
    for site in ("leak", "leak_cell", "churn_promoted", "churn_major", "cache", "cache_cell"):
        check_binomial(live_of(rep, site), t[("live", site)], RATE, "census live Leak.%s" % site)
    assert live_of(rep, "churn_young") == 0
    # sites are listed by live bytes, the two leak sites flagged and ranked first
    lives = [s["live"] for s in rep.sites]
    assert lives == sorted(lives, reverse=True), lives
    sus = rep.suspects()
    assert len(sus) >= 2, rep.text[-3000:]
    leak_lines = set(site_lines("Leak.leak") + site_lines("Leak.leak_cell"))
    assert {sus[0][1], sus[1][1]} <= leak_lines and sus[0][2] and sus[1][2], sus
    assert not any(flag for fn, line, flag in sus[2:]), sus
    # ages: the leak's blocks span the rounds, the cache's were born in round 1
    leak = sites_of(rep, "leak")[0]
    cache = sites_of(rep, "cache")[0]
    assert leak["median_age"] >= 1 and cache["median_age"] >= leak["median_age"], (leak, cache)


def test_census_wait_major_ends_by_itself():
    w = chtest.Waiting("leak", ["forever"])
    p, out = _census(w.pid, ["--rate", repr(RATE), "--wait-major", "2"])
    try:
        _wait_attached(p)
        w.line()
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert w.proc.poll() is None, "the target must run on"
    finally:
        w.proc.kill()
        w.proc.wait()
    rep = chtest.Report(open(out).read())
    assert "2 full major cycles ended" in rep.header["duration"], rep.header
    c = rep.census()
    assert c["clean_phases"] >= 3, c


def test_census_attaching_to_a_busy_program():
    """Attach while the program churns (no --wait): blocks sampled while
    camlheap is still attaching must be followed like the others.  A
    fresh review found major arrays sampled then "alive" for ever (median
    age 32-36 cycles of 36) when the attach was slow: the collection hooks
    were attached last, so a compaction or minor collection in between
    went unseen.  The test knob CAMLHEAP_ATTACH_DELAY_MS makes the attach
    slow on purpose (100 ms between probes: ~1.2 s in all)."""
    fx = subprocess.Popen([fixture("leak"), "forever"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        d = chtest.tmpdir()
        out = os.path.join(d, "c.txt")
        env = dict(os.environ, CAMLHEAP_ATTACH_DELAY_MS="100")
        p = subprocess.run([chtest.CAMLHEAP, "census", "-p", str(fx.pid), "--rate", repr(RATE), "--wait-major", "20",
                            "-o", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, env=env)
        assert p.returncode == 0, p.stderr
        assert fx.poll() is None, "the target must run on"
    finally:
        fx.kill()
        fx.wait()
    rep = chtest.Report(open(out).read())
    for site in ("churn_major", "churn_promoted"):
        for s in sites_of(rep, site):
            # each ring holds what the last round or two allocated: what is
            # live (or dead but not yet judged) was born a cycle or two ago
            assert s["median_age"] <= 3, (site, s, rep.header)


def test_census_needs_a_pid():
    p = subprocess.run([chtest.CAMLHEAP, "census", "--", fixture("leak")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert p.returncode == 2 and b"-p PID" in p.stderr, p.stderr
