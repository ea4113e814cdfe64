"""The same checks on other OCaml toolchains (tests/toolchains.py builds them
once into ~/.cache/camlheap/toolchains): the fixtures are compiled with each
toolchain's ocamlopt (make BUILD=build/vVERSION OCAMLOPT=...), then a
selection of the sampling, minor-heap, census, stack and recording tests
runs against them unchanged.  One test per (toolchain, check), named
test_v<version>__<module>__<check>.

4.14.0 and 4.14.2: supported like 4.13.1 (same runtime layout, checked
offsets).  4.12.0 and 4.12.1: the same, with young_ptr and young_limit
swapped in the domain state; a core matrix (CHECKS_CORE).  Every 4.x
release also runs the minor heap's identical-output and kill -9 checks.
5.1.0 (npm's ocaml@5.1.4), 5.2.0, 5.3.0 and 5.4.1: every domain's minor
heap, direct major, custom and (5.3, 5.4) unmarshalled allocations, stacks across
effect fibers, the census (compaction from 5.2); 5.1 and 5.2 have no
Gc.Memprof to compare with.  The OCaml 5-only fixtures
(tests/fixtures/ocaml5: fibers, domains) are built for each.  For every toolchain the domain-state
offsets camlheap uses are checked against that release's own headers.
"""
import os
import shutil
import subprocess

import chtest
import toolchains
import test_census as _census
import test_dynlink as _dynlink
import test_exact as _exact
import test_malloc as _malloc
import test_minor as _minor
import test_outheap as _outheap
import test_recording as _recording
import test_retainers as _retainers
import test_sampling as _sampling
import test_stacks as _stacks
import test_top as _top
import test_window as _window

CHECKS = [
    (_sampling, "test_major_sites_rate_1e3"),
    (_sampling, "test_custom_and_unmarshal_sites"),
    (_sampling, "test_major_agrees_with_in_process_memprof"),
    (_minor, "test_minor_sites_rate_1e4"),
    (_minor, "test_minor_exact_at_rate_one"),
    (_minor, "test_minor_agrees_with_in_process_memprof"),
    (_minor, "test_minor_budget_thins_samples_and_estimates_stay_unbiased"),
    (_census, "test_live_at_end_matches_the_fixtures_own_count"),
    (_census, "test_fates_agree_with_in_process_memprof"),
    (_census, "test_compaction_marks_blocks_relocated"),
    (_stacks, "test_chain_exact_stack"),
    (_stacks, "test_deep_recursion_over_600_frames"),
    (_stacks, "test_callback_from_finaliser"),
    (_recording, "test_recording_round_trip_every_event"),
    (_outheap, "test_bigarray_sites_and_whose_data"),
    (_outheap, "test_bigarray_live_drops_to_zero_after_the_frees"),
    (_malloc, "test_malloc_sites_estimates_and_leaf_function"),
    (_malloc, "test_runtime_heap_is_not_counted_twice"),
    (_malloc, "test_resident_memory_breakdown"),
    (_top, "test_batch_estimates_match_the_fixtures_allocation"),
    (_top, "test_batch_rates_of_equal_sites_agree_within_their_bounds"),
    (_window, "test_heap_under_way_at_attach_is_not_in_the_window"),
]

_built = {}


