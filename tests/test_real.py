"""A real program nobody on the team wrote: Debian's ocamlopt.opt (stripped
PIE, .dynsym only), and the collapsed-stack output."""
import filecmp
import os
import re
import shutil
import subprocess

import chtest
from chtest import check_binomial, record_launch, fixture, tmpdir

SRC = "/usr/lib/ocaml/camlinternalFormat.ml"


def _compile(d, wrap):
    """ocamlopt.opt -g -c on a copy of the stdlib's largest module (and its
    interface, compiled first) in directory d, optionally wrapped."""
    shutil.copy(SRC, d)
    shutil.copy(SRC + "i", d)
    cmd = ["/usr/bin/ocamlopt.opt", "-g", "-c", "camlinternalFormat.mli", "camlinternalFormat.ml"]
    return subprocess.run(wrap + cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)


def test_ocamlopt_outputs_identical_and_stacks_clean():
    # Same directory for both runs: -g records the build directory.
    d, saved = tmpdir(), tmpdir()
    plain = _compile(d, [])
    assert plain.returncode == 0, plain.stderr
    outputs = ["camlinternalFormat" + ext for ext in (".cmi", ".cmx", ".o")]
    for f in outputs:
        shutil.move(os.path.join(d, f), os.path.join(saved, f))
    report = os.path.join(tmpdir(), "ocamlopt.txt")
    prof = _compile(d, [chtest.CAMLHEAP, "record", "--rate", "1e-3", "--top", "50", "--by", "stack", "-o", report, "--"])
    assert prof.returncode == 0, prof.stderr
    # launch mode: the command's streams are its own (nothing of camlheap's on them)
    assert prof.stdout == plain.stdout and prof.stderr == plain.stderr, prof.stderr
    for f in outputs:
        assert filecmp.cmp(os.path.join(saved, f), os.path.join(d, f), shallow=False), \
            "%s differs with camlheap" % f
    rep = chtest.Report(open(report).read())
    total, events, dropped = rep.samples_total()
    assert total > 50 and dropped == 0, rep.header
    # the minor heap was sampled through young_limit writes, none went wrong
    assert rep.first_line().startswith("camlheap: executor ptrace; every allocation is sampled"), rep.first_line()
    minor, ex = rep.minor(), rep.executor()
    assert minor and minor["samples"] > 0.9 * total and minor["missed"] == 0, rep.header.get("minor")
    assert ex and ex["errors"] == 0 and ex["writes"] > 0, rep.header.get("executor")
    walks = rep.walks()
    assert walks["read error"] == 0 and walks["clean"] >= 0.98 * events, walks
    # symbols come from .dynsym and the frame tables' debuginfo: OCaml names
    names = [f["function"] for s in rep.sites for f in s["frames"]]
    assert any(re.match(r"^(Stdlib|Typecore|Typemod|Translcore|Compile|Optmain|Asmgen|Selectgen)\.", n)
               for n in names), names[:40]
    assert not any(n.startswith("0x") for n in names[:200]), [n for n in names if n.startswith("0x")][:5]


def test_collapsed_format():
    rate = 1e-3
    d = tmpdir()
    out = os.path.join(d, "chain.folded")
    rc, so, se = chtest.run_record(["--rate", repr(rate), "--format", "collapsed", "-o", out],
                                   [fixture("chain"), "chain"])
    assert rc == 0, se
    lines = open(out).read().splitlines()
    assert lines, "empty collapsed output"
    for line in lines:
        assert re.match(r"^\S+ \d+$", line), line
    h = [l for l in lines if l.split(" ")[0].endswith(";Chain.run_chain;Chain.f;Chain.g;Chain.h")]
    assert len(h) == 1, lines
    stack, value = h[0].rsplit(" ", 1)
    assert stack.startswith("caml_start_program;caml_program;"), stack
    # bytes = samples / rate * 8 exactly (integer rounding aside)
    samples = round(int(value) * rate / 8)
    assert abs(samples / rate * 8 - int(value)) <= 1, value
    truth = chtest.parse_truth(so)
    check_binomial(samples, truth["Chain.h"][1], rate, "Chain.h (collapsed)")
