"""The text report leads with allocation points (kind, type and the
allocation's source position), each with its callers and heaviest
callstacks, then a function table (flat and cum., as pprof -top); whole
callstacks stay behind --by stack.  Checked on a fixture with known truths
and on two real Debian programs (ocamlopt.opt, menhir): the first ten
entries cover what grouping the JSON's sites by allocation point gives,
no two share a point, and every figure is the sum of its callstacks'."""
import json
import os
import re
import shutil
import subprocess
import tarfile

import chtest
from chtest import check_binomial, fixture, tmpdir



def _camlheap(args, cwd=None, timeout=600):
    p = subprocess.run([chtest.CAMLHEAP] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p.stdout.decode(errors="replace")


def _record(cmd, rate, cwd=None):
    path = os.path.join(tmpdir(), "run.ctf")
    _camlheap(["record", "--rate", repr(rate), "-o", path, "--"] + cmd, cwd=cwd)
    return path


def point_text(a, site):
    """A point as the report writes it, from a JSON site's allocation."""
    fn, f, line = a.get("function"), a.get("file"), a.get("line")
    if site["kind"] == "malloc" and site.get("caller"):
        # a malloc point is the OCaml code that called into C, via the libc function
        c = site["caller"]
        via = fn
        fn, f, line = c.get("function"), c.get("file"), c.get("line")
    else:
        via = None
    if fn is None:
        text = "[no OCaml frames]" if site["stack"] is not None else "[stack frames lost]"
    elif f and line:
        text = "%s (%s:%d)" % (fn, f, line)
    elif f:
        text = "%s (%s)" % (fn, f)
    else:
        text = fn
    if via:
        text += " -> %s" % via
    if site["kind"] == "custom" and site.get("custom_type"):
        text += '  custom "%s"' % site["custom_type"]
    elif site["kind"] == "bigarray":
        text += "  bigarray %s" % site["bigarray_data"]
    elif site["kind"] == "malloc" and site.get("outside_ocaml"):
        text += "  outside OCaml"
    elif site["kind"] == "malloc" and site["stack"] is not None and not site.get("caller"):
        text += "  runtime start-up or exit (no OCaml frame)"
    return text


def _by_point(js):
    """{(kind, point text): samples} over the JSON's sites, and the total
    the shares are of (bigarray views and mapped files left out)."""
    out, total = {}, 0
    for s in js["sites"]:
        k = (s["kind"], point_text(s["allocation"], s))
        out[k] = out.get(k, 0) + s["samples"]
        if not (s["kind"] == "bigarray" and s.get("bigarray_data") != "owned"):
            total += s["samples"]
    return out, total


def _check_points(path):
    """The default report of recording `path` against its JSON: returns
    (Report, json, {point: samples})."""
    rep = chtest.Report(_camlheap(["report", path]))
    js = json.loads(_camlheap(["report", path, "--format", "json"]))
    points, total = _by_point(js)
    rows = rep.point_rows
    assert len(rows) == min(20, len(points)), (len(rows), len(points))
    keys = [(r["kind"], r["point"]) for r in rows]
    assert len(set(keys)) == len(keys), "two entries share one allocation point: %s" % keys
    # the first ten cover what grouping by allocation point gives
    theory = sum(sorted(points.values(), reverse=True)[:10]) / total * 100
    assert rows[min(10, len(rows)) - 1]["sum"] >= theory - 0.1, (rows[:10], theory)
    # ... which is at least what the first ten whole callstacks held
    stacks = {}
    for s in js["sites"]:
        stacks[(s["kind"], s["stack"], s["alloc_index"])] = stacks.get((s["kind"], s["stack"], s["alloc_index"]),
                                                                       0) + s["samples"]
    assert theory >= sum(sorted(stacks.values(), reverse=True)[:10]) / total * 100 - 1e-9
    # every entry: the sum of its sites, its share of the total
    for r, k in zip(rows, keys):
        assert k in points, (k, sorted(points)[:20])
        assert abs(r["share"] - 100.0 * points[k] / total) <= 0.051, (r, points[k], total)
    for pt in rep.points:
        k = (pt["kind"], pt["at"])
        assert pt["samples"] == points[k], (pt, points[k])
        assert sum(s["samples"] for s in pt["stacks"]) <= pt["samples"]
        for s in pt["stacks"]:
            frames = [re.sub(r"( \[inlined\])?( \[x\d+\])?$", "", f) for f in s["frames"]]
            if " -> " in pt["at"]:  # malloc: the OCaml caller, then the libc function
                caller, via = pt["at"].split(" -> ", 1)
                assert len(frames) > 1 and frames[1] == caller and via.startswith(frames[0].split(" ")[0]), pt
            else:
                assert frames and pt["at"].startswith(frames[0]), pt
        assert all(a["samples"] >= b["samples"] for a, b in zip(pt["stacks"], pt["stacks"][1:])), pt
    # every frame named as the text names it (a recording symbolized each leaf with its Comballoc index)
    assert not [f for f in js["frames"] if f.get("function", "").startswith("0x")], \
        [f for f in js["frames"] if f.get("function", "").startswith("0x")][:5]
    # the JSON's own points: the same sums, every site in one
    ap = js["allocation_points"]
    assert sorted(i for p in ap for i in p["sites"]) == list(range(len(js["sites"])))
    for p in ap:
        assert p["samples"] == sum(js["sites"][i]["samples"] for i in p["sites"]), p
    # functions: flat is the sum of the function's points, cum at least flat
    flat = {}
    for p in ap:
        flat[p["function"]] = flat.get(p["function"], 0) + p["samples"]
    for f in js["functions"]:
        assert f["flat_samples"] == flat.get(f["function"], 0), f
        assert f["cum_samples"] >= f["flat_samples"], f
    for f in rep.functions:
        assert abs(f["flat_pct"] - 100.0 * flat.get(f["function"], 0) / total) <= 0.051, f
    return rep, js, points


def test_fixture_points_callers_and_functions_match_the_truth():
    rate = 1e-3
    d = tmpdir()
    path = os.path.join(d, "run.ctf")
    rc, so, se = chtest.run_record(["--rate", repr(rate), "-o", path], [fixture("points")])
    assert rc == 0, se
    truth = {}
    for line in so.splitlines():
        kind, name, words = line.split()[1:]
        truth[name] = int(words)
    rep, js, points = _check_points(path)
    cell = [p for p in rep.points if p["at"].startswith("Points.cell (")]
    own = [p for p in rep.points if p["at"].startswith("Points.own (")]
    assert len(cell) == 1 and len(own) == 1, [p["at"] for p in rep.points]
    cell, own = cell[0], own[0]
    check_binomial(cell["samples"], truth["Points.cell"], rate, "point cell")
    check_binomial(own["samples"], truth["Points.own"], rate, "point own")
    # one callstack per caller, each with its own truth
    assert cell["nstacks"] == 3 and [c[1].split(" ")[0] for c in cell["callers"]] == \
        ["Points.via_a", "Points.via_b", "Points.via_c"], cell
    for s in cell["stacks"]:
        caller = s["frames"][1].split(" ")[0]
        check_binomial(s["samples"], truth[caller], rate, "callstack through %s" % caller)
    assert sum(s["samples"] for s in cell["stacks"]) == cell["samples"]
    # functions: the callers allocate nothing themselves (flat 0), all of cell's under them (cum)
    fns = {f["function"]: f for f in js["functions"]}
    for caller in ("Points.via_a", "Points.via_b", "Points.via_c"):
        assert fns[caller]["flat_samples"] == 0, fns[caller]
        check_binomial(fns[caller]["cum_samples"], truth[caller], rate, "cum of %s" % caller)
    assert fns["Points.cell"]["flat_samples"] == cell["samples"] == fns["Points.cell"]["cum_samples"]
    # the operator: a point and a function of its own, named as OCaml writes it in pprof
    op = [p for p in rep.points if p["at"].startswith("Points.(+>) (")]
    assert len(op) == 1, [p["at"] for p in rep.points]
    check_binomial(op[0]["samples"], truth["Points.op"], rate, "point ( +> )")
    pb = os.path.join(d, "run.pb.gz")
    _camlheap(["report", path, "--format", "pprof", "-o", pb])
    top = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=alloc_space", pb], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=300).stdout.decode()
    rows = {}
    for l in top.splitlines():
        m = re.match(r"^\s*([\d.]+[kMG]?B)\s+\S+\s+\S+\s+\S+\s+\S+\s+(.*)$", l)
        if m:
            rows[m.group(2)] = m.group(1)
    assert "Points.( +> )" in rows and "Points." not in rows, top
    mib = float(rows["Points.( +> )"][:-2]) * {"kB": 1 / 1024, "MB": 1, "GB": 1024}[rows["Points.( +> )"][-2:]]
    ours = fns["Points.(+>)"]["flat_bytes"]["estimate"] / 2 ** 20
    assert abs(mib - ours) <= 0.01 * ours, (rows["Points.( +> )"], ours)
    traces = subprocess.run(["go", "tool", "pprof", "-traces", pb], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            timeout=300).stdout.decode()
    assert "Points.( +> )" in traces and "Points.cell" in traces, traces[:2000]
    # the SVG: flamegraph.pl would turn "<>" into "()" and its zoomed labels drop the first "(...)"
    svg = os.path.join(d, "run.svg")
    _camlheap(["report", path, "--format", "svg", "-o", svg])
    text = open(svg, encoding="utf-8").read()
    titles = re.findall(r"<title>([^<]*)</title>", text)
    assert any(t.startswith("Points.(+\u203a) (") for t in titles), [t for t in titles if "Points" in t][:10]
    assert '.replace(/ \\([^()]*\\)$/,"")' in text and '.replace(/\\([^(]*\\)/,"")' not in text
    # --by stack: the callstacks whose leaf is the point add up to it
    whole = chtest.Report(_camlheap(["report", path, "--by", "stack", "--top", "0"]))
    assert not whole.points and whole.sites
    assert sum(s["samples"] for s in whole.sites if s["kind"] == "minor" and s["frames"] and
               s["frames"][0]["function"] == "Points.cell") == cell["samples"]
    # --top 0: every point
    everything = chtest.Report(_camlheap(["report", path, "--top", "0"]))
    assert len(everything.point_rows) == len(points) and abs(everything.point_rows[-1]["sum"] - 100) < 0.051


def test_ocamlopt_first_ten_points_hold_what_grouping_by_point_gives():
    d = tmpdir()
    src = "/usr/lib/ocaml/camlinternalFormat.ml"
    shutil.copy(src, d)
    shutil.copy(src + "i", d)
    _camlheap(["record", "--rate", "1e-4", "-o", os.path.join(d, "ignored.ctf"), "--", "/usr/bin/ocamlopt.opt",
               "-g", "-c", "camlinternalFormat.mli"], cwd=d)
    path = _record(["/usr/bin/ocamlopt.opt", "-g", "-c", "camlinternalFormat.ml"], 1e-4, cwd=d)
    rep, js, points = _check_points(path)
    # the point is what says where the memory goes: far more than a stack
    assert rep.point_rows[9]["sum"] > 20, rep.point_rows[:10]


def _parser_mly(d):
    """OCaml 4.13.1's parsing/parser.mly, from Debian's ocaml-source (the
    release compiler-libs has, for menhir --infer)."""
    with tarfile.open("/usr/src/ocaml-source-4.13.1.tar") as outer:
        with outer.extractfile("ocaml-4.13.1/ocaml_4.13.1.orig.tar.gz") as gz, tarfile.open(fileobj=gz) as src:
            with src.extractfile("ocaml-4.13.1/parsing/parser.mly") as f, \
                    open(os.path.join(d, "parser.mly"), "wb") as out:
                out.write(f.read())


def test_menhir_first_ten_points_hold_what_grouping_by_point_gives():
    """menhir 20220210 (Debian) on OCaml's own grammar, as the workload
    runs it (--infer spawns ocamlc -i, a short child left untraced)."""
    menhir = shutil.which("menhir")
    assert menhir, "menhir is in the Makefile's DEB_PKGS"
    d = tmpdir()
    _parser_mly(d)
    os.mkdir(os.path.join(d, "o"))
    path = _record([menhir, "--lalr", "--explain", "--dump", "--infer", "--ocamlc", "ocamlc -I +compiler-libs",
                    "--base", "o/parser", "parser.mly"], 1e-4, cwd=d)
    rep, js, points = _check_points(path)
    assert rep.point_rows[9]["sum"] > 20, rep.point_rows[:10]
    # a Stdlib container's point names the program's code that calls it
    stdlib = [p for p in rep.points if p["at"].startswith("Stdlib") and p["callers"]]
    assert stdlib and not any(c[1].startswith("Stdlib") for p in stdlib for c in p["callers"]), stdlib[:2]
    # the command line as a shell would take it back
    assert rep.header["command"].endswith("--infer --ocamlc 'ocamlc -I +compiler-libs' --base o/parser parser.mly"), \
        rep.header["command"]


def test_collapsed_never_mixes_memory_outside_the_heap_into_heap_bytes():
    """Bigarray data, custom blocks' declared bytes and malloc sit under
    root frames of their own in collapsed stacks (and so in the SVG), each
    adding up to its kind's estimate; heap lines carry no such root."""
    rate = 1e-3
    d = tmpdir()
    path = os.path.join(d, "run.ctf")
    rc, so, se = chtest.run_record(["--rate", repr(rate), "--malloc", "-o", path], [fixture("outheap"), "n=100"])
    assert rc == 0, se
    # a malloc point is the OCaml code that called into C, never the libc function alone
    rep, js, points = _check_points(path)
    assert any(r["kind"] == "malloc" and " -> " in r["point"] for r in rep.point_rows), rep.point_rows
    coll = _camlheap(["report", path, "--format", "collapsed"]).splitlines()
    roots = {"[outside_the_heap:_bigarray_data]": "bigarray", "[outside_the_heap:_custom_blocks_declare]": "custom",
             "[outside_the_heap:_malloc]": "malloc"}
    sums = {k: 0 for k in ("heap", "bigarray", "custom", "malloc")}
    lines = {k: 0 for k in sums}
    for line in coll:
        stack, value = line.rsplit(" ", 1)
        kind = roots.get(stack.split(";")[0], "heap")
        assert "[outside_the_heap" not in stack.split(";", 1)[-1] or kind != "heap", line
        sums[kind] += int(value)
        lines[kind] += 1
    by_kind = js["totals"]["samples_by_kind"]
    want = {"heap": by_kind["minor"] + by_kind["major"] + by_kind["unmarshal"], "bigarray": by_kind["bigarray"],
            "custom": by_kind["custom"], "malloc": by_kind["malloc"]}
    for k in sums:
        # each line is rounded to whole bytes
        assert abs(sums[k] - want[k] / rate * 8) <= lines[k], (k, sums[k], want[k] / rate * 8)
    assert want["bigarray"] > 0 and want["malloc"] > 0 and want["heap"] > 0, want


def test_command_line_reads_back_in_a_shell_whatever_its_bytes():
    """The recording's command line is valid UTF-8 (its metadata is JSON:
    a stray byte once emptied the whole header) and types back the same
    argv in bash: quotes, spaces, a newline, bytes that are not UTF-8."""
    args = [fixture("points"), "n=10", "a b", "it's", "x\ny", b"\xff\xfe".decode("latin-1"), ""]
    argv = [a.encode("latin-1") if a == "\xff\xfe" else a.encode() for a in args]
    d = tmpdir()
    path = os.path.join(d, "run.ctf")
    p = subprocess.run([chtest.CAMLHEAP.encode(), b"record", b"--rate", b"1e-3", b"-o", path.encode(), b"--"] + argv,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 2, p.stderr  # the fixture's own usage error, passed through
    rep = chtest.Report(_camlheap(["report", path]))
    assert "OCaml ?" not in rep.header.get("target", "") and rep.header.get("executor"), rep.header
    cmd = rep.header["command"]
    back = subprocess.run(["bash", "-c", "a=(%s); printf '%%s\\0' \"${a[@]}\"" % cmd],
                          stdout=subprocess.PIPE, timeout=30).stdout
    assert back.split(b"\0")[:-1] == argv, (cmd, back)