def _fixtures_for(name):
    """Build the fixtures with toolchain `name`; returns their directory."""
    if name not in _built:
        try:
            prefix = toolchains.ensure(name)
        except toolchains.Unavailable as e:
            raise chtest.Skip("OCaml %s cannot be had: %s" % (name, e))
        build = os.path.join(chtest.BUILD, "v" + name)
        targets = ["fixtures"] + (["fixtures5"] if name.startswith("5.") else [])
        p = subprocess.run(["make", "-s", "BUILD=" + build, "OCAMLOPT=" + os.path.join(prefix, "bin", "ocamlopt")]
                           + targets, cwd=chtest.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=1800)
        assert p.returncode == 0, "fixtures with OCaml %s: %s" % (name, p.stdout.decode(errors="replace")[-3000:])
        out = subprocess.run([os.path.join(build, "fixtures", "chain"), "n=1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, timeout=60)
        assert out.returncode == 0, out.stderr
        _built[name] = os.path.join(build, "fixtures")
    return _built[name]


def _make(name, mod, check):
    def run():
        fixtures = _fixtures_for(name)
        saved = chtest.FIXTURES
        chtest.FIXTURES = fixtures
        try:
            # the fixture really is that version's: its report says so
            getattr(mod, check)()
        finally:
            chtest.FIXTURES = saved
    run.__name__ = "test_v%s__%s__%s" % (name.replace(".", "_").replace("-", "_"), mod.__name__.replace("test_", "", 1), check[5:])
    return run


def _runtime_version_is_reported(name):
    fixtures = _fixtures_for(name)
    saved = chtest.FIXTURES
    chtest.FIXTURES = fixtures
    try:
        rc, out, rep, err = chtest.record_launch([chtest.fixture("leak"), "n=1"], 1e-3)
    finally:
        chtest.FIXTURES = saved
    assert rc == 0, err
    assert "(OCaml %s)" % name in rep.text.splitlines()[1], rep.text.splitlines()[1]
    # fully supported: the minor heap is sampled, not left read-only
    assert rep.first_line().startswith("camlheap: executor ptrace; every allocation is sampled"), rep.first_line()


# 4.x releases beside Debian's 4.13.1: the whole 4.x selection on 4.14.0
# and 4.14.2; a core matrix on 4.12.0 and 4.12.1 (each check of CHECKS_CORE
# also runs on the others), so that `make test` stays within CI's time.
RELEASES4 = ("4.12.0", "4.12.1", "4.14.0", "4.14.2")
CHECKS_CORE = {
    "test_major_sites_rate_1e3", "test_custom_and_unmarshal_sites", "test_major_agrees_with_in_process_memprof",
    "test_minor_sites_rate_1e4", "test_minor_exact_at_rate_one", "test_minor_agrees_with_in_process_memprof",
    "test_live_at_end_matches_the_fixtures_own_count", "test_fates_agree_with_in_process_memprof",
    "test_chain_exact_stack", "test_callback_from_finaliser", "test_bigarray_sites_and_whose_data",
    "test_malloc_sites_estimates_and_leaf_function", "test_batch_estimates_match_the_fixtures_allocation",
    "test_heap_under_way_at_attach_is_not_in_the_window",
}
# checks not in CHECKS that every 4.x release also runs
CHECKS4_EXTRA = [
    (_minor, "test_minor_outputs_identical_with_and_without_camlheap"),
    (_minor, "test_minor_kill9_never_harms_target"),
    (_minor, "test_c_allocations_deep_in_a_recursion_trap_once_a_sample"),
    (_exact, "test_exact_census_equals_gc_stat"),
    (_exact, "test_exact_census_consistent_while_compacting"),
    (_exact, "test_retainers_global_hashtbl"),
    (_exact, "test_retainers_stack_frame_named_by_its_function"),
    (_exact, "test_retainers_frame_of_another_thread"),
    (_exact, "test_retainers_c_global_root"),
    (_exact, "test_retainers_ephemeron_data_is_not_retained_strongly"),
    (_exact, "test_retainers_fields_retain_their_structure_and_name_the_stdlib_containers"),
    (_retainers, "test_paths_of_the_leak_fixture"),
]

for _name in RELEASES4:
    def _f(_name=_name):
        _runtime_version_is_reported(_name)
    _f.__name__ = "test_v%s__runtime_version_is_reported" % _name.replace(".", "_")
    globals()[_f.__name__] = _f
    for _mod, _check in CHECKS + CHECKS4_EXTRA:
        if _name.startswith("4.12") and _check not in CHECKS_CORE and (_mod, _check) not in CHECKS4_EXTRA:
            continue
        _f = _make(_name, _mod, _check)
        globals()[_f.__name__] = _f
del _mod, _check, _f, _name


# OCaml 5: the same checks, unchanged, except those of the census (not on 5.x
# yet) and the comparisons with an in-process Gc.Memprof (none in 5.1; on
# 5.3 camlheap leaves a program's own Gc.Memprof alone).
CHECKS5 = [
    (_sampling, "test_major_sites_rate_1e3", ("5.1.0", "5.2.0", "5.3.0", "5.4.1", "5.3.0-fp")),
    (_sampling, "test_custom_and_unmarshal_sites", ("5.3.0", "5.4.1",)),
    (_sampling, "test_systhreads_sites", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_sampling, "test_rate_one_samples_every_word", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_sampling, "test_major_agrees_with_in_process_memprof", ("5.3.0", "5.4.1",)),  # 5.1 has no Gc.Memprof
    (_stacks, "test_chain_exact_stack", ("5.1.0", "5.2.0", "5.3.0", "5.4.1", "5.3.0-fp")),
    (_stacks, "test_runtime_startup_allocations_walk_clean", ("5.1.0", "5.2.0", "5.3.0", "5.4.1", "5.3.0-fp")),
    (_stacks, "test_deep_recursion_over_600_frames", ("5.1.0", "5.2.0", "5.3.0", "5.4.1", "5.3.0-fp")),
    (_stacks, "test_depth_limit_is_reported", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_stacks, "test_callback_from_finaliser", ("5.1.0", "5.2.0", "5.3.0", "5.4.1", "5.3.0-fp")),
    (_minor, "test_minor_exact_at_rate_one", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_minor, "test_minor_outputs_identical_with_and_without_camlheap", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_minor, "test_minor_kill9_never_harms_target", ("5.2.0", "5.3.0", "5.4.1")),
    (_census, "test_live_at_end_matches_the_fixtures_own_count", ("5.1.0", "5.2.0", "5.3.0", "5.4.1", "5.3.0-fp")),
    (_census, "test_collapsed_live_value", ("5.3.0", "5.4.1",)),
    (_census, "test_ring_buffer_overflow_loses_no_death", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_census, "test_full_tracking_set_is_reported", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_census, "test_compaction_marks_blocks_relocated", ("5.2.0", "5.3.0", "5.4.1")),  # 5.1 never moves blocks
    (_census, "test_compaction_off_keeps_blocks_followed", ("5.2.0", "5.3.0", "5.4.1")),
    (_census, "test_census_finds_the_leak", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_census, "test_census_wait_major_ends_by_itself", ("5.3.0", "5.4.1",)),
    (_census, "test_census_attaching_to_a_busy_program", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_dynlink, "test_plugin_loaded_while_recording", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_dynlink, "test_plugin_frames_known_before_its_code_runs", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_dynlink, "test_recording_names_plugin_frames", ("5.3.0", "5.4.1",)),
    (_outheap, "test_bigarray_sites_and_whose_data", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_outheap, "test_bigarray_live_drops_to_zero_after_the_frees", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_outheap, "test_custom_blocks_carry_their_type_name", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_malloc, "test_malloc_sites_estimates_and_leaf_function", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_malloc, "test_malloc_live_drops_to_zero_after_the_frees", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_malloc, "test_malloc_from_a_c_thread_has_no_ocaml_stack", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_malloc, "test_runtime_heap_is_not_counted_twice", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_malloc, "test_resident_memory_breakdown", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_malloc, "test_target_unharmed_with_malloc_probes_and_when_killed", ("5.3.0", "5.4.1",)),
    (_top, "test_batch_estimates_match_the_fixtures_allocation", ("5.3.0", "5.4.1",)),  # 5.1 has no Gc.Memprof
    (_top, "test_batch_rates_of_equal_sites_agree_within_their_bounds", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_top, "test_tmux_keys_drive_the_view_and_q_leaves_the_program_unaffected", ("5.3.0", "5.4.1",)),
    (_window, "test_heap_under_way_at_attach_is_not_in_the_window", ("5.1.0", "5.2.0", "5.3.0", "5.4.1")),
    (_window, "test_one_window_with_camlheap_slowed_under_load", ("5.3.0",)),
    (_exact, "check_exact_refuses_ocaml5", ("5.3.0",)),
    (_retainers, "check_retainers_refuses_ocaml5", ("5.3.0",)),
]

for _mod, _check, _versions in CHECKS5:
    for _v in _versions:
        _f = _make(_v, _mod, _check)
        globals()[_f.__name__] = _f
del _mod, _check, _versions, _v, _f


def _with_fixtures(name):
    fixtures = _fixtures_for(name)
    saved = chtest.FIXTURES
    chtest.FIXTURES = fixtures
    return saved


# -- the domain-state layout, against each release's own headers ------------

OFFSETS_C = r"""
#define CAML_INTERNALS
#include <stdio.h>
#include <stddef.h>
#include <caml/version.h>
#include <caml/mlvalues.h>
#include <caml/domain_state.h>
#if OCAML_VERSION_MAJOR >= 5
#include <caml/fiber.h>
#include <caml/finalise.h>
#else
#include <caml/major_gc.h>
#endif
#define P(f) printf(#f " %zu\n", offsetof(caml_domain_state, f));
/* 4.x names the fields _name (runtime/caml/domain_state.h) */
#define P4(f) printf(#f " %zu\n", offsetof(caml_domain_state, _##f));
int main(void)
{
#if OCAML_VERSION_MAJOR >= 5
    P(young_ptr) P(young_start) P(young_end) P(young_trigger) P(current_stack) P(action_pending) P(id)
    P(major_slice_epoch) P(requested_external_interrupt) P(final_info)
    printf("final_todo_head %zu\n", offsetof(struct caml_final_info, todo_head));
#if OCAML_VERSION_MINOR >= 3
    P(memprof) P(memprof_young_trigger)
#elif OCAML_VERSION_MINOR == 2
    P(memprof_young_trigger)
#endif
    printf("stack_sp %zu\nstack_handler %zu\nhandler_parent %zu\n", offsetof(struct stack_info, sp),
           offsetof(struct stack_info, handler), offsetof(struct stack_handler, parent));
#else
    P4(young_limit) P4(young_ptr) P4(young_start) P4(young_end) P4(young_alloc_start) P4(young_alloc_end)
    P4(young_trigger) P4(bottom_of_stack) P4(last_return_address) P4(stat_minor_collections)
    P4(stat_major_collections) P4(stat_compactions) P4(requested_major_slice) P4(requested_minor_gc)
    P4(stat_heap_wsz) P4(stat_heap_chunks)
    printf("chunk_head %zu\n", sizeof(heap_chunk_head));
#endif
    return 0;
}
"""


def _header_offsets(libdir):
    d = chtest.tmpdir()
    src, exe = os.path.join(d, "offsets.c"), os.path.join(d, "offsets")
    with open(src, "w") as f:
        f.write(OFFSETS_C)
    p = subprocess.run(["cc", "-I", libdir, "-o", exe, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode == 0, p.stdout.decode()[-3000:]
    out = subprocess.run([exe], check=True, stdout=subprocess.PIPE).stdout.decode()
    return {k: int(v) for k, v in (l.split() for l in out.splitlines())}


def _camlheap_constants():
    import re
    text = open(os.path.join(chtest.ROOT, "include", "camlheap.h")).read()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define (CH_OCAML\w+) (\d+)\s*(?:/\*.*\*/)?\s*$", text, re.M)}


def _check_offsets(libdir, major_minor):
    have = _header_offsets(libdir)
    ch = _camlheap_constants()
    if major_minor[0] >= 5:
        want = {"young_ptr": ch["CH_OCAML5_YOUNG_PTR"], "young_start": ch["CH_OCAML5_YOUNG_START"],
                "young_end": ch["CH_OCAML5_YOUNG_END"], "current_stack": ch["CH_OCAML5_CURRENT_STACK"],
                "young_trigger": ch["CH_OCAML5_YOUNG_TRIGGER"], "action_pending": ch["CH_OCAML5_ACTION_PENDING"],
                "id": {(5, 1): ch["CH_OCAML51_ID"], (5, 2): ch["CH_OCAML52_ID"],
                       (5, 4): ch["CH_OCAML54_ID"]}.get(major_minor, ch["CH_OCAML53_ID"]),
                "stack_sp": ch["CH_OCAML5_STACK_SP"], "stack_handler": ch["CH_OCAML5_STACK_HANDLER"],
                "handler_parent": ch["CH_OCAML5_HANDLER_PARENT"]}
        v = "%d%d" % major_minor
        want["major_slice_epoch"] = ch["CH_OCAML%s_SLICE_EPOCH" % v]
        want["requested_external_interrupt"] = ch["CH_OCAML%s_EXT_INTERRUPT" % v]
        want["final_info"] = ch["CH_OCAML%s_FINAL_INFO" % v]
        want["final_todo_head"] = ch["CH_OCAML5_FINAL_TODO_HEAD"]
        if major_minor in ((5, 3), (5, 4)):
            v = "%d%d" % major_minor
            want["memprof"] = ch["CH_OCAML%s_MEMPROF" % v]
            want["memprof_young_trigger"] = ch["CH_OCAML%s_MEMPROF_YOUNG_TRIGGER" % v]
        if major_minor == (5, 2):
            want["memprof_young_trigger"] = ch["CH_OCAML52_MEMPROF_YOUNG_TRIGGER"]
    else:
        want = {k.lower(): ch["CH_OCAML4_" + k] for k in (
            "YOUNG_LIMIT", "YOUNG_PTR", "YOUNG_START", "YOUNG_END", "YOUNG_ALLOC_START", "YOUNG_ALLOC_END",
            "YOUNG_TRIGGER", "BOTTOM_OF_STACK", "LAST_RETURN_ADDRESS", "STAT_MINOR_COLLECTIONS",
            "STAT_MAJOR_COLLECTIONS", "STAT_COMPACTIONS", "REQUESTED_MAJOR_SLICE", "REQUESTED_MINOR_GC",
            "STAT_HEAP_WSZ", "STAT_HEAP_CHUNKS", "CHUNK_HEAD")}
        if major_minor >= (4, 14):
            want["chunk_head"] = ch["CH_OCAML414_CHUNK_HEAD"]
        if major_minor <= (4, 12):
            want["young_limit"] = ch["CH_OCAML412_YOUNG_LIMIT"]
            want["young_ptr"] = ch["CH_OCAML412_YOUNG_PTR"]
    assert have == want, "camlheap.h disagrees with %s: %s" % (
        libdir, {k: (want.get(k), have.get(k)) for k in set(have) | set(want) if want.get(k) != have.get(k)})


def test_v4_13__offsets_match_the_runtime_headers():
    _check_offsets("/usr/lib/ocaml", (4, 13))


def test_v4_14_0__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("4.14.0"), (4, 14))


def _toolchain_lib(name):
    try:
        return os.path.join(toolchains.ensure(name), "lib", "ocaml")
    except toolchains.Unavailable as e:
        raise chtest.Skip("OCaml %s cannot be had: %s" % (name, e))


def test_v4_12_0__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("4.12.0"), (4, 12))


def test_v4_12_1__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("4.12.1"), (4, 12))


def test_v4_14_2__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("4.14.2"), (4, 14))


