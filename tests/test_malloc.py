"""--malloc: the program's own libc allocations (C stubs, C threads), by
site, with the libc function as the leaf frame, followed to free/munmap.

Fixture: tests/fixtures/cmalloc.ml (its header says what each site does)
with cmalloc_stubs.c.  Words are bytes / 8 (every byte sampled with
probability lambda / 8); a site's samples are binomial over its words, so
estimates are checked with check_binomial (Z = 4.5, chtest.py) against the
fixture's own counts, and live samples at the end against what it still
holds.
"""
import json
import os
import re
import subprocess

import chtest
from chtest import check_binomial, fixture, site_lines

RATE = 1e-3
MOD = "Cmalloc."
LEAF = {"m_kept": {"malloc"}, "m_freed": {"malloc"}, "m_calloc": {"calloc"}, "m_realloc_first": {"malloc"},
        "m_realloc": {"realloc"}, "m_memalign": {"posix_memalign", "aligned_alloc"}, "m_mmap": {"mmap"},
        "m_bigstack": {"malloc"}}


def _truth(stdout):
    """{(what, site): words}: what is malloc, live or heap."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^TRUTH (malloc|live) (\S+) (\d+)$", line)
        if m:
            out[(m.group(1), m.group(2))] = int(m.group(3))
        m = re.match(r"^TRUTH heap (\d+)$", line)
        if m:
            out[("heap", "")] = int(m.group(1))
    return out


def _json(cmd, extra=("--malloc",), rate=RATE):
    d = chtest.tmpdir()
    out = os.path.join(d, "r.json")
    rc, so, se = chtest.run_record(["--rate", repr(rate), "--format", "json", "-o", out] + list(extra), cmd)
    assert rc == 0, se
    return so, json.load(open(out))


def _frames(j, s):
    return [j["frames"][i] for i in j["stacks"][s["stack"]]["frames"]] if s["stack"] is not None else []


def _sites_at(j, site, kind="malloc"):
    """Sites of `kind` whose stack has a frame of Cmalloc.<site> on its SITE line."""
    lines = site_lines(MOD + site)
    return [s for s in j["sites"] if s["kind"] == kind and
            any(f["function"] == MOD + site and f["line"] in lines for f in _frames(j, s))]


def check_json(so, j, what=""):
    """The checks of a --malloc recording of `cmalloc` (stdout `so`, JSON
    report `j`): every site's estimate and leaf function, live samples
    after the frees, the C thread's samples without an OCaml stack.  Also
    run by `make test-vm` on Debian's own kernel."""
    t = _truth(so)
    for site, leaves in LEAF.items():
        found = _sites_at(j, site)
        assert found, "%sno malloc site for %s" % (what, site)
        assert {_frames(j, s)[0]["function"] for s in found} == leaves, site
        check_binomial(sum(s["samples"] for s in found), t[("malloc", MOD + site)], RATE, what + "malloc " + site)
        live = sum(s["live"]["samples"] for s in found)
        if t[("live", MOD + site)] == 0:
            assert live == 0, (what, site, [s["live"] for s in found])
        else:
            check_binomial(live, t[("live", MOD + site)], RATE, what + "live " + site)
    outside = [s for s in j["sites"] if s["kind"] == "malloc" and s["outside_ocaml"]]
    check_binomial(sum(s["samples"] for s in outside), t[("malloc", "C.thread")], RATE, what + "C thread")


def test_malloc_sites_estimates_and_leaf_function():
    """Every C-stub site's estimate is binomial around the bytes its stub
    asked libc for, and its leaf frame names the libc function called."""
    so, j = _json([fixture("cmalloc"), "n=300"])
    t = _truth(so)
    for site, leaves in LEAF.items():
        found = _sites_at(j, site)
        assert found, "no malloc site for %s" % site
        got = {_frames(j, s)[0]["function"] for s in found}
        assert got == leaves, (site, got)
        assert all(_frames(j, s)[0]["file"] == "libc" for s in found)
        assert not any(s["outside_ocaml"] for s in found)
        check_binomial(sum(s["samples"] for s in found), t[("malloc", MOD + site)], RATE, "malloc " + site)
    obs = j["totals"]["observed_words"]
    assert obs["malloc_calls"] > 300 * 7 and obs["free_calls"] > 300 * 5, obs


def test_malloc_live_drops_to_zero_after_the_frees():
    """Freed blocks (free, munmap, the old block of a realloc) are dead at
    the end; kept ones are alive: live samples binomial around the words
    still held."""
    so, j = _json([fixture("cmalloc"), "n=300"])
    t = _truth(so)
    for site in LEAF:
        found = _sites_at(j, site)
        live = sum(s["live"]["samples"] for s in found)
        if t[("live", MOD + site)] == 0:
            assert sum(s["samples"] for s in found) > 10, "too few samples at %s to say anything" % site
            assert live == 0, (site, [s["live"] for s in found])
        else:
            check_binomial(live, t[("live", MOD + site)], RATE, "live " + site)


