"""Exact callstacks from the in-kernel unwinder, symbolized to file:line."""
import os
import re

import chtest
from chtest import check_binomial, record_launch, fixture, site_lines


def _only_site(rep, function):
    sites = rep.sites_at(function, "major")
    assert sites, "no site for %s in:\n%s" % (function, rep.text[:3000])
    return sites


def test_chain_exact_stack():
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("chain"), "chain"], rate)
    assert rc == 0, err
    sites = _only_site(rep, "Chain.h")
    assert len(sites) == 1, "Chain.h should have exactly one callstack, got %d" % len(sites)
    frames = sites[0]["frames"]
    names = [f["function"] for f in frames]
    # leaf first: h <- g <- f <- run_chain <- main <- module init <- caml_program <- caml_start_program
    assert names[:5] == ["Chain.h", "Chain.g", "Chain.f", "Chain.run_chain", "Chain.main"], names
    assert sites[0]["end"] is None, "walk did not end clean: %s" % sites[0]["end"]
    assert names[-1] == "caml_start_program" and "caml_program" in names, names
    want = site_lines("Chain.h")
    assert frames[0]["line"] in want and frames[0]["file"] and frames[0]["file"].endswith("chain.ml"), \
        (frames[0], want)
    # the fixture has DWARF: full paths (comp_dir + file), not bare names
    for f in frames[:5]:
        assert os.path.isabs(f["file"]) and os.path.exists(f["file"]), f
    truth = chtest.parse_truth(out)
    check_binomial(sites[0]["samples"], truth["Chain.h"][1], rate, "Chain.h")
    walks = rep.walks()
    assert walks["unknown pc"] == 0 and walks["read error"] == 0 and walks["depth limit"] == 0, walks


def test_runtime_startup_allocations_walk_clean():
    # At rate 1 every word is sampled, including the few the runtime's C
    # start-up allocates before caml_start_program (bottom_of_stack NULL).
    # Those walks are clean and empty, not "unknown pc" (CI once saw one
    # at rate 1e-3: a 1-in-200-runs failure of test_chain_exact_stack).
    rc, out, rep, err = record_launch([fixture("chain"), "chain", "n=3"], 1)
    assert rc == 0, err
    walks = rep.walks()
    assert walks["unknown pc"] == 0 and walks["read error"] == 0, walks
    assert "allocated by the runtime's C code before the OCaml program started" in rep.text, rep.text
    # and in collapsed output a line of one marker frame, without a space in it
    d = chtest.tmpdir()
    out = os.path.join(d, "c.folded")
    rc, so, se = chtest.run_record(["--rate", "1", "--format", "collapsed", "-o", out], [fixture("chain"), "chain", "n=3"])
    assert rc == 0, se
    lines = open(out).read().splitlines()
    assert all(re.match(r"^\S+ \d+$", l) for l in lines), [l for l in lines if not re.match(r"^\S+ \d+$", l)]
    assert any(l.startswith("[no_OCaml_frames] ") for l in lines), lines[:5]


def test_deep_recursion_over_600_frames():
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("chain"), "deep", "n=500"], rate)
    assert rc == 0, err
    sites = _only_site(rep, "Chain.deep_leaf")
    for s in sites:
        names = [f["function"] for f in s["frames"]]
        assert s["end"] is None, "deep walk ended early: %s after %d frames" % (s["end"], len(names))
        assert names.count("Chain.recurse") == 700, names.count("Chain.recurse")
        assert names[0] == "Chain.deep_leaf" and names[-1] == "caml_start_program", (names[:3], names[-3:])
    truth = chtest.parse_truth(out)
    check_binomial(sum(s["samples"] for s in sites), truth["Chain.deep_leaf"][1], rate, "Chain.deep_leaf")


def test_depth_limit_is_reported():
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("chain"), "deep", "n=200"], rate, extra=["--max-depth", "128"])
    assert rc == 0, err
    sites = _only_site(rep, "Chain.deep_leaf")
    for s in sites:
        assert s["end"] == "depth limit", s["end"]
        assert len(s["frames"]) == 128, len(s["frames"])
    assert rep.walks()["depth limit"] >= len(sites)


def test_callback_from_finaliser():
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("chain"), "callback"], rate)
    assert rc == 0, err
    sites = _only_site(rep, "Chain.in_finaliser")
    crossed = 0
    for s in sites:
        names = [f["function"] for f in s["frames"]]
        assert s["end"] is None, "finaliser walk ended early: %s: %s" % (s["end"], names)
        assert names[-1] == "caml_start_program", names
        # the finaliser runs from C (caml_final_do_calls -> caml_callback):
        # the walk crosses the callback frame back into the OCaml code that
        # triggered the GC, down to the program's entry
        if names.count("caml_start_program") >= 2 and "Chain.run_callback" in names:
            crossed += 1
    assert crossed == len(sites), "%d of %d finaliser stacks crossed the callback" % (crossed, len(sites))
    truth = chtest.parse_truth(out)
    check_binomial(sum(s["samples"] for s in sites), truth["Chain.in_finaliser"][1], rate, "Chain.in_finaliser")