def test_v5_1_0__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("5.1.0"), (5, 1))


def test_v5_2_0__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("5.2.0"), (5, 2))


def test_v5_3_0__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("5.3.0"), (5, 3))


def test_v5_4_1__offsets_match_the_runtime_headers():
    _check_offsets(_toolchain_lib("5.4.1"), (5, 4))


# -- OCaml 5 fixtures ------------------------------------------------------------

def _json_record(cmd, rate, extra=()):
    import json
    d = chtest.tmpdir()
    out = os.path.join(d, "r.json")
    rc, so, se = chtest.run_record(["--rate", repr(rate), "--format", "json", "-o", out] + list(extra), cmd)
    assert rc == 0, se
    return so, json.load(open(out)), se


def _json_sites(j, function, lines=None):
    """(site, frames) of the sites whose leaf frame is `function` (on one of `lines`)."""
    out = []
    for s in j["sites"]:
        if s["stack"] is None:
            continue
        st = j["stacks"][s["stack"]]
        fr = [j["frames"][i] for i in st["frames"]]
        if fr and fr[0]["function"] == function and (lines is None or fr[0]["line"] in lines):
            out.append((s, st, fr))
    return out


def _fibers_stacks(name):
    saved = _with_fixtures(name)
    try:
        rate = 1e-3
        so, j, se = _json_record([chtest.fixture("fibers"), "n=600"], rate)
    finally:
        chtest.FIXTURES = saved
    truth = chtest.parse_truth(so)
    stacks = {l.split()[1]: l.split()[2:] for l in so.splitlines() if l.startswith("STACK ")}
    assert set(stacks) == {"in_fiber", "deep", "main_stack"}, so[-2000:]
    for site in ("in_fiber", "deep", "main_stack"):
        fn = "Fibers." + site
        found = _json_sites(j, fn, chtest.site_lines(fn))
        assert found, "no %s site in %s" % (fn, [(s["kind"], j["frames"][j["stacks"][s["stack"]]["frames"][0]]["function"])
                                               for s in j["sites"] if s["stack"] is not None])
        # the runtime's own walk (Printexc.get_callstack, taken at the site):
        # the frames with a name, innermost first; its first frame is the
        # site's function at the get_callstack line, the rest must match
        # camlheap's frames exactly, function and line
        want = [(w.rsplit("@", 1)[0], int(w.rsplit("@", 1)[1])) for w in stacks[site]]
        samples = 0
        for s, st, fr in found:
            assert st["walk"] == "clean", (site, st["walk"])
            named = [(f["function"], f["line"]) for f in fr if f["file"] and not f["function"].startswith("caml_")]
            assert named[0][0] == want[0][0] and named[1:] == want[1:], \
                "%s: camlheap %s\n  runtime %s" % (site, named[:12], want[:12])
            samples += s["samples"]
        chtest.check_binomial(samples, truth[fn][1], rate, fn)
    # the fiber sites really crossed fiber boundaries: caml_runstack is the
    # base frame of every fiber, followed by the scheduler's frames
    s, st, fr = _json_sites(j, "Fibers.in_fiber")[0]
    names = [f["function"] for f in fr]
    assert "caml_runstack" in names and names.index("Fibers.scheduler") > names.index("caml_runstack"), names
    deep = _json_sites(j, "Fibers.deep", chtest.site_lines("Fibers.deep"))[0][2]
    assert sum(1 for f in deep if f["function"] == "Fibers.deep") == 301, len(deep)