def test_malloc_from_a_c_thread_has_no_ocaml_stack():
    """A C thread's mallocs (the OCaml thread waiting in a blocking
    section) are counted, marked as coming from outside OCaml, with the
    libc function as their only frame; nothing else is."""
    so, j = _json([fixture("cmalloc"), "n=300"])
    t = _truth(so)
    outside = [s for s in j["sites"] if s["kind"] == "malloc" and s["outside_ocaml"]]
    assert outside, "no site from outside OCaml"
    for s in outside:
        assert [f["function"] for f in _frames(j, s)] == ["malloc"], _frames(j, s)
    check_binomial(sum(s["samples"] for s in outside), t[("malloc", "C.thread")], RATE, "C thread")
    assert j["totals"]["observed_words"]["malloc_outside_samples"] == sum(s["samples"] for s in outside)


def test_c_thread_beside_an_ocaml_thread_with_small_stacks():
    """With 256 KiB thread stacks (ulimit -s), a C thread mallocs while an
    OCaml thread runs OCaml code: the runtime's stack boundary is then on
    a stack next to the C thread's.  Its samples still have no OCaml stack,
    and none is pinned on the OCaml thread's."""
    import resource

    def small_stacks():
        resource.setrlimit(resource.RLIMIT_STACK, (256 << 10, resource.RLIM_INFINITY))
    d = chtest.tmpdir()
    out = os.path.join(d, "r.json")
    p = subprocess.run([chtest.CAMLHEAP, "record", "--malloc", "--rate", repr(RATE), "--format", "json", "-o", out,
                        "--", fixture("cmalloc"), "n=300", "spin"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300, preexec_fn=small_stacks)
    assert p.returncode == 0, p.stderr
    so, j = p.stdout.decode(), json.load(open(out))
    t = _truth(so)
    outside = [s for s in j["sites"] if s["kind"] == "malloc" and s["outside_ocaml"]]
    check_binomial(sum(s["samples"] for s in outside), t[("malloc", "C.thread")], RATE, "C thread beside a spinner")
    assert not _sites_at(j, "spinner_site"), [s["samples"] for s in _sites_at(j, "spinner_site")]


def test_runtime_heap_is_not_counted_twice():
    """The runtime mallocs its own major-heap chunks (and mmaps inside
    glibc's malloc for large ones): left out of --malloc, since the heap
    is counted as OCaml allocations.  At the site that grows the heap by 64
    MiB, malloc-kind samples stay far below its major samples (what is left
    is the GC's own tables, a few per cent at most)."""
    so, j = _json([fixture("cmalloc"), "n=20", "heap=64"])
    t = _truth(so)

    def at_heap(kind):
        return sum(s["samples"] for s in j["sites"] if s["kind"] == kind and
                   any(f["function"] == "Stdlib__Array.init" for f in _frames(j, s)))
    major = at_heap("major")
    check_binomial(major, t[("heap", "")], RATE, "major heap arrays")
    assert at_heap("malloc") < 0.03 * major, (at_heap("malloc"), major)
    assert j["totals"]["observed_words"]["malloc_runtime_calls"] > 0


def test_no_malloc_samples_without_the_option():
    so, j = _json([fixture("cmalloc"), "n=50"], extra=())
    assert j["totals"]["samples_by_kind"]["malloc"] == 0
    assert "malloc_calls" not in j["totals"]["observed_words"]


def test_malloc_text_report_and_recording():
    """The text report names the libc function and says which samples
    have no OCaml stack; a recording keeps the kind, the function and the
    outside-OCaml mark, and `camlheap report` shows the same sites."""
    d = chtest.tmpdir()
    rep = os.path.join(d, "r.txt")
    rc, so, se = chtest.run_record(["--malloc", "--rate", repr(RATE), "-n", "100", "-o", rep],
                                   [fixture("cmalloc"), "n=100"])
    assert rc == 0, se
    text = open(rep).read()
    assert re.search(r"^allocated .*, malloc [\d.]+ [KMG]?i?B$", text, re.M), text[:2000]
    assert re.search(r"^malloc      --malloc on \S*libc\S*: \d+ allocating calls", text, re.M), text[:2000]
    assert "posix_memalign (libc)" in text and "calloc (libc)" in text
    assert "no OCaml stack: called from a thread not running OCaml" in text
    rec = os.path.join(d, "r.ctf")
    rc, so, se = chtest.run_record(["--malloc", "--rate", repr(RATE), "-o", rec], [fixture("cmalloc"), "n=100"])
    assert rc == 0, se
    out = os.path.join(d, "back.json")
    p = subprocess.run([chtest.CAMLHEAP, "report", "--format", "json", "-o", out, rec], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr
    j = json.load(open(out))
    t = _truth(so)
    for site, leaves in LEAF.items():
        found = _sites_at(j, site)
        assert {_frames(j, s)[0]["function"] for s in found} == leaves, site
        check_binomial(sum(s["samples"] for s in found), t[("malloc", MOD + site)], RATE, "recorded " + site)
    outside = [s for s in j["sites"] if s["kind"] == "malloc" and s["outside_ocaml"]]
    check_binomial(sum(s["samples"] for s in outside), t[("malloc", "C.thread")], RATE, "recorded C thread")
    for site in ("m_freed", "m_memalign"):
        assert sum(s["live"]["samples"] for s in _sites_at(j, site)) == 0, site


def test_static_executable_is_refused_clearly():
    """No libc to probe: a clear error, exit status 2, no output file."""
    d = chtest.tmpdir()
    out = os.path.join(d, "r.txt")
    rc, so, se = chtest.run_record(["--malloc", "-o", out], [fixture("static_hello")])
    assert rc == 2, (rc, se)
    assert "static executable" in se and "without --malloc" in se, se
    assert not os.path.exists(out)


def test_target_unharmed_with_malloc_probes_and_when_killed():
    """--malloc puts uretprobes on libc's allocator: the program's output
    and exit status are the same without camlheap, under a whole
    recording, and when camlheap is killed with -9 at random moments
    (while attaching, or with calls in flight)."""
    args = ["n=3000"]
    ref_w = chtest.Waiting("cmalloc", args)
    ref_w.release()
    ref = ref_w.finish()
    assert ref[0] == 0 and "kept 9450" in ref[1], ref[:2]
    rc, so, se = chtest.run_record(["--malloc", "--rate", repr(RATE), "-o", os.path.join(chtest.tmpdir(), "r.txt")],
                                   [fixture("cmalloc")] + args)
    assert (rc, so) == ref[:2], (rc, se)
    running_at_kill = chtest.kill9_runs("cmalloc", args, ref, RATE, 6, extra=["--malloc"], max_delay=0.2)
    assert running_at_kill > 0, "the target always ended before camlheap was killed: a longer run is needed"


def _gc_heap(stdout):
    return int(re.search(r"^TRUTH gc_heap (\d+)$", stdout, re.M).group(1))


def test_resident_memory_breakdown():
    """The report splits the target's resident set: the OCaml heap from
    the runtime's counters (exactly Gc.quick_stat's heap_words plus the
    minor heap, read while the program holds still), the live sampled
    malloc memory, and the rest.  With --malloc, nearly all of this
    program's 250 MiB is explained (the rest: code, a C thread's stack
    mapped whole but barely touched, allocator slack); without it, most of
    the resident set is unexplained, and the report says malloc was not
    sampled."""
    args = [fixture("cmalloc"), "n=2000", "hold=1.5"]
    so, j = _json(args)
    r = j["totals"]["resident"]
    assert r["ocaml_heap_bytes"] == 8 * _gc_heap(so), (r, _gc_heap(so))
    assert r["when"] == "read at the end" or r["when"].startswith("last read "), r
    assert r["rss_bytes"] > 200 << 20 and r["peak_rss_bytes"] >= r["rss_bytes"], r
    assert abs(r["unexplained_bytes"]) < 0.15 * r["rss_bytes"], r
    assert r["unexplained_bytes"] == r["rss_bytes"] - r["ocaml_heap_bytes"] - \
        r["live_bytes_estimate"]["malloc"] - r["live_bytes_estimate"]["bigarray"], r
    so, j = _json(args, extra=())
    r = j["totals"]["resident"]
    assert "malloc" not in r["live_bytes_estimate"], r
    assert r["unexplained_bytes"] > 0.6 * r["rss_bytes"], r
    d = chtest.tmpdir()
    rep = os.path.join(d, "r.txt")
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "-o", rep], args)
    assert rc == 0, se
    text = open(rep).read()
    assert re.search(r"^resident    RSS [\d.]+ MiB \(peak [\d.]+ MiB; (read at the end|last read [\d.]+ s before the "
                     r"end)\): OCaml heap [\d.]+ MiB \(runtime counters: major and minor heaps\); live outside it, "
                     r"estimated: bigarray [\d.]+ [KMG]?i?B, malloc not sampled \(--malloc\)", text, re.M), text[:3000]


