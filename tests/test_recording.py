"""The recording file (a memtrace trace, format v3) and `camlheap report`.

Round trip: the writer logs every event it puts (CAMLHEAP_TRACE_LOG), the
project's own reader prints every event it reads (`camlheap dump-trace`);
the two must be identical, and `camlheap report FILE` must print the very
report `record` computed from the live profile (CAMLHEAP_ALSO_TEXT).  The
file itself is checked against the format's rules packet by packet.  The
writer and reader are also fuzzed against each other (tests/fuzz_memtrace.c).
"""
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import time
import xml.etree.ElementTree as ET
import zlib

import chtest
from chtest import fixture

MAGIC = 0xC1FC1FC1
RATE = 1e-3


def _record(args, env_extra=None, name="t.ctf"):
    d = chtest.tmpdir()
    path = os.path.join(d, name)
    env = dict(os.environ)
    env.update(env_extra or {})
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "--verbose", "-o", path], args, env=env)
    assert rc == 0, se
    return d, path, so, se


def _camlheap(args, check=True):
    p = subprocess.run([chtest.CAMLHEAP] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if check:
        assert p.returncode == 0, (args, p.stderr.decode())
    return p


def _packets(path):
    """Walk the packet headers: [(size_bytes, t_begin, t_end, version, pid, domain, id_begin, id_end)]."""
    data = open(path, "rb").read()
    out, off = [], 0
    while off < len(data):
        magic, bits, tb, te, _flush, ver, pid, dom, _vix, _vp, _vv, ib, ie = struct.unpack_from(
            "<IIQQIHQHHHQQQ", data, off)
        assert magic == MAGIC, "packet at %d: magic %#x" % (off, magic)
        assert bits % 8 == 0 and 68 <= bits // 8 <= 32768, "packet at %d: %d bits" % (off, bits)
        out.append((bits // 8, tb, te, ver, pid, dom, ib, ie))
        off += bits // 8
    assert off == len(data)
    return out


def test_recording_round_trip_every_event():
    d = chtest.tmpdir()
    log, also = os.path.join(d, "writer.log"), os.path.join(d, "also.txt")
    d, path, so, se = _record([fixture("leak"), "n=3"], {"CAMLHEAP_TRACE_LOG": log, "CAMLHEAP_ALSO_TEXT": also})
    assert "recording written to" in se, se
    dump = _camlheap(["dump-trace", path]).stdout.decode().splitlines()
    assert dump[0].startswith("trace_info rate 0.001 word_size 64 pid "), dump[0]
    assert "context camlheap-recording 1 {" in dump[0]
    written = open(log).read().splitlines()
    assert len(written) > 1000, len(written)
    assert dump[1:] == written, next((i, a, b) for i, (a, b) in enumerate(zip(dump[1:], written)) if a != b) \
        if len(dump) - 1 == len(written) else (len(dump) - 1, len(written))
    # the report from the file is the report of the run
    report = _camlheap(["report", path]).stdout.decode()
    assert report == open(also).read()
    rep = chtest.Report(report)
    # events agree with the report's totals
    allocs = [l.split() for l in written if l.split()[1] == "alloc"]
    samples = sum(int(a[6]) for a in allocs)
    m = re.search(r"^samples\s+(\d+) in (\d+) sampled blocks", report, re.M)
    assert m and int(m.group(1)) == samples and int(m.group(2)) == len(allocs), (m and m.group(0), samples)
    collected = {l.split()[2] for l in written if l.split()[1] == "collect"}
    live = [a for a in allocs if a[2] not in collected]
    m = re.search(r"^live\s+at the end: .* in (\d+) sampled blocks", report, re.M)
    assert m and int(m.group(1)) == len(live), (m and m.group(0), len(live))
    assert rep.points and rep.point_rows, report
    # packets: within the format's limits, times and ids in order
    pk = _packets(path)
    pid = int(dump[0].split()[6])
    assert pk[0][1] == pk[0][2] and pk[0][6] == pk[0][7] == 0  # trace info packet
    last_t, next_id = pk[0][1], 0
    for size, tb, te, ver, ppid, dom, ib, ie in pk:
        assert ver == 3 and ppid == pid and dom == 0
        assert last_t <= tb <= te and te - tb < 30_000_000, (last_t, tb, te)
        assert ib == next_id and ie >= ib, (ib, ie, next_id)
        last_t, next_id = te, ie
    assert next_id == len(allocs)


def test_record_output_name_picks_the_format():
    d = chtest.tmpdir()
    txt, ctf = os.path.join(d, "r.txt"), os.path.join(d, "r.trace")
    for out in (txt, ctf):
        rc, so, se = chtest.run_record(["--rate", "1e-3", "-o", out], [fixture("leak"), "n=1"])
        assert rc == 0, se
    assert open(txt).read().startswith("camlheap: executor ")
    assert struct.unpack("<I", open(ctf, "rb").read(4))[0] == MAGIC
    # --format wins over the name
    js = os.path.join(d, "x.ctf")
    rc, so, se = chtest.run_record(["--rate", "1e-3", "--format", "json", "-o", js], [fixture("leak"), "n=1"])
    assert rc == 0 and json.load(open(js))["format"] == "camlheap-report", se


def _collapsed_total(text):
    return sum(int(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l)


def test_report_formats_agree():
    d, path, so, se = _record([fixture("leak"), "n=3"])
    js = json.loads(_camlheap(["report", path, "--format", "json"]).stdout)
    total_b = js["totals"]["samples"] / js["run"]["rate"] * 8
    coll = _camlheap(["report", path, "--format", "collapsed"]).stdout.decode()
    # collapsed rounds each line to whole bytes
    assert abs(_collapsed_total(coll) - total_b) <= len(coll.splitlines()), (_collapsed_total(coll), total_b)
    live = _camlheap(["report", path, "--format", "collapsed", "--value", "live"]).stdout.decode()
    peak = _camlheap(["report", path, "--format", "collapsed", "--value", "peak"]).stdout.decode()
    assert 0 < _collapsed_total(live) <= _collapsed_total(peak) <= _collapsed_total(coll) + len(coll.splitlines())
    import test_outputs
    pb = os.path.join(d, "p.pb.gz")
    _camlheap(["report", path, "--format", "pprof", "-o", pb])
    prof = test_outputs.decode_pprof(pb)
    strings = prof["string_table"]
    assert [strings[t["type"][0]] for t in prof["sample_type"]] == \
        [t for t, _ in test_outputs.PPROF_TYPES]
    assert abs(sum(s["value"][1] for s in prof["sample"]) - total_b) <= len(prof["sample"])
    assert len(prof["mapping"]) == 1 and strings[prof["mapping"][0]["build_id"][0]]
    fids = {f["id"][0] for f in prof["function"]}
    for loc in prof["location"]:
        assert loc["line"] and all(l["function_id"][0] in fids for l in loc["line"])


def _report_samples(args):
    text = _camlheap(["report"] + args + ["--format", "json"]).stdout
    js = json.loads(text)
    return sum(s["samples"] for s in js["sites"]), js


def test_report_window_focus_ignore_min_samples():
    d, path, so, se = _record([fixture("leak"), "n=4"])
    total, js = _report_samples([path])
    # the window's zero is the end of the attach (start_unix_ns); cut half
    # way between the first and the last allocation (an attach that took
    # long, as happens on a loaded machine, must not move the cut)
    dump = _camlheap(["dump-trace", path]).stdout.decode().splitlines()
    times = [int(l.split()[0]) for l in dump[1:] if l.split()[1] == "alloc"]
    zero_us = js["run"]["start_unix_ns"] // 1000
    mid = round(((times[0] + times[-1]) / 2 - zero_us) / 1e6, 6)
    a, _ = _report_samples([path, "--to", repr(mid)])
    b, _ = _report_samples([path, "--from", repr(mid + 1e-6)])
    assert a + b == total and a > 0 and b > 0, (a, b, total)
    foc, jf = _report_samples([path, "--focus", "churn_major"])
    ign, ji = _report_samples([path, "--ignore", "churn_major"])
    assert foc + ign == total and foc > 0, (foc, ign, total)
    for s in jf["sites"]:
        assert any("churn_major" in (jf["frames"][i].get("function") or "") for i in jf["stacks"][s["stack"]]["frames"])
    text = _camlheap(["report", path, "--min-samples", "50", "--top", "1000", "--by", "stack"]).stdout.decode()
    rep = chtest.Report(text)
    assert rep.sites and all(s["samples"] >= 50 for s in rep.sites), text
    assert re.search(r"^samples\s+%d in" % total, text, re.M), text
    assert "selection   sites with >= 50 samples shown" in text
    # live at --to: blocks that died later are still alive then
    early = _camlheap(["report", path, "--to", repr(mid), "--value", "live", "--format", "collapsed"]).stdout
    assert _collapsed_total(early.decode()) > 0


def _png_pixels(path):
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) with the standard library."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6), (depth, ctype)
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    prev, pixels, i = bytearray(stride), [], 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels.extend(bytes(line[k:k + 3]) for k in range(0, stride, bpp))
        prev = line
    return pixels


def test_report_svg_flame_graph_renders():
    d, path, so, se = _record([fixture("leak"), "n=3"])
    svg = os.path.join(d, "f.svg")
    _camlheap(["report", path, "--format", "svg", "-o", svg])
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text for t in root.iter(ns + "title") if t.text]
    names = {re.sub(r" \([\d,]+ bytes, [\d.]+%\)$", "", t) for t in titles}
    script = "".join(s.text or "" for s in root.iter(ns + "script"))
    for fn in ("function zoom(", "function unzoom(", "function search("):
        assert fn in script, fn  # click to zoom, search
    text = _camlheap(["report", path, "--top", "5", "--by", "stack"]).stdout.decode()
    tops = re.findall(r"^#\d+ .*\n(?:    .*\n)?      (\S+)", text, re.M)
    assert len(tops) == 5, text
    for fn in tops:
        assert fn in names, (fn, sorted(names)[:20])
    live = os.path.join(d, "live.svg")
    _camlheap(["report", path, "--format", "svg", "--value", "live", "-o", live])
    assert "bytes alive at the end" in open(live).read()
    # it renders: a headless Chromium screenshot that is not blank
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (make deps)"
    png = os.path.join(d, "shot.png")
    prof = chtest.tmpdir()
    subprocess.run(["timeout", "120", chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--hide-scrollbars", "--no-first-run", "--user-data-dir=" + prof,
                    "--window-size=1200,800", "--screenshot=" + png, "file://" + svg],
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=150)
    assert os.path.exists(png), "chromium wrote no screenshot"
    px = _png_pixels(png)
    colours = len(set(px))
    ink = sum(1 for p in px if p != b"\xff\xff\xff") / len(px)
    assert colours >= 8 and ink >= 0.01, (colours, ink)


def test_diff_on_recordings():
    _, a, _, _ = _record([fixture("leak"), "n=3"])
    _, b, _, _ = _record([fixture("leak"), "n=3"])
    _, c, _, _ = _record([fixture("leak"), "n=3", "x2"])
    import test_outputs
    # the same program twice: nothing flagged (at the suite's level,
    # test_outputs.SUITE_ALPHA)
    text, flagged = test_outputs._diff(a, b)
    assert not flagged, text
    text, flagged = test_outputs._diff(a, c)
    assert len(flagged) == 1 and "Leak.churn_major" in flagged[0], text


def test_report_bad_input_is_refused_and_loses_nothing():
    d, path, so, se = _record([fixture("leak"), "n=1"])
    out = os.path.join(d, "keep.txt")
    with open(out, "w") as f:
        f.write("precious\n")
    data = open(path, "rb").read()
    cases = {}
    cases["text"] = b"camlheap: executor ptrace\n" * 10
    cases["empty"] = b""
    pk = _packets(path)
    second = pk[0][0]
    bad = bytearray(data)
    bad[second] ^= 0xFF  # the second packet's magic
    cases["magic"] = bytes(bad)
    bad = bytearray(data)
    struct.pack_into("<H", bad, 28, 9)  # version 9
    cases["version"] = bytes(bad)
    for name, content in cases.items():
        p = os.path.join(d, name + ".ctf")
        with open(p, "wb") as f:
            f.write(content)
        r = _camlheap(["report", p, "-o", out], check=False)
        err = r.stderr.decode()
        assert r.returncode == 2 and "camlheap:" in err, (name, r.returncode, err)
        assert open(out).read() == "precious\n", name
    assert "not a CTF packet" in _camlheap(["report", os.path.join(d, "magic.ctf")], check=False).stderr.decode()
    assert "v009" in _camlheap(["report", os.path.join(d, "version.ctf")], check=False).stderr.decode()
    # a file cut in its last packet: the complete packets are read, and said
    cut = os.path.join(d, "cut.ctf")
    with open(cut, "wb") as f:
        f.write(data[:len(data) - pk[-1][0] // 2])
    r = _camlheap(["report", cut], check=False)
    assert r.returncode == 0 and b"truncated" in r.stderr, r.stderr
    # --value live on a recording without the census
    d2 = chtest.tmpdir()
    nc = os.path.join(d2, "nc.ctf")
    rc, so, se = chtest.run_record(["--rate", "1e-3", "--no-census", "-o", nc], [fixture("leak"), "n=1"])
    assert rc == 0, se
    r = _camlheap(["report", nc, "--value", "live"], check=False)
    assert r.returncode == 2 and b"no live figures" in r.stderr, r.stderr


def test_killed_recorder_leaves_no_file_and_the_target_runs_on():
    d = chtest.tmpdir()
    path = os.path.join(d, "t.ctf")
    w = chtest.Waiting("leak", ["n=40"])
    rec = subprocess.Popen([chtest.CAMLHEAP, "record", "-p", str(w.pid), "--rate", "1e-3", "-o", path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    err = b""
    while b"probes attached" not in err and time.time() < deadline:
        err += os.read(rec.stderr.fileno(), 4096)
    w.release()
    time.sleep(1.0)
    rec.send_signal(signal.SIGKILL)
    rec.wait()
    assert os.listdir(d) == [], os.listdir(d)  # the event body was an unlinked file
    rc, out, err = w.finish(timeout=300)
    assert rc == 0, err
    # the same output as without camlheap (the fixture prints what it allocated and keeps)
    plain = chtest.Waiting("leak", ["n=40"])
    plain.release()
    prc, pout, perr = plain.finish(timeout=300)
    assert prc == 0 and out == pout, (out[-500:], pout[-500:])


def test_fuzz_memtrace_writer_against_reader():
    exe = os.path.join(chtest.BUILD, "tests", "fuzz_memtrace")
    seeds = chtest.tmpdir()
    r = random.Random(11)
    for i, n in enumerate([256, 4096, 65536, 1 << 20]):
        with open(os.path.join(seeds, "seed%d" % i), "wb") as f:
            f.write(bytes(r.getrandbits(8) for _ in range(n)))
    # the seeds as they are: deep stacks, many locations a packet, many packets
    p = subprocess.run([exe] + sorted(os.path.join(seeds, s) for s in os.listdir(seeds)),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, FUZZ_STATS="1"),
                       timeout=600)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0, err[-3000:]
    stats = [tuple(int(x) for x in m) for m in
             re.findall(r"stats: \d+ bytes, (\d+) packets, (\d+) allocs, deepest backtrace (\d+) codes, (\d+) loc", err)]
    assert max(s[0] for s in stats) >= 100, stats
    assert max(s[2] for s in stats) > 255, stats
    assert max(s[3] for s in stats) > 128, stats
    # then mutations, bounded
    corpus = chtest.tmpdir()
    for s in os.listdir(seeds)[:3]:
        shutil.copy(os.path.join(seeds, s), corpus)
    p = subprocess.run([exe, "-runs=1500", "-seed=1", "-max_len=65536", "-artifact_prefix=" + corpus + "/", corpus],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=900)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]


def test_report_reads_a_trace_camlheap_did_not_write():
    # a trace with no camlheap metadata (as memtrace writes them), from the
    # fuzz target's writer: every allocation counted, unknown codes named
    # by address, live = never collected
    exe = os.path.join(chtest.BUILD, "tests", "fuzz_memtrace")
    d = chtest.tmpdir()
    seed, trace = os.path.join(d, "seed"), os.path.join(d, "plain.ctf")
    r = random.Random(5)
    with open(seed, "wb") as f:
        f.write(bytes(r.getrandbits(8) for _ in range(1 << 18)))
    p = subprocess.run([exe, seed], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                       env=dict(os.environ, FUZZ_SAVE=trace))
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    events = [l.split() for l in _camlheap(["dump-trace", trace]).stdout.decode().splitlines()[1:]]
    allocs = {e[2]: int(e[6]) for e in events if e[1] == "alloc"}
    collected = {e[2] for e in events if e[1] == "collect"}
    assert len(allocs) > 50, len(allocs)
    js = json.loads(_camlheap(["report", trace, "--format", "json"]).stdout)
    assert js["totals"]["samples"] == sum(allocs.values())
    assert js["census"]["live_samples"] == sum(v for k, v in allocs.items() if k not in collected)
    text = _camlheap(["report", trace, "--top", "3"]).stdout.decode()
    assert text.startswith("camlheap: a memtrace trace written inside the program"), text[:200]


def test_report_edges_from_the_review():
    # rate 1: the runtime's first allocations have no OCaml frame; read
    # back they are still that, not "frames lost"
    d = chtest.tmpdir()
    path, also = os.path.join(d, "c.ctf"), os.path.join(d, "also.txt")
    rc, so, se = chtest.run_record(["--rate", "1", "-o", path], [fixture("chain"), "n=100"],
                                   env=dict(os.environ, CAMLHEAP_ALSO_TEXT=also))
    assert rc == 0, se
    text = _camlheap(["report", path]).stdout.decode()
    assert text == open(also).read()
    assert "frames were lost" not in text
    # the printed duration as --to keeps every allocation (one time base)
    js = json.loads(_camlheap(["report", path, "--format", "json"]).stdout)
    kept = json.loads(_camlheap(["report", path, "--format", "json", "--to", repr(js["run"]["duration_s"])]).stdout)
    assert kept["totals"]["samples"] == js["totals"]["samples"], (kept["totals"]["samples"], js["totals"]["samples"])
    huge = json.loads(_camlheap(["report", path, "--format", "json", "--to", "1e300"]).stdout)
    assert huge["totals"]["samples"] == js["totals"]["samples"]
    # a pipe
    p = subprocess.run([chtest.CAMLHEAP, "report", "-"], stdin=open(path, "rb"), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert p.returncode == 0 and p.stdout.decode() == text, p.stderr
    cat = subprocess.Popen(["cat", path], stdout=subprocess.PIPE)
    p = subprocess.run([chtest.CAMLHEAP, "report", "-"], stdin=cat.stdout, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    cat.wait()
    assert p.returncode == 0 and p.stdout.decode() == text, p.stderr
    # a format other than text on a launched command's stdout would mix with its output
    rc, so, se = chtest.run_record(["--rate", "1e-3", "--format", "json"], [fixture("leak"), "n=1"])
    assert rc == 2 and "give -o FILE" in se, (rc, se)


def test_budget_recording_reports_as_the_run_did():
    # under --budget, each event's samples were kept with probability 2^-k:
    # the file carries k (alloc annotation bits 48..52) and memtrace's
    # n_samples at the trace's rate, so the report read back (objects
    # included) is the run's own
    d = chtest.tmpdir()
    also = os.path.join(d, "also.txt")
    path = os.path.join(d, "b.ctf")
    env = dict(os.environ, CAMLHEAP_ALSO_TEXT=also)
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "--budget", "1000", "-o", path],
                                   [fixture("alloc_major"), "n=150000"], env=env)
    assert rc == 0, se
    report = _camlheap(["report", path]).stdout.decode()
    assert report == open(also).read()
    assert re.search(r"^budget\s+lambda in force: .*\(2\^-[1-9]", report, re.M), report[:1500]
    dump = _camlheap(["dump-trace", path]).stdout.decode()
    assert re.search(r"^\S+ alloc ", dump, re.M)