def test_v5_1_0__fibers_exact_stacks_across_effect_handlers():
    _fibers_stacks("5.1.0")


def test_v5_2_0__fibers_exact_stacks_across_effect_handlers():
    _fibers_stacks("5.2.0")


def test_v5_3_0__fibers_exact_stacks_across_effect_handlers():
    _fibers_stacks("5.3.0")


def test_v5_4_1__fibers_exact_stacks_across_effect_handlers():
    _fibers_stacks("5.4.1")


def test_v5_3_0_fp__fibers_exact_stacks_across_effect_handlers():
    """With frame pointers the first frame of a stack starts 16 bytes
    above its saved sp, not 8 (runtime/caml/stack.h First_frame)."""
    _fibers_stacks("5.3.0-fp")


def _domains(name):
    """Four domains, one spinning without allocating: every site's
    estimate, in the minor heaps and in the major heap, is binomial around
    its truth, each site is attributed to the domain that really ran it, no
    minor sample point was passed untrapped except after a write not made
    for a backup thread, and the program ends normally (no stop-the-world
    was lost to a young_limit write)."""
    saved = _with_fixtures(name)
    try:
        rate = 1e-3
        so, j, se = _json_record([chtest.fixture("domains"), "n=4000"], rate, ["--by-domain"])
    finally:
        chtest.FIXTURES = saved
    truth = chtest.parse_truth(so)
    doms = {l.split()[1]: int(l.split()[2]) for l in so.splitlines() if l.startswith("DOMAIN ")}
    assert len(truth) == 6 and "spins 1" in so, so
    assert j["run"]["executor"] == "ptrace", j["run"]
    for fn, (kind, words) in truth.items():
        site = fn.split(".", 1)[1]
        found = [f for f in _json_sites(j, fn) if f[0]["kind"] == kind]
        assert found, fn
        assert {s["domain"] for s, _, _ in found} == {doms[site]}, (fn, [s["domain"] for s, _, _ in found], doms)
        chtest.check_binomial(sum(s["samples"] for s, _, _ in found), words, rate, fn)
    # a point can be passed only after a write that was not made because the
    # thread that reset the limit was a domain's backup thread (it blocks
    # SIGURG: it acts for a domain blocked in a system call)
    assert j["run"]["minor"]["missed"] <= j["run"]["minor"]["not_armed_sigurg_blocked"], j["run"]["minor"]
    by_dom = j["totals"]["samples_by_domain"]
    assert {int(d) for d in by_dom} >= set(doms.values()), by_dom


def test_v5_1_0__four_domains_sampled_each_in_its_own():
    _domains("5.1.0")


def test_v5_2_0__four_domains_sampled_each_in_its_own():
    _domains("5.2.0")


def test_v5_3_0__four_domains_sampled_each_in_its_own():
    _domains("5.3.0")


def test_v5_4_1__four_domains_sampled_each_in_its_own():
    _domains("5.4.1")


def test_v5_3_0_fp__four_domains_sampled_each_in_its_own():
    _domains("5.3.0-fp")


def _drop_all(name):
    """Domains that allocate minor, promoted and major blocks, drop them all,
    then three Gc.full_major (): every sampled block is found dead, none of
    unknown fate.  A block allocated by one domain after another had set up
    a minor collection (caml_minor_collections_count already up) but before
    it joined was judged stale and counted live for ever: ~10 % of young
    samples with 4 domains and a 4 k-word minor heap (852 blocks, 6.5 MiB
    of false leak at n=500000)."""
    saved = _with_fixtures(name)
    try:
        for doms, minor_heap in ((4, "s=4k"), (2, "s=4k"), (4, None)):
            env = dict(os.environ)
            if minor_heap:
                env["OCAMLRUNPARAM"] = minor_heap
            d = chtest.tmpdir()
            out = os.path.join(d, "r.json")
            rc, so, se = chtest.run_record(["--rate", "1e-3", "--live", "--format", "json", "-o", out],
                                           [chtest.fixture("dropall"), "domains=%d" % doms, "n=100000"], env=env)
            assert rc == 0 and "DROPPED %d" % doms in so, (rc, so, se)
            import json
            j = json.load(open(out))
            c = j["census"]
            what = "%d domains, %s: %s" % (doms, minor_heap or "default minor heap", c)
            # promotions: many with a 4 k-word minor heap, a few with the default 256 k
            assert c["born_in_minor_heap"] > 500 and c["promoted"] > (20 if minor_heap else 0), what
            assert c["not_followed"] == 0, what
            # nothing of the domains' own is live; what is (a sample or two)
            # is the program's globals, allocated at start-up (Stdlib modules)
            work = _json_sites(j, "Dropall.work")
            assert sum(x["samples"] for x, _, _ in work) > 300 * doms, what  # ~470 a domain
            assert sum(x["live"]["samples"] for x, _, _ in work) == 0, (what, [x["live"] for x, _, _ in work])
    finally:
        chtest.FIXTURES = saved