def test_gc_tables_left_out_in_a_stripped_executable():
    """The GC's remembered sets are sized after the minor heap (here 8 M
    words: 8 MiB of ref table, 24 MiB of custom table...) and first
    allocated by a static function that a stripped executable has no
    symbol for; camlheap still leaves them out.  What is left outside the
    stubs' sites is channel buffers and the like: a few hundred KiB."""
    d = chtest.tmpdir()
    exe = os.path.join(d, "cmalloc_stripped")
    subprocess.run(["strip", "-o", exe, fixture("cmalloc")], check=True)
    out = os.path.join(d, "r.json")
    env = dict(os.environ, OCAMLRUNPARAM="s=8M")
    rc, so, se = chtest.run_record(["--malloc", "--rate", repr(RATE), "--format", "json", "-o", out],
                                   [exe, "n=50"], env=env)
    assert rc == 0, se
    j = json.load(open(out))
    other = sum(s["samples"] for s in j["sites"] if s["kind"] == "malloc" and not s["outside_ocaml"] and
                not any(f["function"].startswith(MOD + "m_") or f["function"] == "Stdlib__Array.init"
                        for f in _frames(j, s)))
    # the tables would be ~5 M words: ~5000 samples
    assert other < 300, [(s["samples"], [f["function"] for f in _frames(j, s)][:3]) for s in j["sites"]
                         if s["kind"] == "malloc"]
