"""Per-site estimates against the fixtures' true allocation volumes, with
tolerances from the binomial variance (see chtest.py)."""
import re

import chtest
from chtest import check_binomial, record_launch, fixture


def _major(rate, n):
    rc, out, rep, err = record_launch([fixture("alloc_major"), "n=%d" % n], rate)
    assert rc == 0, "camlheap exit %d: %s" % (rc, err)
    truth = chtest.parse_truth(out)
    assert set(truth) == {"Alloc_major.site_a", "Alloc_major.site_b"}, out
    # (OCaml 5.1: all but unmarshalled blocks, which it gives no hook for)
    assert re.match(r"camlheap: executor ptrace; (every allocation is sampled|allocations are sampled in the minor "
                    r"heap)", rep.first_line()), rep.first_line()
    for site, (kind, words) in truth.items():
        check_binomial(rep.samples_at(site, "major"), words, rate, "%s at rate %g" % (site, rate))
    # the probes saw at least every word the fixture allocated at its sites
    observed = rep.observed_words("major")
    total = sum(w for _, w in truth.values())
    assert observed is not None and observed >= total, (observed, total)
    assert rep.samples_total()[2] == 0, "dropped events: %s" % rep.header.get("samples")
    return rep


def test_major_sites_rate_1e3():
    _major(1e-3, 7500)


def test_major_sites_rate_1e4():
    _major(1e-4, 7500)


def test_major_sites_rate_1e5():
    # 30 M words: about 300 samples, still a real test of unbiasedness
    _major(1e-5, 7500)


def test_custom_and_unmarshal_sites():
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("custom")], rate)
    assert rc == 0, "camlheap exit %d: %s" % (rc, err)
    truth = chtest.parse_truth(out)
    assert truth, "no TRUTH lines: %r" % out
    kinds = {"custom": "custom", "unmarshal": "unmarshal", "major": "major"}
    seen = set()
    for site, (kind, words) in truth.items():
        seen.add(kind)
        check_binomial(rep.samples_at(site, kinds[kind]), words, rate, "%s (%s)" % (site, kind))
    assert {"custom", "unmarshal"} <= seen, truth


def test_systhreads_sites():
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("threads")], rate)
    assert rc == 0, "camlheap exit %d: %s" % (rc, err)
    truth = chtest.parse_truth(out)
    assert len(truth) >= 4, out
    for site, (kind, words) in truth.items():
        check_binomial(rep.samples_at(site, kind), words, rate, site)


def test_major_agrees_with_in_process_memprof():
    """The same program runs Gc.Memprof itself at the same rate: both sample
    the same words independently, so per site the two counts n1, n2 are
    independent binomials of one mean; (n1 - n2) / sqrt(n1 + n2) is then
    approximately standard normal (two-sample test)."""
    import math
    import re
    rate = 1e-3
    rc, out, rep, err = record_launch([fixture("alloc_major"), "memprof=%g" % rate], rate)
    assert rc == 0, err
    mp = {m.group(1): int(m.group(2)) for m in re.finditer(r"^MEMPROF (\S+) (\d+)$", out, re.M)}
    assert set(mp) == {"Alloc_major.site_a", "Alloc_major.site_b"}, out
    for site, n2 in mp.items():
        n1 = rep.samples_at(site, "major")
        z = (n1 - n2) / math.sqrt(n1 + n2)
        assert abs(z) <= chtest.Z, "%s: camlheap %d vs Gc.Memprof %d samples (z = %.2f)" % (site, n1, n2, z)


def test_rate_one_samples_every_word():
    # lambda = 1: every word is a sample, so counts are exact (no variance);
    # the minor heap is left out (observe) so that the probes' exact word
    # counts cover every sample
    rc, out, rep, err = record_launch([fixture("exit_code")], 1.0, extra=["--executor", "observe"])
    assert rc == 3, err
    truth = chtest.parse_truth(out)
    assert rep.samples_at("Exit_code.site_a", "major") == truth["Exit_code.site_a"][1]
    observed = sum(rep.observed_words(k) for k in ("major", "custom", "unmarshal"))
    assert rep.samples_total()[0] == observed, (rep.samples_total(), observed)