def _handoff(name):
    """Stop-the-world requests that must reach a domain the moment it stops
    allocating (tests/fixtures/ocaml5/handoff.ml): the worker's young_limit
    is written all the time (rate 1e-2) with no other thread stopped, while
    the main domain requests minor collections without pause; an interrupt
    erased by a write would leave the worker spinning at its sample point
    and both domains waiting for each other (the run would not end).  Every
    write is made with the flags read around it, none refused for good
    reason lost: the program ends, its output as without camlheap."""
    saved = _with_fixtures(name)
    try:
        d = chtest.tmpdir()
        out = os.path.join(d, "r.json")
        try:
            rc, so, se = chtest.run_record(["--rate", "1e-2", "--executor", "ptrace", "--format", "json", "-o", out],
                                           [chtest.fixture("handoff"), "n=100"], timeout=240)
        except subprocess.TimeoutExpired:
            raise AssertionError("handoff did not end within 240 s (an interrupt lost?)")
    finally:
        chtest.FIXTURES = saved
    assert rc == 0 and so == "ROUNDS 100\n", (rc, so, se)
    import json
    j = json.load(open(out))
    ex = j["run"]["ptrace"]
    assert ex["rechecks"] > 100 and ex["freezes"] == 0 and ex["errors"] == 0, ex


def test_v5_1_0__stop_the_world_reaches_a_domain_written_without_a_freeze():
    _handoff("5.1.0")


def test_v5_3_0__stop_the_world_reaches_a_domain_written_without_a_freeze():
    _handoff("5.3.0")


def _one_stop_a_sample(name):
    """A sample costs the ptrace executor one stop, not two: a reset of
    young_limit inside a dispatch that can run no more OCaml code (no
    signal, finaliser, memprof callback or systhread yield flagged) leaves
    the write to the dispatch's return (bpf/ocaml5/minor.bpf.h
    minor5_dispatch_runs_ocaml), where the sampled block's next point is
    written once.  Written at both, a sample took 2.1 stops on 5.3
    (alloc_minor at 1e-4: 19 034 stops, 8 931 samples); now one a sample
    plus at most one at each of the runtime's own two traps a minor cycle
    (the half-heap mark's and the full heap's, whose resets leave P to
    write), and nothing missed.  (5.4.1 once took 4 698 stops for 4 502
    samples and 169 cycles: over the earlier bound, samples + cycles + 20.)"""
    saved = _with_fixtures(name)
    try:
        d = chtest.tmpdir()
        out = os.path.join(d, "r.json")
        rc, so, se = chtest.run_record(["--rate", "1e-4", "--executor", "ptrace", "--format", "json", "-o", out],
                                       [chtest.fixture("alloc_minor"), "ratio", "c", "n=2000000"], timeout=240)
    finally:
        chtest.FIXTURES = saved
    assert rc == 0, (rc, so, se)
    import json
    j = json.load(open(out))
    minor, ex = j["run"]["minor"], j["run"]["ptrace"]
    assert minor["samples"] > 2000 and minor["missed"] == 0, minor
    assert minor["arms_at_return"] > minor["samples"] // 2, minor
    assert ex["stops"] <= minor["samples"] + 2 * minor["cycles"], (ex, minor)


def test_v5_1_0__one_ptrace_stop_a_sample():
    _one_stop_a_sample("5.1.0")


def test_v5_2_0__one_ptrace_stop_a_sample():
    _one_stop_a_sample("5.2.0")


def test_v5_3_0__one_ptrace_stop_a_sample():
    _one_stop_a_sample("5.3.0")


def test_v5_4_1__one_ptrace_stop_a_sample():
    _one_stop_a_sample("5.4.1")


def _killed_mid_write(name):
    """camlheap killed (SIGKILL, by its test hook) between a young_limit
    write and its re-check, while the handoff fixture's main domain asks
    for collection after collection: an interrupt erased in that window
    would never be put back by camlheap, so its probe holder does it
    (ptexec5_settle_after_death; the unit test shows the holder's store).
    The program ends with its own output and status, whichever write
    camlheap dies at."""
    saved = _with_fixtures(name)
    try:
        ref_w = chtest.Waiting("handoff", ["n=200"])
        ref_w.release()
        ref = ref_w.finish()
        assert ref[0] == 0 and ref[1] == "ROUNDS 200\n", ref
        for k in (1, 40, 400, 1500):
            w = chtest.Waiting("handoff", ["n=200"])
            os.environ["CAMLHEAP_TEST_KILL_MID_WRITE"] = str(k)
            try:
                r = chtest.Recorder(w.pid, 1e-2, ["--executor", "ptrace"])
            finally:
                del os.environ["CAMLHEAP_TEST_KILL_MID_WRITE"]
            r.wait_attached()
            w.release()
            r.proc.wait(timeout=240)
            got = w.finish(timeout=240)
            assert r.proc.returncode == -9 or k == 1500, (k, r.proc.returncode)
            assert got == ref, (k, got, ref)
    finally:
        chtest.FIXTURES = saved


def test_v5_3_0__killed_mid_write_never_leaves_an_interrupt_erased():
    _killed_mid_write("5.3.0")


def test_v5_1_0__killed_mid_write_never_leaves_an_interrupt_erased():
    _killed_mid_write("5.1.0")


def test_v5_3_0__stripped_binary_writes_with_the_process_frozen():
    """Without .symtab camlheap cannot find all_domains, so the interrupt
    flags are unknown: each minor-heap write is made with every other
    thread of the process stopped instead (the report says which), and
    the program's output is as without camlheap."""
    fixtures = _fixtures_for("5.3.0")
    exe = os.path.join(chtest.tmpdir(), "alloc_minor")
    shutil.copy(os.path.join(fixtures, "alloc_minor"), exe)
    subprocess.run(["strip", exe], check=True)
    plain = subprocess.run([exe, "ratio", "threads", "n=500000"], stdout=subprocess.PIPE, timeout=120)
    out = os.path.join(chtest.tmpdir(), "r.json")
    rc, so, se = chtest.run_record(["--rate", "1e-4", "--executor", "ptrace", "--format", "json", "-o", out],
                                   [exe, "ratio", "threads", "n=500000"])
    assert rc == 0 and so == plain.stdout.decode(), (rc, so, se)
    import json
    j = json.load(open(out))
    ex = j["run"]["ptrace"]
    assert ex["freezes"] > 100 and ex["rechecks"] == 0 and ex["freeze_timeouts"] == 0, ex
    assert j["run"]["minor"]["missed"] == 0, j["run"]["minor"]


def test_v5_1_0__domains_that_drop_everything_leave_nothing_live():
    _drop_all("5.1.0")


def test_v5_2_0__domains_that_drop_everything_leave_nothing_live():
    _drop_all("5.2.0")


def test_v5_3_0__domains_that_drop_everything_leave_nothing_live():
    _drop_all("5.3.0")


def test_v5_4_1__domains_that_drop_everything_leave_nothing_live():
    _drop_all("5.4.1")


