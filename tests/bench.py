#!/usr/bin/env python3
"""make bench: the target's wall time without camlheap and with it, side by
side in one run, as ratios; plus camlheap's own CPU time, peak RSS and
attach time (read from its report header).

Workloads: the major-allocation-heavy fixture bench_major, and Debian's
ocamlopt.opt compiling a generated module (tests/gen_module.py).  Runs are
interleaved (plain, 1e-5, 1e-4, plain, ...) so that drift in the machine's
speed hits every configuration alike; medians of REPEAT runs.
Environment: REPEAT (default 5), ITEMS (generated module size, default 1000).
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chtest  # noqa: E402

REPEAT = int(os.environ.get("REPEAT", "5"))
RATES = ["1e-5", "1e-4"]


def timed(cmd, cwd=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit("bench: %s failed (%d): %s" % (cmd, p.returncode, p.stderr.decode()[-2000:]))
    return dt


def header_numbers(report):
    text = open(report).read()
    cpu = re.search(r"camlheap used ([\d.]+) s of CPU, peak RSS ([\d.]+) MiB", text)
    att = re.search(r"attach took ([\d.]+) s", text)
    smp = re.search(r"^samples\s+(\d+)", text, re.M)
    dur = re.search(r"^duration\s+([\d.]+) s", text, re.M)
    return float(cpu.group(1)), float(cpu.group(2)), float(att.group(1)), int(smp.group(1)), float(dur.group(1))


def bench(name, cmd, cwd=None, before=None):
    runs = {"plain": []}
    extra = {r: [] for r in RATES}
    for r in RATES:
        runs[r] = []
    d = tempfile.mkdtemp(prefix="camlheap-bench-")
    for i in range(REPEAT):
        for conf in ["plain"] + RATES:
            if before:
                before()
            if conf == "plain":
                runs[conf].append(timed(cmd, cwd))
            else:
                rep = os.path.join(d, "r.txt")
                runs[conf].append(timed([chtest.CAMLHEAP, "record", "--rate", conf, "-o", rep, "--"] + cmd, cwd))
                extra[conf].append(header_numbers(rep))
    base = statistics.median(runs["plain"])
    print("\n%s  (median of %d, interleaved)" % (name, REPEAT))
    # "target s": the target's own run time under camlheap (the report's
    # duration: probes attached -> target exit); "end-to-end s" adds
    # camlheap's set-up (attach) and its report writing.
    print("  %-10s %9s %7s %13s %9s %11s %10s %9s" % ("config", "target s", "ratio", "end-to-end s", "samples",
                                                      "camlheap", "peak RSS", "attach"))
    print("  %-10s %9.3f %7s %13.3f" % ("plain", base, "1.000", base))
    for r in RATES:
        w = statistics.median(runs[r])
        cpu = statistics.median(x[0] for x in extra[r])
        rss = max(x[1] for x in extra[r])
        att = statistics.median(x[2] for x in extra[r])
        smp = statistics.median(x[3] for x in extra[r])
        tgt = statistics.median(x[4] for x in extra[r])
        print("  %-10s %9.3f %7.3f %13.3f %9d %9.3f s %6.1f MiB %7.3f s" % (
            "rate " + r, tgt, tgt / base, w, smp, cpu, rss, att))
    spread = (max(runs["plain"]) - min(runs["plain"])) / base
    print("  (plain runs spread %.1f %% of the median: ratios closer to 1 than that are noise)" % (100 * spread))


def main():
    if os.geteuid() != 0:
        sys.exit("bench: needs root (BPF)")
    bench("bench_major fixture (direct major allocations)", [chtest.fixture("bench_major")])
    d = tempfile.mkdtemp(prefix="camlheap-bench-ocamlopt-")
    with open(os.path.join(d, "big.ml"), "w") as f:
        subprocess.run([sys.executable, os.path.join(HERE, "gen_module.py"), os.environ.get("ITEMS", "1000")],
                       stdout=f, check=True)

    def clean():
        for ext in (".cmi", ".cmx", ".o"):
            try:
                os.unlink(os.path.join(d, "big" + ext))
            except FileNotFoundError:
                pass
    bench("ocamlopt.opt -g -c big.ml (Debian 4.13.1, generated module)", ["/usr/bin/ocamlopt.opt", "-g", "-c",
                                                                           "big.ml"], cwd=d, before=clean)


if __name__ == "__main__":
    main()
