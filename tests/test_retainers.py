"""`camlheap census -p PID --retainers` sampled (issue 25: what keeps each
site's blocks alive): the census, then a stop at its end and a trace from
the roots, and under each site the paths from the roots to its live sampled
blocks.  The truths: what the fixtures keep reachable (their TRUTH lines:
words, counted by the fixture or by Obj.reachable_words) against the samples
of the blocks reached, and which global holds what."""
import json
import os
import re
import signal
import subprocess

import chtest

RATE = 1e-3


def _census(name, fixture_args, census_args, read, interrupt, out_name="census.json"):
    """census --retainers -o out_name (JSON, else the file's path is
    returned) on fixture `name` started with --wait:
    the fixture goes on once camlheap is attached, read(its stdout) reads
    what it prints, then the census ends (with `interrupt`, by SIGINT).
    Returns (report, what read returned)."""
    w = chtest.Waiting(name, fixture_args)
    out = os.path.join(chtest.tmpdir(), out_name)
    p = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(w.pid)] + census_args +
                         ["--retainers", "--max-pause", "30", "-o", out],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        chtest.stderr_until(p, b"probes attached", 60)
        w.line()
        got = read(w.proc.stdout)
        if interrupt:
            p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert w.proc.poll() is None, "the target must run on"
    finally:
        if p.poll() is None:
            p.kill()
        w.proc.kill()
        w.proc.wait()
    return (json.load(open(out)) if out.endswith(".json") else out), got


def _census_until_idle(name, args, rate, truth_line):
    """The census ends once the fixture printed truth_line and idles:
    (report, the fixture's output)."""
    def read(f):
        text = ""
        while truth_line not in text:
            line = f.readline().decode()
            assert line, text
            text += line
        return text
    return _census(name, args, ["--rate", repr(rate), "--wait-major", "1000000"], read, True)


def _running_untraced(w):
    """The fixture runs on, traced by no one."""
    status = open("/proc/%d/status" % w.pid).read()
    assert re.search(r"^TracerPid:\s+0$", status, re.M) and w.proc.poll() is None, status


def _by_line(rep, lines):
    """The retainers' entries of the sites allocated at one of `lines`."""
    sites = {i for i, s in enumerate(rep["sites"]) if s["allocation"]["line"] in lines}
    return [e for e in rep["retainers"]["sites"] if e["site"] in sites]


def _paths(rep, site):
    return [p for e in _by_line(rep, chtest.site_lines(site)) for p in e["paths"]]


def _samples(paths, status="reached"):
    return sum(p["samples"] for p in paths if p["status"] == status)