def _gc_timing_unchanged(name):
    """The GC does its work at the same allocation as without camlheap: the
    gctiming fixture prints, to the iteration, every minor collection, major
    cycle and finaliser run.  On OCaml 5 a sample trap within 257 words
    above young_trigger made caml_poll_gc_work collect or slice early: with
    a 4 k-word minor heap (an eighth of its words in those margins) at 1e-2
    nearly every cycle shifted, and at 1e-3 with the default heap one
    finaliser ran a cycle early now and then.  The points in the margin are
    not armed, and the report counts them (so the first case is known to
    have met the margin).  `name` None: the host's OCaml (Debian's 4.13.1)."""
    saved = _with_fixtures(name) if name else chtest.FIXTURES
    try:
        for rate, heap, n in (("1e-2", "s=4k", "100000"), ("1e-3", None, "400000")):
            env = dict(os.environ)
            if heap:
                env["OCAMLRUNPARAM"] = heap
            args = [chtest.fixture("gctiming"), "n=" + n]
            ref = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=300)
            assert ref.returncode == 0 and ref.stdout.count(b"minor ") > 20, ref.stdout[-300:]
            d = chtest.tmpdir()
            out = os.path.join(d, "r.json")
            p = subprocess.run([chtest.CAMLHEAP, "record", "--rate", rate, "--format", "json", "-o", out, "--"] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=300)
            what = "%s at %s (%s)" % (heap or "default minor heap", rate, name)
            assert p.returncode == 0, (what, p.stderr.decode()[-500:])
            if p.stdout != ref.stdout:
                import difflib
                diff = list(difflib.unified_diff(ref.stdout.decode().splitlines(), p.stdout.decode().splitlines(),
                                                 "alone", "under camlheap", n=0, lineterm=""))
                raise AssertionError("%s: the output changed: %s" % (what, " | ".join(diff[2:14])))
            import json
            minor = json.load(open(out))["run"]["minor"]
            assert minor["samples"] > 100, (what, minor)
            if heap and name and name.startswith("5."):
                assert minor["in_poll_margin"] > 0, (what, minor)
    finally:
        chtest.FIXTURES = saved


def test_v5_1_0__gc_timing_and_finalisers_unchanged():
    _gc_timing_unchanged("5.1.0")


def test_v5_2_0__gc_timing_and_finalisers_unchanged():
    _gc_timing_unchanged("5.2.0")


def test_v5_3_0__gc_timing_and_finalisers_unchanged():
    _gc_timing_unchanged("5.3.0")


def test_v5_4_1__gc_timing_and_finalisers_unchanged():
    _gc_timing_unchanged("5.4.1")


def test_v4_14_2__gc_timing_and_finalisers_unchanged():
    _gc_timing_unchanged("4.14.2")


def test_host_4_13__gc_timing_and_finalisers_unchanged():
    _gc_timing_unchanged(None)


def _unmarshal_not_sampled_and_said(name):
    saved = _with_fixtures(name)
    try:
        rate = 1e-3
        rc, out, rep, err = chtest.record_launch([chtest.fixture("custom")], rate)
    finally:
        chtest.FIXTURES = saved
    assert rc == 0, err
    assert "but not unmarshalled blocks (OCaml %s calls no hook" % name[:3] in rep.first_line(), rep.first_line()
    assert "unmarshal not sampled" in rep.text, rep.text[:1500]
    for site, (kind, words) in chtest.parse_truth(out).items():
        if kind == "custom":
            chtest.check_binomial(rep.samples_at(site, "custom"), words, rate, site)


def _domains_census(name):
    """The census across four domains (one spinning): every followed block
    is accounted for exactly once (dead young, dead in the major heap, or
    live), each domain's young blocks are judged at its own minor
    collections, and after the fixture's final full major collection the
    blocks it keeps (64 of main_site's) are live, estimated within the
    sampling variance, and no other major block is."""
    saved = _with_fixtures(name)
    try:
        rate = 1e-3
        rc, out, rep, err = chtest.record_launch([chtest.fixture("domains"), "n=6000"], rate, extra=["--live"])
    finally:
        chtest.FIXTURES = saved
    assert rc == 0, err
    c = rep.census()
    assert c and c["minor_born"] > 100 and c["dead_minor"] > 100 and c["clean_phases"] >= 1, rep.header
    assert c["followed"] == c["dead_minor"] + c["dead_major"] + rep.live_blocks_total(), (c, rep.header.get("live"))
    assert c["promoted"] + c["dead_minor"] <= c["minor_born"], c
    for s in rep.sites:
        assert s.get("live", 0) >= 0, s
    live_main = sum(s.get("live", 0) for s in rep.sites_at("Domains.main_site", "major"))
    chtest.check_binomial(live_main, 64 * 1001, rate, "Domains.main_site live at the end")
    # the fixture ends with a full major collection: nothing else it
    # allocated in the major heap survives it
    for site in ("Domains.worker_a", "Domains.worker_b"):
        live = sum(s.get("live", 0) for s in rep.sites_at(site, "major"))
        assert live == 0, (site, live, rep.header.get("live"))


def test_v5_1_0__census_across_four_domains():
    _domains_census("5.1.0")


def test_v5_2_0__census_across_four_domains():
    _domains_census("5.2.0")


def test_v5_3_0__census_across_four_domains():
    _domains_census("5.3.0")


def test_v5_4_1__census_across_four_domains():
    _domains_census("5.4.1")


