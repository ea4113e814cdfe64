"""The same checks on other OCaml toolchains (tests/toolchains.py builds them
once into ~/.cache/camlheap/toolchains): the fixtures are compiled with each
toolchain's ocamlopt (make BUILD=build/vVERSION OCAMLOPT=...), then a
selection of the sampling, minor-heap, census, stack and recording tests
runs against them unchanged.  One test per (toolchain, check), named
test_v<version>__<module>__<check>.

4.14.0: supported like 4.13.1 (same runtime layout, checked offsets).
5.1.0 (npm's ocaml@5.1.4) and 5.3.0: not supported yet; a real 5.x program is refused with a
clear message, in launch mode before it runs, in attach mode leaving it
running unharmed.
"""
import os
import subprocess

import chtest
import toolchains
import test_census as _census
import test_minor as _minor
import test_recording as _recording
import test_sampling as _sampling
import test_stacks as _stacks

CHECKS = [
    (_sampling, "test_major_sites_rate_1e3"),
    (_sampling, "test_custom_and_unmarshal_sites"),
    (_sampling, "test_major_agrees_with_in_process_memprof"),
    (_minor, "test_minor_sites_rate_1e4"),
    (_minor, "test_minor_exact_at_rate_one"),
    (_minor, "test_minor_agrees_with_in_process_memprof"),
    (_census, "test_live_at_end_matches_the_fixtures_own_count"),
    (_census, "test_fates_agree_with_in_process_memprof"),
    (_census, "test_compaction_marks_blocks_relocated"),
    (_stacks, "test_chain_exact_stack"),
    (_stacks, "test_deep_recursion_over_600_frames"),
    (_stacks, "test_callback_from_finaliser"),
    (_recording, "test_recording_round_trip_every_event"),
]

_built = {}


def _fixtures_for(name):
    """Build the fixtures with toolchain `name`; returns their directory."""
    if name not in _built:
        prefix = toolchains.ensure(name)
        build = os.path.join(chtest.BUILD, "v" + name)
        p = subprocess.run(["make", "-s", "BUILD=" + build, "OCAMLOPT=" + os.path.join(prefix, "bin", "ocamlopt"),
                            "fixtures"], cwd=chtest.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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
    run.__name__ = "test_v%s__%s__%s" % (name.replace(".", "_"), mod.__name__.replace("test_", "", 1), check[5:])
    return run


def test_v4_14_0__runtime_version_is_reported():
    fixtures = _fixtures_for("4.14.0")
    saved = chtest.FIXTURES
    chtest.FIXTURES = fixtures
    try:
        rc, out, rep, err = chtest.record_launch([chtest.fixture("leak"), "n=1"], 1e-3)
    finally:
        chtest.FIXTURES = saved
    assert rc == 0, err
    assert "(OCaml 4.14.0)" in rep.text.splitlines()[1], rep.text.splitlines()[1]


for _mod, _check in CHECKS:
    _f = _make("4.14.0", _mod, _check)
    globals()[_f.__name__] = _f
del _mod, _check, _f


SPIN5 = """let () =
  let secs = float_of_string Sys.argv.(1) in
  let t0 = Sys.time () and acc = ref [] and n = ref 0 in
  while Sys.time () -. t0 < secs do
    acc := List.init 100 (fun i -> i + !n) :: (if List.length !acc > 100 then [] else !acc);
    incr n
  done;
  print_endline ("spin5 done " ^ Sys.ocaml_version)
"""


def _ocaml5_program(name):
    prefix = toolchains.ensure(name)
    d = os.path.join(chtest.BUILD, "v" + name)
    os.makedirs(d, exist_ok=True)
    src, exe = os.path.join(d, "spin5.ml"), os.path.join(d, "spin5")
    with open(src, "w") as f:
        f.write(SPIN5)
    subprocess.run([os.path.join(prefix, "bin", "ocamlopt"), "-g", "spin5.ml", "-o", "spin5"], cwd=d, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return exe


def _refused(name):
    version = toolchains.TOOLCHAINS[name][1]
    exe = _ocaml5_program(name)
    # launch mode: refused before the command runs a single instruction
    p = subprocess.run([chtest.CAMLHEAP, "record", "--", exe, "0.2"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    err = p.stderr.decode()
    assert p.returncode == 2 and ("OCaml %s runtime" % version) in err and "supported: 4.13, 4.14" in err, err
    assert "the command was not run" in err and b"spin5 done" not in p.stdout, (p.stdout, err)
    # attach mode: refused, and the program runs on unharmed
    prog = subprocess.Popen([exe, "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    import time
    time.sleep(0.3)
    r = subprocess.run([chtest.CAMLHEAP, "record", "-p", str(prog.pid), "-o", os.path.join(chtest.tmpdir(), "r.txt")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    out, _ = prog.communicate(timeout=120)
    assert r.returncode == 2 and ("OCaml %s runtime" % version) in r.stderr.decode(), r.stderr
    assert prog.returncode == 0 and out.decode().strip() == "spin5 done " + version, (prog.returncode, out)


def test_v5_1_0__refused_clearly():
    _refused("5.1.0")


def test_v5_3_0__refused_clearly():
    _refused("5.3.0")