def test_paths_of_the_leak_fixture():
    """At the end, the fixture idle: every live sampled block of the leak is
    reached through one global field, a ref, the list's cells, as the
    source says; the cache's through another; the churning rings' through
    their arrays, and their reached samples estimate the words the rings
    hold (the fixture's truth) while the blocks overwritten since the last
    collection are said unreachable."""
    rep, text = _census_until_idle("leak", ["idle", "n=6"], RATE, "TRUTH alloc Leak.cache_cell")
    t = {m.group(1): int(m.group(2)) for m in re.finditer(r"^TRUTH live (\S+) (\d+)$", text, re.M)}
    r = rep["retainers"]
    assert r["not_traced"] is None and r["pause_s"] > 0 and r["reachable_words"] <= r["heap_words"], r
    leak, cell = _paths(rep, "Leak.leak"), _paths(rep, "Leak.leak_cell")
    assert leak and cell
    roots = {p["root"] for p in leak + cell}
    assert len(roots) == 1 and re.fullmatch(r"global Leak field \d+", roots.pop()), leak + cell
    for p in leak + cell:
        assert p["status"] == "reached" and p["retained_by"] == p["root"], p
        hops = p["blocks_on_path"]
        # the ref, then the list's cells (field 1 of each: the tail), then the sampled block
        assert (hops[0]["tag"], hops[0]["words"]) == (0, 1) and "ref" in hops[0].get("shape", ""), hops
        cells = [h for h in hops[1:-1] if "tag" in h]
        assert cells and all((h["tag"], h["words"]) == (0, 2) for h in cells), hops
        assert all(h["field"] == 1 for h in cells[1:]) and cells[0]["field"] == 0, hops
        assert hops[-1].get("sampled_block") and hops[-1]["words"] == (4 if p in leak else 2), hops
    chtest.check_binomial(_samples(leak), t["Leak.leak"], RATE, "reached samples of Leak.leak")
    chtest.check_binomial(_samples(cell), t["Leak.leak_cell"], RATE, "reached samples of Leak.leak_cell")
    cache = _paths(rep, "Leak.cache") + _paths(rep, "Leak.cache_cell")
    assert cache and all(p["status"] == "reached" for p in cache), cache
    assert {p["root"] for p in cache} == {cache[0]["root"]} != {leak[0]["root"]}, cache
    # the rings: a 10 000-slot array and a 64-slot one, in fields of their own
    for site, slots in (("Leak.churn_promoted", 10000), ("Leak.churn_major", 64)):
        paths = _paths(rep, site)
        reached = [p for p in paths if p["status"] == "reached"]
        assert {p["status"] for p in paths} <= {"reached", "unreachable"}, paths
        assert all(p["blocks_on_path"][0]["words"] == slots and p["length_max"] == 2 for p in reached), reached
        assert len({p["root"] for p in reached} | {leak[0]["root"], cache[0]["root"]}) == 3, reached
        chtest.check_binomial(_samples(paths), t[site], RATE, "reached samples of " + site)


RETAIN_ROOTS = {  # the retain fixture's mode: how the paths' root must read
    "table": r"global Retain field \d+",
    "stack": r"stack Retain\.hold_on_stack.*",
    "croot": r"C global roots \(caml_register_global_root\)",
    "ephemeron": r"ephemeron data \(alive while their keys are\)",
}


def _retain(mode, rate=1e-2, n=20000, out_name="census.json"):
    """The retain fixture in `mode`, its structure built after the attach,
    a census of 4 s: (report, the structure's words)."""
    def read(f):
        line = f.readline().decode()
        m = re.match(r"^READY \d+ TRUTH words=(\d+)", line)
        assert m, line
        return int(m.group(1))
    return _census("retain", [mode, "n=%d" % n], ["--rate", repr(rate), "--duration", "4"], read, False, out_name)


def test_paths_name_their_kind_of_root():
    """The retain fixture's structure, built after the attach and held by
    one kind of root only: every reached path of it starts at that root
    (a module's field, a frame, the C global roots, an ephemeron's data),
    and the samples reached estimate the structure's words
    (Obj.reachable_words, the fixture's truth: all of it allocated after
    the attach but the Hashtbl's record, 5 words)."""
    rate = 1e-2
    for mode, root in RETAIN_ROOTS.items():
        rep, words = _retain(mode, rate)
        assert rep["retainers"]["not_traced"] is None, rep["retainers"]
        paths = [p for e in rep["retainers"]["sites"] for p in e["paths"] if p["status"] == "reached"]
        held = [p for p in paths if re.fullmatch(root, p["root"])]
        assert held, (mode, [p["root"] for p in paths])
        chtest.check_binomial(_samples(held), words, rate, "reached samples of the %s structure" % mode)
        if mode == "table":
            shapes = {p["blocks_on_path"][0].get("shape", "") for p in held}
            assert all(s.startswith("Hashtbl.t (by its shape)") for s in shapes), shapes
        if mode == "ephemeron":  # not retained by any strong root: its own group
            assert all(p["retained_by"] == p["root"] for p in held), held