def _v5_3__fates_agree_with_in_process_memprof_in_another_run(name):
    """The fractions of sampled blocks promoted, dead young and dead in the
    major heap, camlheap's census against the program's own Gc.Memprof
    tracker (promote, dealloc_minor, dealloc_major), on two runs of the
    deterministic leak fixture (camlheap never arms a program's own
    Gc.Memprof on 5.x).  Two-proportion z tests, as test_census.check_fates."""
    import re
    saved = _with_fixtures(name)
    try:
        rate = _census.RATE
        p = subprocess.run([chtest.fixture("leak"), "memprof=%g" % rate], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        assert p.returncode == 0, p.stderr
        rc, out, rep, err = _census.record_launch([chtest.fixture("leak")], rate, extra=["--executor", "ptrace"])
        assert rc == 0, err
    finally:
        chtest.FIXTURES = saved
    m = re.search(r"MEMPROF_FATES minor=(\d+) promoted=(\d+) dead_minor=(\d+) major=(\d+) dead_major=(\d+)",
                  p.stdout.decode())
    assert m, p.stdout
    mp = dict(zip(("minor", "promoted", "dead_minor", "major", "dead_major"), map(int, m.groups())))
    c = rep.census()
    assert c, rep.text[:2000]
    ours = {"minor": c["minor_born"], "promoted": c["promoted"], "dead_minor": c["dead_minor"],
            "major": c["followed"] - c["minor_born"], "dead_major": c["dead_major"]}

    _census.check_fates(ours, mp)


def test_v5_3_0__fates_agree_with_in_process_memprof_in_another_run():
    _v5_3__fates_agree_with_in_process_memprof_in_another_run("5.3.0")


def test_v5_4_1__fates_agree_with_in_process_memprof_in_another_run():
    _v5_3__fates_agree_with_in_process_memprof_in_another_run("5.4.1")


def _v5_3__kill9_never_harms_a_multi_domain_target(name):
    """camlheap killed with -9 at random moments while attached to four
    domains (one spinning): the target's output and status never change.
    The OCaml 5 probes only read, so nothing is left behind to undo."""
    saved = _with_fixtures(name)
    try:
        args = ["n=30000"]
        ref_w = chtest.Waiting("domains", args)
        ref_w.release()
        ref = ref_w.finish()
        assert ref[0] == 0 and "spins 1" in ref[1], ref
        chtest.kill9_runs("domains", args, ref, 1e-3, 8, extra=["--by-domain"], attach_every=4, sigstop_odd=True)
    finally:
        chtest.FIXTURES = saved


def test_v5_3_0__kill9_never_harms_a_multi_domain_target():
    _v5_3__kill9_never_harms_a_multi_domain_target("5.3.0")


def test_v5_4_1__kill9_never_harms_a_multi_domain_target():
    _v5_3__kill9_never_harms_a_multi_domain_target("5.4.1")


def test_v5_1_0__unmarshal_not_sampled_and_said():
    """5.1 and 5.2 have no per-block hook for unmarshalled blocks: custom
    blocks are still sampled, and the report says unmarshalled ones are
    not."""
    _unmarshal_not_sampled_and_said("5.1.0")


def test_v5_2_0__unmarshal_not_sampled_and_said():
    _unmarshal_not_sampled_and_said("5.2.0")


def _v5_3__minor_agrees_with_in_process_memprof_in_another_run(name):
    """OCaml 5.3: camlheap never arms a domain whose program runs Gc.Memprof
    itself, so the two cannot sample one run side by side.  The fixture is
    deterministic (same allocations at every site in every run), so run it
    twice: once sampled by its own Gc.Memprof (a fresh random draw,
    Fixture.memprof_reseed), once by camlheap, both at 1e-4.  Per site the
    counts are independent Poisson-binomials of one mean: (n1 - n2) /
    sqrt(n1 + n2) ~ N(0, 1); the sites count as one check of the suite
    (chtest.z_limit, Bonferroni)."""
    import math
    import re
    import test_minor
    saved = _with_fixtures(name)
    try:
        rate = 1e-4
        args = ["n=2000000", "ratio", "c", "comb", "sig"]  # finalisers run at other moments under Gc.Memprof
        p = subprocess.run([chtest.fixture("alloc_minor"), "memprof=%g" % rate] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
        assert p.returncode == 0, p.stderr
        mp_out = p.stdout.decode()
        mp = {int(a): int(b) for a, b in re.findall(r"^MEMPROF (\d+) (\d+)$", mp_out, re.M)}
        rc, out, rep, err = chtest.record_launch([chtest.fixture("alloc_minor")] + args, rate)
        assert rc == 0, err
    finally:
        chtest.FIXTURES = saved
    truth = chtest.parse_truth(out)
    assert truth == chtest.parse_truth(mp_out), "the fixture is not deterministic: %s / %s" % (out, mp_out)
    assert rep.minor() and rep.minor()["missed"] == 0, rep.header.get("minor")
    zcrit = chtest.z_limit(len(truth))
    for site in truth:
        lines = chtest.site_lines(site)
        n1 = rep.samples_at_lines(test_minor.MOD, lines, "minor")
        n2 = sum(mp.get(line, 0) for line in lines)
        assert n1 + n2 > 0, site
        z = (n1 - n2) / math.sqrt(n1 + n2)
        assert abs(z) <= zcrit, "%s: camlheap %d vs Gc.Memprof %d samples (z = %.2f, limit %.2f)" % (
            site, n1, n2, z, zcrit)


def test_v5_3_0__minor_agrees_with_in_process_memprof_in_another_run():
    _v5_3__minor_agrees_with_in_process_memprof_in_another_run("5.3.0")


def test_v5_4_1__minor_agrees_with_in_process_memprof_in_another_run():
    _v5_3__minor_agrees_with_in_process_memprof_in_another_run("5.4.1")


def _v5__private_runtime_layouts_match_its_debug_info(name):
    """The 5.x runtime structures camlheap reads that no header declares:
    runtime/domain.c's struct dom_internal (its size, the stride of
    all_domains; its state and interruptor.interrupt_pending, read by the
    ptrace executor around each write) and, from 5.3, where a running
    Gc.Memprof's rate is and whether its callbacks are pending: their
    offsets in the runtime's own DWARF, as gdb prints them, equal
    camlheap's constants."""
    import re
    fixtures = _fixtures_for(name)
    ch = _camlheap_constants()
    v = name.replace(".", "")[:2]  # 51 .. 54
    structs = ["dom_internal"] + (["memprof_domain_s", "entries_s"] if v >= "53" else [])
    p = subprocess.run(["gdb", "-batch"] + [a for st in structs for a in ("-ex", "ptype /o struct " + st)]
                       + [os.path.join(fixtures, "alloc_minor")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    out = p.stdout.decode()

    def body(struct):
        b = out[out.index("type = struct %s {" % struct):]
        nxt = b.find("type = struct ", 1)
        return b if nxt < 0 else b[:nxt]

    def offset(struct, field):
        m = re.search(r"/\*\s+(\d+)\s+\|\s+\d+ \*/\s+[^;]*?\b%s;" % field, body(struct))
        assert m, (struct, field, body(struct)[:1500])
        return int(m.group(1))
    sizes = re.findall(r"total size \(bytes\):\s+(\d+)", body("dom_internal"))
    assert offset("dom_internal", "state") == ch["CH_OCAML%s_DOM_INTERNAL_STATE" % v], out
    assert offset("dom_internal", "interrupt_pending") == ch["CH_OCAML%s_INTERRUPT_PENDING" % v], out
    assert int(sizes[-1]) == ch["CH_OCAML%s_DOM_INTERNAL_SIZE" % v], out
    if v >= "53":
        assert offset("memprof_domain_s", "entries") + offset("entries_s", "config") == ch["CH_OCAML53_MEMPROF_CONFIG"], out
        assert offset("memprof_domain_s", "pending") == ch["CH_OCAML53_MEMPROF_PENDING"], out


def test_v5_1_0__private_runtime_layouts_match_its_debug_info():
    _v5__private_runtime_layouts_match_its_debug_info("5.1.0")


def test_v5_2_0__private_runtime_layouts_match_its_debug_info():
    _v5__private_runtime_layouts_match_its_debug_info("5.2.0")


def test_v5_3_0__private_runtime_layouts_match_its_debug_info():
    _v5__private_runtime_layouts_match_its_debug_info("5.3.0")


def test_v5_4_1__private_runtime_layouts_match_its_debug_info():
    _v5__private_runtime_layouts_match_its_debug_info("5.4.1")


def _v5_3__observe_takes_the_programs_own_memprof_samples(name):
    """A 5.3 program already running Gc.Memprof: camlheap never arms its
    minor heap, reads the rate from the program's Gc.Memprof.t, and takes
    memprof's own sample points read-only (caml_memprof_sample_young); per
    site they agree with the program's own counts (the 4.x test, unchanged)."""
    saved = _with_fixtures(name)
    try:
        _minor.test_observe_takes_the_programs_own_memprof_samples()
    finally:
        chtest.FIXTURES = saved


def test_v5_3_0__observe_takes_the_programs_own_memprof_samples():
    _v5_3__observe_takes_the_programs_own_memprof_samples("5.3.0")


def test_v5_4_1__observe_takes_the_programs_own_memprof_samples():
    _v5_3__observe_takes_the_programs_own_memprof_samples("5.4.1")


def _minor_sites_5(name):
    """The minor-heap sites at 1e-4 on OCaml 5, every part of the fixture
    at once: systhreads, finalisers and an OCaml signal handler that
    allocates.  Once a bug: the handler's site came out 20-50 % high in
    about one run in three on 5.3 under the freezing executor, and this
    test left it out.  Not reproduced since (on 5.3: 0 of 42 runs with the
    executor of user/collect/ptexec5.c, 0 of 8 beside two CPU hogs, 0 of 9
    with the freezing executor of b9fc4d5, 0 of 9 at 06810b7; 0 of 8 on
    5.4.1, of 6 each on 5.1 and 5.2); its cause was never found, so
    the handler's site is checked here again: a return of the bug fails
    this test about one run in three."""
    saved = _with_fixtures(name)
    try:
        _minor._minor(1e-4, 4_000_000, parts=["ratio", "c", "comb", "fin", "threads", "sig"])
    finally:
        chtest.FIXTURES = saved


def test_v5_1_0__minor_sites_rate_1e4_every_part_at_once():
    _minor_sites_5("5.1.0")


def test_v5_2_0__minor_sites_rate_1e4_every_part_at_once():
    _minor_sites_5("5.2.0")


def test_v5_3_0__minor_sites_rate_1e4_every_part_at_once():
    _minor_sites_5("5.3.0")


def test_v5_4_1__minor_sites_rate_1e4_every_part_at_once():
    _minor_sites_5("5.4.1")


def test_v5_3_0_fp__minor_sites_rate_1e4_every_part_at_once():
    _minor_sites_5("5.3.0-fp")


# -- the register executor's sites, against objdump's reading --------------

_X86 = {n: i for i, n in enumerate(("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11",
                                     "r12", "r13", "r14", "r15"))}


def _register_sites(name):
    """The young_trigger loads the register executor performs itself
    (collect/regexec.h), as camlheap finds them in each release's runtime
    (ocaml_runtime_find_field_load, said under CAMLHEAP_DEBUG), against
    objdump's disassembly of the same functions in the same binary: the
    first `mov 0x48(%reg),%reg` of caml_update_young_limit and of
    caml_do_pending_actions_exn on 4.x (young_trigger, 72 bytes into
    Caml_state), the first `mov 0x20(%rdi),%reg` of caml_reset_young_limit
    on 5.x (32 bytes into the domain state).  Every supported release must
    have them, or the register executor would leave it to another."""
    import re
    saved = _with_fixtures(name) if name else chtest.FIXTURES
    try:
        exe = chtest.fixture("alloc_minor")
    finally:
        chtest.FIXTURES = saved
    env = dict(os.environ, CAMLHEAP_DEBUG="1")
    d = chtest.tmpdir()
    p = subprocess.run([chtest.CAMLHEAP, "record", "--executor", "observe", "-o", os.path.join(d, "r.txt"), "--",
                        exe, "n=1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=120)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    got = {m.group(1): (int(m.group(2), 16), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(6)))
           for m in re.finditer(r"register site (\w+)\+(0x[0-9a-f]+|0): load (-?\d+)\(r(\d+)\) -> r(\d+), (\d+) bytes",
                                p.stderr.decode())}
    five = name is not None and name.startswith("5.")
    fns = ("caml_reset_young_limit",) if five else ("caml_update_young_limit", "caml_do_pending_actions_exn")
    disp = 0x20 if five else 0x48
    assert set(got) == set(fns), (name, p.stderr.decode()[-2000:])
    for fn in fns:
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "--disassemble=" + fn, exe],
                             stdout=subprocess.PIPE, check=True).stdout.decode()
        start = int(re.search(r"^([0-9a-f]+) <%s>:" % fn, dis, re.M).group(1), 16)
        want = None
        for m in re.finditer(r"^\s*([0-9a-f]+):\s+mov\s+0x%x\(%%(\w+)\),%%(\w+)$" % disp, dis, re.M):
            base = _X86.get(m.group(2))
            if five and base != _X86["rdi"]:
                continue
            want = (int(m.group(1), 16) - start, disp, base, _X86[m.group(3)])
            break
        assert want, "objdump finds no young_trigger load in %s (%s)" % (fn, name)
        at, d_, base, dst, ln = got[fn]
        assert (at, d_, base, dst) == want, (name, fn, got[fn], want)
        assert ln in (4, 7), got[fn]
    if five:
        return
    # 4.x: the young_alloc_end tail of caml_update_young_limit (its load, the
    # store into young_limit, the ret) that the storm check replaces
    m = re.search(r"register end site caml_update_young_limit\+(0x[0-9a-f]+): load 56\(r(\d+)\) -> r(\d+), 4 bytes, "
                  r"store (\d+) bytes, ret", p.stderr.decode())
    assert m, (name, p.stderr.decode()[-2000:])
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "--disassemble=caml_update_young_limit", exe],
                         stdout=subprocess.PIPE, check=True).stdout.decode()
    start = int(re.search(r"^([0-9a-f]+) <caml_update_young_limit>:", dis, re.M).group(1), 16)
    ins = re.findall(r"^\s*([0-9a-f]+):\s+(\S+)\s*(\S*)$", dis, re.M)
    k = next(i for i, (_, op, args) in enumerate(ins) if op == "mov" and args.startswith("0x38(%"))
    load = re.match(r"0x38\(%(\w+)\),%(\w+)$", ins[k][2])
    assert (int(ins[k][0], 16) - start, _X86[load.group(1)], _X86[load.group(2)]) == \
        (int(m.group(1), 16), int(m.group(2)), int(m.group(3))), (name, ins[k], m.group(0))
    assert ins[k + 1][1] == "mov" and ins[k + 1][2].startswith("%" + load.group(2) + ",") and ins[k + 2][1] == "ret", \
        (name, ins[k:k + 3])


def test_host_4_13__register_executor_sites_agree_with_objdump():
    _register_sites(None)


for _v in ("4.12.0", "4.12.1", "4.14.0", "4.14.2", "5.1.0", "5.2.0", "5.3.0", "5.4.1", "5.3.0-fp"):
    def _f(_v=_v):
        _register_sites(_v)
    _f.__name__ = "test_v%s__register_executor_sites_agree_with_objdump" % _v.replace(".", "_").replace("-", "_")
    globals()[_f.__name__] = _f
del _v, _f
