"""Memory outside the OCaml heap: bigarray data and custom blocks' declared
memory, by site, with whose data it is, followed to the block's death.

Fixture: tests/fixtures/outheap.ml (its header says what each site does;
words are bytes / 8, memtrace's convention for external memory: every byte
is sampled with probability lambda / 8).  A site's samples are binomial
over its words, so estimates are checked with check_binomial (Z = 4.5,
chtest.py) against the fixture's own counts; live samples at the end
against the words it still holds.
"""
import json
import os
import re
import subprocess

import chtest
from chtest import check_binomial, fixture, site_lines

RATE = 1e-3
MOD = "Outheap."


def _truth(stdout):
    """{(kind, site): words} from TRUTH lines (kind: bigarray or live)."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^TRUTH (bigarray|live) Outheap\.(\w+) (\d+)$", line)
        if m:
            out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def _json(cmd, rate=RATE, extra=()):
    d = chtest.tmpdir()
    out = os.path.join(d, "r.json")
    rc, so, se = chtest.run_record(["--rate", repr(rate), "--format", "json", "-o", out] + list(extra), cmd)
    assert rc == 0, se
    return so, json.load(open(out))


def _sites_at(j, site):
    """The sites whose stack has a frame of Outheap.<site> on its SITE line."""
    lines = site_lines(MOD + site)
    found = []
    for s in j["sites"]:
        if s["stack"] is None:
            continue
        fr = [j["frames"][i] for i in j["stacks"][s["stack"]]["frames"]]
        if any(f["function"] == MOD + site and f["line"] in lines for f in fr):
            found.append(s)
    return found


def test_bigarray_sites_and_whose_data():
    """Each bigarray site's estimate is binomial around the bytes it
    allocated, and says whose data it is: data caml_ba_alloc malloc'ed
    (owned), a view of another array's, a mapped file."""
    so, j = _json([fixture("outheap")])
    t = _truth(so)
    want = {"ba_kept": "owned", "ba_dropped": "owned", "ba_view": "view", "ba_mapped": "mapped"}
    for site, owner in want.items():
        # (the bigarray's own small custom block is a minor-heap sample there)
        found = [s for s in _sites_at(j, site) if s["kind"] == "bigarray"]
        assert found, "no bigarray site for %s" % site
        assert {s["bigarray_data"] for s in found} == {owner}, (site, [s["bigarray_data"] for s in found])
        check_binomial(sum(s["samples"] for s in found), t[("bigarray", site)], RATE, "bigarray " + site)
    # the owned total leaves views and mapped files out
    tot = j["totals"]
    assert tot["samples_by_kind"]["bigarray"] == sum(s["samples"] for s in j["sites"] if s["kind"] == "bigarray")


def test_bigarray_live_drops_to_zero_after_the_frees():
    """Dropped arrays are dead at the end (two Gc.full_major); kept ones
    are all alive: live samples binomial around the words still held."""
    so, j = _json([fixture("outheap")])
    t = _truth(so)
    kept = [s for s in _sites_at(j, "ba_kept") if s["kind"] == "bigarray"]
    dropped = [s for s in _sites_at(j, "ba_dropped") if s["kind"] == "bigarray"]
    assert sum(s["samples"] for s in dropped) > 100, "too few samples to say anything"
    assert sum(s["live"]["samples"] for s in dropped) == 0, [s["live"] for s in dropped]
    check_binomial(sum(s["live"]["samples"] for s in kept), t[("live", "ba_kept")], RATE, "live ba_kept")


def test_bigarray_text_report_says_whose_data():
    rc, so, rep, se = chtest.record_launch([fixture("outheap"), "n=100"], RATE)
    assert rc == 0, se
    alloc = rep.header.get("allocated", "")
    assert re.search(r"bigarray [\d.]+ [KMG]?i?B \(not counted: views of other memory [\d.]+ [KMG]?i?B, "
                     r"mapped files [\d.]+ [KMG]?i?B\)", alloc), alloc
    text = rep.text
    assert "bigarray data: owned" in text and "bigarray data: a view" in text and \
        "bigarray data: a memory-mapped file" in text, text[:3000]


def test_custom_blocks_carry_their_type_name():
    """A custom block's out-of-heap memory is shown with the identifier of
    its custom operations (the C stub's "camlheap.fixture"), and the
    estimate is still binomial around what the stub declared."""
    so, j = _json([fixture("custom"), "custom", "n=300"])
    truth = chtest.parse_truth(so)
    for site in ("custom_big", "custom_small"):
        found = [s for s in j["sites"] if s["kind"] == "custom" and s["stack"] is not None and
                 any(j["frames"][i]["function"] == "Custom." + site
                     for i in j["stacks"][s["stack"]]["frames"])]
        assert found, site
        assert {s.get("custom_type") for s in found} == {"camlheap.fixture"}, [s.get("custom_type") for s in found]
        check_binomial(sum(s["samples"] for s in found), truth["Custom." + site][1], RATE, site)


def test_bigarray_kind_survives_a_recording():
    """A recording keeps the bigarray kind and whose data it is:
    `camlheap report` on it shows the same sites."""
    d = chtest.tmpdir()
    rec = os.path.join(d, "outheap.ctf")
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "-o", rec], [fixture("outheap"), "n=100"])
    assert rc == 0, se
    out = os.path.join(d, "r.json")
    p = subprocess.run([chtest.CAMLHEAP, "report", "--format", "json", "-o", out, rec], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr
    j = json.load(open(out))
    kinds = {(s["kind"], s.get("bigarray_data")) for s in j["sites"] if s["kind"] == "bigarray"}
    assert kinds == {("bigarray", "owned"), ("bigarray", "view"), ("bigarray", "mapped")}, kinds


def test_target_unharmed_with_camlheap_and_when_it_is_killed():
    """The bigarray probes include uretprobes on caml_ba_alloc: the
    program's output and exit status are the same without camlheap, under a
    whole recording, and when camlheap is killed with -9 at random moments
    (while attaching, or with calls in flight)."""
    args = ["n=400", "drop=300"]
    ref_w = chtest.Waiting("outheap", args)
    ref_w.release()
    ref = ref_w.finish()
    assert ref[0] == 0 and "kept 400 views 400 mapped 20" in ref[1], ref
    rc, so, se = chtest.run_record(["--rate", repr(RATE), "-o", os.path.join(chtest.tmpdir(), "r.txt")],
                                   [fixture("outheap")] + args)
    assert (rc, so) == ref[:2], (rc, se)
    running_at_kill = chtest.kill9_runs("outheap", args, ref, RATE, 6)
    assert running_at_kill > 0, "the target always ended before camlheap was killed: a longer run is needed"


def test_views_and_mapped_files_are_left_out_of_the_live_totals():
    """A view's or a mapped file's memory is not the program's own heap
    allocation: the census's live total leaves them out (their sites still
    show their own live figures), as the allocated total does."""
    so, j = _json([fixture("outheap"), "n=200"])
    sites = j["sites"]
    own = sum(s["live"]["samples"] for s in sites if s.get("bigarray_data") not in ("view", "mapped"))
    views = sum(s["live"]["samples"] for s in sites if s.get("bigarray_data") in ("view", "mapped"))
    assert views > 0, "no live view or mapped file to leave out"
    assert j["census"]["live_samples"] == own, (j["census"]["live_samples"], own, views)
