"""`camlheap census -p PID --exact` (issue 25, the exact census): the
whole major heap of a running 4.x program walked while it is stopped at a
moment outside its memory manager.  The truths: the program's own Gc.stat
(which walks the same heap in-process, runtime/gc_ctrl.c heap_stats), the
runtime's own counters read at the same stop, and what the fixture built."""
import json
import math
import os
import signal
import subprocess
import time

import chtest


def _start(args):
    p = subprocess.Popen([chtest.fixture("heapstat")] + list(args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert line.startswith("READY "), (line, p.stderr.read())
    return p, line


def _stat(line):
    return {k: int(v) for k, v in (w.split("=") for w in line.split()[3:])}


def _exact(pid, args=(), out_name="heap.json", env=None):
    d = chtest.tmpdir()
    out = os.path.join(d, out_name)
    p = subprocess.run([chtest.CAMLHEAP, "census", "-p", str(pid), "--exact", "-o", out] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                       env=dict(os.environ, **(env or {})))
    return p, out


def _status(pid):
    return dict(line.split(":\t", 1) for line in open("/proc/%d/status" % pid).read().splitlines()
                if ":\t" in line)


def _end(p):
    """The fixture is running, traced by no one, and ends on SIGTERM as it
    would have without camlheap."""
    st = _status(p.pid)
    assert st["TracerPid"].strip() == "0", st["TracerPid"]
    assert st["State"][0] in "RS", st["State"]
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == -signal.SIGTERM


def _consistent(h):
    return (h["heap_words"] == h["runtime_heap_words"] and h["heap_chunks"] == h["runtime_heap_chunks"]
            and h["live_words"] + h["free_words"] + h["fragments"] == h["heap_words"])


def test_exact_census_equals_gc_stat():
    n = 20000
    p, line = _start(["n=%d" % n])
    try:
        want = _stat(line)
        r, out = _exact(p.pid)
        assert r.returncode == 0, r.stderr
        d = json.load(open(out))
        h = d["major_heap"]
        for k in ("heap_words", "heap_chunks", "live_words", "live_blocks", "free_words", "free_blocks",
                  "largest_free", "fragments"):
            assert h[k] == want[k], (k, h[k], want[k])
        assert _consistent(h), h
        assert d["threads"] == 1 and d["pause_s"] > 0
        tags = {t["tag"]: t for t in d["by_tag"]}
        assert sum(t["words"] for t in d["by_tag"]) == h["live_words"]
        assert sum(t["blocks"] for t in d["by_size"]) == h["live_blocks"]
        # what the fixture built: n strings of 100 bytes (Whsize 14), n / 4
        # float arrays of 8 (Whsize 9), n boxed Int64 (custom "_j", Whsize 3)
        assert tags[252]["blocks"] >= n and tags[252]["words"] >= 14 * n, tags[252]
        assert tags[254]["blocks"] >= n // 4 and tags[254]["words"] >= 9 * (n // 4), tags[254]
        j = [c for c in d["custom"] if c["identifier"] == "_j"]
        assert j and j[0]["blocks"] >= n and j[0]["words"] == 3 * j[0]["blocks"], d["custom"]
        # the same figures in the text
        r, txt = _exact(p.pid, out_name="heap.txt")
        assert r.returncode == 0, r.stderr
        text = open(txt).read()
        live = [ln.split() for ln in text.splitlines() if ln.startswith("  live ")]
        assert live and live[0][1] == str(want["live_words"]) and live[0][5] == str(want["live_blocks"]), text
        assert "the runtime's own count: %d words in %d chunks: equal" % (want["heap_words"],
                                                                        want["heap_chunks"]) in text, text
        assert "_j" in text and "252 String" in text, text
        _end(p)
    finally:
        p.kill()


def test_exact_census_consistent_while_compacting():
    # a program in minor, major and compacting collections all the time: a
    # stop inside its memory manager would show a block running past its
    # chunk or totals unlike the runtime's; every walk must be whole
    p, _ = _start(["busy", "compact", "n=1000"])
    try:
        stops = 0
        for _ in range(20):
            r, out = _exact(p.pid, ["--max-wait", "30"])
            assert r.returncode == 0, r.stderr
            d = json.load(open(out))
            assert _consistent(d["major_heap"]), d["major_heap"]
            stops += d["stops"]
        assert p.poll() is None
        _end(p)
    finally:
        p.kill()
    # some stops fell inside a collection and were refused
    assert stops > 20, stops


def test_exact_kill9_during_the_pause_leaves_the_target_running():
    p, _ = _start(["busy", "n=1000"])
    try:
        c = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(p.pid), "--exact", "--max-pause", "60",
                              "-o", os.path.join(chtest.tmpdir(), "x.json")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=dict(os.environ, CAMLHEAP_TEST_HOLD_MS="5000"))
        deadline = time.time() + 30
        while _status(p.pid)["State"][0] != "t":
            assert time.time() < deadline and c.poll() is None, c.stderr.read() if c.poll() is not None else ""
            time.sleep(0.01)
        c.kill()
        c.wait()
        time.sleep(0.2)
        ticks = int(open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()[11])
        time.sleep(0.5)
        assert int(open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()[11]) > ticks, "not running"
        _end(p)
    finally:
        p.kill()


def test_exact_max_pause_stops_the_walk_and_keeps_the_old_file():
    p, _ = _start(["n=400000"])
    try:
        d = chtest.tmpdir()
        out = os.path.join(d, "heap.json")
        with open(out, "w") as f:
            f.write("previous\n")
        r = subprocess.run([chtest.CAMLHEAP, "census", "-p", str(p.pid), "--exact", "--max-pause", "0.000001",
                            "-o", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        assert r.returncode == 1, r.stderr
        err = r.stderr.decode()
        assert "--max-pause" in err and "runs on" in err and "nothing written" in err, err
        assert open(out).read() == "previous\n"
        assert os.listdir(d) == ["heap.json"], os.listdir(d)
        _end(p)
    finally:
        p.kill()


def test_exact_refuses_a_process_that_is_not_ocaml():
    v = subprocess.Popen([chtest.fixture("victim")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(0.2)
        r, out = _exact(v.pid)
        assert r.returncode == 2, r.stderr
        assert b"OCaml" in r.stderr and not os.path.exists(out), r.stderr
        assert v.poll() is None
    finally:
        v.kill()
        v.wait()


def test_exact_options_are_checked():
    r = subprocess.run([chtest.CAMLHEAP, "census", "-p", "1", "--exact", "--wait-major", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode != 0 and b"--exact takes no" in r.stderr, r.stderr
    r = subprocess.run([chtest.CAMLHEAP, "census", "-p", "1", "--max-pause", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode != 0 and b"--exact and --retainers options" in r.stderr, r.stderr
    r = subprocess.run([chtest.CAMLHEAP, "census", "-p", "1", "--exact", "--retainers", "--rate", "1e-3"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode != 0 and b"samples nothing" in r.stderr, r.stderr
    r = subprocess.run([chtest.CAMLHEAP, "census", "-p", "1", "--exact", "-o", "/tmp/x.svg"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode != 0 and b"text or json" in r.stderr, r.stderr


def check_exact_refuses_ocaml5():
    """On an OCaml 5 fixture (tests/test_versions.py): refused, exit 2, the
    release and the supported ones named, the program untouched."""
    p, _ = _start([])
    try:
        r, out = _exact(p.pid)
        assert r.returncode == 2, r.stderr
        err = r.stderr.decode()
        assert "OCaml 4.12, 4.13 and 4.14" in err and "runs OCaml 5." in err, err
        assert not os.path.exists(out)
        _end(p)
    finally:
        p.kill()


RETAIN = {  # the fixture's mode: the group that must retain its structure
    "table": "global Retain",
    "closure": "global Retain",
    "stack": "stack Retain.hold_on_stack",
    "croot": "C global roots (caml_register_global_root)",
    "ephemeron": "ephemeron data (alive while their keys are)",
    "thread": "stack Retain.hold",  # a frame of a second thread, read exactly through systhreads' saved state
}


def _retain(mode, n=20000):
    truths, d, _ = _retain_line(mode, n, text=False)
    return truths["words"], d


def _check_retained_by(mode):
    truth, d = _retain(mode)
    r = d["retainers"]
    groups = {g["name"]: g for g in r["groups"]}
    got = groups[RETAIN[mode]]["retained"]["words"]
    # the structure's own words (Obj.reachable_words), plus at most the
    # fixture's few other globals in the same group
    assert truth <= got <= truth + 100, (mode, truth, got, sorted((g["retained"]["words"], n) for n, g in
                                                                   groups.items())[-4:])
    # every reachable word is retained by one group or held by several
    assert sum(g["retained"]["words"] for g in r["groups"]) + r["shared"]["words"] == r["reachable"]["words"]
    assert r["reachable"]["words"] <= d["major_heap"]["live_words"]
    assert sum(t.get("reachable_words", 0) for t in d["by_tag"]) == r["reachable"]["words"]
    if mode == "ephemeron":  # held while its key lives, but by no strong root
        assert groups["global Retain"]["retained"]["words"] < 1000, groups["global Retain"]
    if mode == "closure":  # the field: the ref (2 words) and the closure with what it captured
        src = open(os.path.join(os.path.dirname(__file__), "fixtures", "retain.ml")).read().splitlines()
        line = [k + 1 for k, ln in enumerate(src) if "closure := (fun" in ln][0]
        f = groups[RETAIN[mode]]["fields"][0]
        assert f["retained"]["words"] == truth + 2, (f, truth)
        assert f["shape"] == "ref or Some of closure Retain.fun capturing 1 value", f
        assert f["defined_at"].endswith("/retain.ml:%d" % line), (f, line)
    if mode in ("stack", "thread"):  # the frame's live slots, read exactly: no conservative group holds it
        assert all(not g["conservative"] or g["retained"]["words"] < 1000 for g in r["groups"]), r["groups"]


def test_retainers_global_hashtbl():
    _check_retained_by("table")


def test_retainers_closure_in_a_global_ref():
    _check_retained_by("closure")


def test_retainers_stack_frame_named_by_its_function():
    _check_retained_by("stack")


def test_retainers_frame_of_another_thread():
    _check_retained_by("thread")


def test_retainers_c_global_root():
    _check_retained_by("croot")


def test_retainers_ephemeron_data_is_not_retained_strongly():
    _check_retained_by("ephemeron")


def _retain_line(mode, n, text=True):
    """The fixture in `mode` traced with --retainers: its READY line's
    numbers (words= and the containers' own), the JSON, and (text) the
    text census."""
    p = subprocess.Popen([chtest.fixture("retain"), mode, "n=%d" % n], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline().decode()
    assert "TRUTH words=" in line, (line, p.stderr.read())
    try:
        r, out = _exact(p.pid, ["--retainers"])
        assert r.returncode == 0, r.stderr
        d = json.load(open(out))
        if text:
            r, txt = _exact(p.pid, ["--retainers"], out_name="heap.txt")
            assert r.returncode == 0, r.stderr
        _end(p)
    finally:
        p.kill()
    truths = {k: int(v) for k, v in (w.split("=") for w in line.split("TRUTH ")[1].split())}
    return truths, d, open(txt).read() if text else None


def test_retainers_fields_retain_their_structure_and_name_the_stdlib_containers():
    # one global field a structure: each field retains exactly the words
    # reachable from it (Obj.reachable_words, the program's own count), and
    # is named by its shape; the module's group holds at least their sum
    n = 3000
    truths, d, text = _retain_line("containers", n)
    g = [g for g in d["retainers"]["groups"] if g["name"] == "global Retain"][0]
    fields = g.get("fields", [])
    want = {  # the container: its field (its place among the module's top-level values, from 0:
        # n, given, table, closure, key, eph, queue...; the external takes none), its shape's start
        "queue": (6, "Queue.t (by its shape): %d elements" % n),
        "stack": (7, "Stack.t (by its shape): %d elements" % n),
        "buffer": (8, "Buffer.t (by its shape): %d bytes used of " % (8 * n)),
        "map": (9, "ref or Some of Map.t (by its shape): a tree of height "),
        "set": (10, "ref or Some of Set.t (by its shape): a tree of height "),
        "list": (11, "ref or Some of list of more than 256 elements"),
    }
    example = {  # an element of each, said after the shape
        "queue": "; the first: string", "stack": "; the top: string", "buffer": "",
        "map": "; at the root: string -> int", "set": "; at the root: string", "list": "; the head: string"}
    for k, (field, shape) in want.items():
        got = [f for f in fields if (f["shape"] or "").startswith(shape)]
        assert len(got) == 1 and got[0]["field"] == field, (k, shape, [(f["field"], f["shape"]) for f in fields])
        if example[k]:
            assert got[0]["shape"].endswith(example[k]), got[0]
        else:  # Buffer: its capacity, 16 doubled until the contents fit
            assert int(got[0]["shape"].rsplit(" ", 1)[1]) == 16 * 2 ** math.ceil(math.log2(8 * n / 16)), got[0]
        assert got[0]["retained"]["words"] == truths[k], (k, got[0], truths[k])
    # an array held by two fields (12 and 13) at once: neither retains it
    # alone, their module does; no other group holds it
    byf = {f["field"]: f for f in fields}
    assert byf[12]["retained"]["words"] == byf[13]["retained"]["words"] == 2, (byf.get(12), byf.get(13))
    assert g["retained"]["words"] >= sum(truths[k] for k in want) + truths["shared"] + 4, g
    assert d["retainers"]["shared"]["words"] < truths["shared"], d["retainers"]["shared"]
    assert sum(f["retained"]["words"] for f in fields) <= g["retained"]["words"]
    # a closure of two arguments: named by its own code, not caml_curry2's
    src = open(os.path.join(os.path.dirname(__file__), "fixtures", "retain.ml")).read().splitlines()
    line = [k + 1 for k, ln in enumerate(src) if "adder := (fun a b" in ln][0]
    assert byf[14]["shape"] == "ref or Some of closure Retain.fun capturing 1 value", byf[14]
    assert byf[14]["defined_at"].endswith("/retain.ml:%d" % line), (byf[14], line)
    # a partial application by the function applied; a closure of a
    # recursive set (an infix pointer) by its own name
    add3 = [k + 1 for k, ln in enumerate(src) if ln.startswith("let add3_impl ")][0]
    assert byf[17]["shape"] == "ref or Some of partial application of Retain.add3_impl", byf[17]
    assert byf[17]["defined_at"].endswith("/retain.ml:%d" % add3), (byf[17], add3)
    assert byf[18]["shape"] == "ref or Some of closure Retain.g (of a recursive set) capturing 1 value", byf[18]
    rt = d["retainers"]
    assert sum(x["retained"]["words"] for x in rt["groups"]) + rt["shared"]["words"] == rt["reachable"]["words"]
    # the text: under the group, its three largest fields with their shapes
    lines = text.split("retained by root group")[1].splitlines()
    i = [k for k, ln in enumerate(lines) if ln.split()[:2] == ["global", "Retain"]][0]
    top = sorted(fields, key=lambda f: -f["retained"]["words"])[:3]
    for k, f in enumerate(top):
        ln = lines[i + 1 + k].split()
        assert ln[:2] == ["field", str(f["field"])] and int(ln[2]) == f["retained"]["words"], lines[i:i + 4]
        assert lines[i + 1 + k].endswith(f["shape"] + (", defined at " + f["defined_at"] if f["defined_at"] else "")), \
            lines[i + 1 + k]


def test_retainers_hashtbl_field_named_and_retaining_the_table():
    n = 5000
    truths, d, text = _retain_line("table", n)
    g = [g for g in d["retainers"]["groups"] if g["name"] == "global Retain"][0]
    f = g["fields"][0]
    assert f["shape"].startswith("Hashtbl.t (by its shape): %d bindings in " % n), f
    assert f["shape"].endswith("; a binding: string -> list or pair"), f  # string_of_int i -> [i; i + 1]
    assert f["retained"]["words"] == truths["words"], (f, truths)


def test_retainers_text_names_the_retaining_module():
    p = subprocess.Popen([chtest.fixture("retain"), "table", "n=20000"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    truth = int(p.stdout.readline().decode().split("words=")[1])
    try:
        r, out = _exact(p.pid, ["--retainers"], out_name="heap.txt")
        assert r.returncode == 0, r.stderr
        text = open(out).read()
        first = [ln for ln in text.split("retained by root group")[1].splitlines()[2:] if ln.strip()][0]
        assert first.split()[:2] == ["global", "Retain"] and truth <= int(first.split()[2]) <= truth + 100, text
        assert "reachable from the roots" in text, text
        _end(p)
    finally:
        p.kill()


def test_retainers_consistent_while_compacting():
    p, _ = _start(["busy", "compact", "n=1000"])
    try:
        for _ in range(8):
            r, out = _exact(p.pid, ["--retainers", "--max-wait", "30", "--max-pause", "20"])
            assert r.returncode == 0, r.stderr
            d = json.load(open(out))
            rt = d["retainers"]
            assert _consistent(d["major_heap"]), d["major_heap"]
            assert sum(g["retained"]["words"] for g in rt["groups"]) + rt["shared"]["words"] == \
                rt["reachable"]["words"] <= d["major_heap"]["live_words"]
        _end(p)
    finally:
        p.kill()


def test_exact_signals_sent_to_the_target_meanwhile_are_not_lost():
    # a program compacting all the time: camlheap stops it again and again
    # until a stop falls outside its GC; a SIGTERM sent then must still end
    # it (a signal caught at a ptrace stop and not passed on is lost)
    for delay in (0.05, 0.1, 0.2, 0.3, 0.4):
        p, _ = _start(["busy", "compact", "n=1000"])
        try:
            c = subprocess.Popen([chtest.CAMLHEAP, "census", "-p", str(p.pid), "--exact", "--max-wait", "2", "-q",
                                  "-o", os.path.join(chtest.tmpdir(), "x.json")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(delay)
            p.send_signal(signal.SIGTERM)
            c.wait(timeout=60)
            assert p.wait(timeout=10) == -signal.SIGTERM
        finally:
            p.kill()
            p.wait()


def test_exact_and_retainers_on_ocamlopt_leave_its_outputs_identical():
    # Debian's ocamlopt.opt (stripped: .dynsym only) compiling the stdlib's
    # largest module: walked and traced again and again while it runs, every
    # walk equal to its runtime's own counters, and its outputs, streams and
    # status those of a run without camlheap
    from test_real import SRC
    import filecmp
    import shutil
    d, saved = chtest.tmpdir(), chtest.tmpdir()
    cmd = ["/usr/bin/ocamlopt.opt", "-g", "-c", "camlinternalFormat.mli", "camlinternalFormat.ml"]
    shutil.copy(SRC, d)
    shutil.copy(SRC + "i", d)
    plain = subprocess.run(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
    assert plain.returncode == 0, plain.stderr
    outputs = ["camlinternalFormat" + ext for ext in (".cmi", ".cmx", ".o")]
    for f in outputs:
        shutil.move(os.path.join(d, f), os.path.join(saved, f))
    p = subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    walks = traces = 0
    out_dir = chtest.tmpdir()
    while p.poll() is None:
        extra = ["--retainers", "--max-pause", "30"] if walks % 2 else []
        out = os.path.join(out_dir, "heap.json")
        r = subprocess.run([chtest.CAMLHEAP, "census", "-p", str(p.pid), "--exact", "-q", "-o", out] + extra,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        if r.returncode != 0:  # only because it has just ended
            assert p.poll() is not None or not os.path.exists("/proc/%d/exe" % p.pid), r.stderr
            break
        h = json.load(open(out))
        assert _consistent(h["major_heap"]), h["major_heap"]
        if "retainers" in h:
            rt = h["retainers"]
            assert sum(g["retained"]["words"] for g in rt["groups"]) + rt["shared"]["words"] == \
                rt["reachable"]["words"] <= h["major_heap"]["live_words"]
            traces += 1
        walks += 1
        os.unlink(out)
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 0 and stdout == plain.stdout and stderr == plain.stderr, stderr
    for f in outputs:
        assert filecmp.cmp(os.path.join(saved, f), os.path.join(d, f), shallow=False), "%s differs" % f
    assert walks >= 2 and traces >= 1, (walks, traces)