def test_retainers_sampled_refuses_what_it_cannot_trace():
    r = subprocess.run([chtest.CAMLHEAP, "census", "-p", "1", "--retainers", "--on", "oom"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode == 2 and b"not with --on" in r.stderr, r.stderr
    r = subprocess.run([chtest.CAMLHEAP, "census", "-p", "1", "--max-wait", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode == 2 and b"--retainers options" in r.stderr, r.stderr


def check_retainers_refuses_ocaml5():
    """On an OCaml 5 fixture (tests/test_versions.py): refused before
    anything is attached, exit 2, the release and the supported ones
    named, nothing written, the program running untraced."""
    w = chtest.Waiting("leak", ["forever"])
    out = os.path.join(chtest.tmpdir(), "census.txt")
    try:
        r = subprocess.run([chtest.CAMLHEAP, "census", "-p", str(w.pid), "--retainers", "-o", out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        err = r.stderr.decode()
        assert r.returncode == 2 and "OCaml 4.12, 4.13 and 4.14" in err and "runs OCaml 5." in err, err
        assert not os.path.exists(out)
        w.line()
        _running_untraced(w)
    finally:
        w.proc.kill()
        w.proc.wait()


def test_past_max_pause_the_census_is_written_without_paths():
    """The trace stops at --max-pause: the program runs on, untraced, and
    the census is written as without --retainers, saying why it has no
    paths."""
    w = chtest.Waiting("leak", ["forever"])
    out = os.path.join(chtest.tmpdir(), "census.json")
    try:
        p = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(w.pid), "--rate", repr(RATE), "--duration", "2",
                              "--retainers", "--max-pause", "0.000001", "-o", out],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        chtest.stderr_until(p, b"probes attached", 60)
        w.line()
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        rep = json.load(open(out))
        assert "--max-pause" in (rep["retainers"]["not_traced"] or ""), rep["retainers"]
        assert not rep["retainers"]["sites"] and rep["census"]["live_bytes"]["estimate"] > 0, rep["census"]
        _running_untraced(w)
    finally:
        w.proc.kill()
        w.proc.wait()


def test_paths_as_a_graph():
    """-o FILE.svg: the paths laid out by Graphviz, valid SVG whose nodes
    name the root, the Hashtbl's parts and the census's first site; -o
    FILE.dot: the graph itself, every edge between nodes it defines, every
    root reaching a site."""
    import xml.etree.ElementTree as ET
    svg, _ = _retain("table", out_name="paths.svg")
    texts = [t.text or "" for t in ET.parse(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert any(re.fullmatch(r"global Retain field \d+", t) for t in texts), texts
    assert any("the Hashtbl's bucket array" in t for t in texts) and any(t.startswith("#1 ") for t in texts), texts
    def until_idle(f):
        line = b"-"
        while line and b"TRUTH alloc Leak.cache_cell" not in line:
            line = f.readline()
        assert line, "the fixture ended first"
    dot, _ = _census("leak", ["idle", "n=2"], ["--rate", repr(RATE), "--wait-major", "1000000"], until_idle, True,
                     "paths.dot")
    text = open(dot).read()
    assert text.startswith("digraph retainers {") and text.rstrip().endswith("}"), text[:200]
    nodes = dict(re.findall(r'^  (n\d+) \[label="((?:[^"\\]|\\.)*)"', text, re.M))
    edges = re.findall(r"^  (n\d+) -> (n\d+)", text, re.M)
    assert edges and all(a in nodes and b in nodes for a, b in edges), (nodes, edges)
    succ = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    roots = [n for n, l in nodes.items() if l.startswith("global Leak field ")]
    sites = {n for n, l in nodes.items() if l.startswith("#")}
    assert roots and sites, nodes

    def reaches(n, seen=()):
        return n in sites or any(reaches(m, seen + (n,)) for m in succ.get(n, []) if m not in seen)
    assert all(reaches(r) for r in roots), (roots, edges)


def test_graph_formats_are_census_retainers_only():
    for args in (["record", "-p", "1", "-o", "/tmp/x.dot"], ["census", "-p", "1", "-o", "/tmp/x.dot"],
                 ["census", "-p", "1", "--exact", "--retainers", "-o", "/tmp/x.svg"]):
        r = subprocess.run([chtest.CAMLHEAP] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        assert r.returncode == 2 and b"dot" in r.stderr, (args, r.stderr)
