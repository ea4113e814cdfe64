#!/usr/bin/env python3
"""camlheap test runner: the C unit-test programs in build/tests/ (each prints
'PASS name' / 'FAIL name: why' lines) and the end-to-end tests, the test_*
functions of tests/test_*.py.  Last line: 'N passed, N failed[, N skipped]'.

Usage: python3 tests/run_tests.py [SUBSTRING...]   (run only matching tests)
"""
import glob
import importlib.util
import os
import signal
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chtest  # noqa: E402

passed = failed = skipped = 0
failures = []


def selected(name, filters):
    return not filters or any(f in name for f in filters)


def report(ok, name, detail="", secs=None):
    global passed, failed
    t = " (%.1fs)" % secs if secs is not None else ""
    if ok:
        passed += 1
        print("PASS %s%s" % (name, t), flush=True)
    else:
        failed += 1
        failures.append(name)
        print("FAIL %s%s: %s" % (name, t, detail), flush=True)


# Extra arguments of unit-test programs: unit_parsers also checks the frame
# table and symbols of a fixture against its source's SITE markers.
UNIT_ARGS = {
    "unit_parsers": [chtest.fixture("chain"), os.path.join(chtest.FIXTURE_SRC, "chain.ml")],
    "unit_kernel_btf": [os.path.join(chtest.BUILD, "bpf", "alloc.bpf.o")],
}


def run_units(filters):
    for exe in sorted(glob.glob(os.path.join(chtest.BUILD, "tests", "unit_*"))):
        base = os.path.basename(exe)
        if not selected(base, filters):
            continue
        p = subprocess.run([exe] + UNIT_ARGS.get(base, []), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=600, cwd=chtest.ROOT)
        out = p.stdout.decode(errors="replace")
        seen = 0
        for line in out.splitlines():
            if line.startswith("PASS "):
                seen += 1
                report(True, "%s: %s" % (base, line[5:]))
            elif line.startswith("FAIL "):
                seen += 1
                report(False, "%s: %s" % (base, line[5:].split(":", 1)[0]), line[5:])
        if p.returncode != 0 and not any(l.startswith("FAIL ") for l in out.splitlines()):
            report(False, base, "exit status %d with no FAIL line:\n%s" % (p.returncode, out[-2000:]))
        if seen == 0 and p.returncode == 0:
            report(False, base, "ran no check")


def run_modules(filters):
    global skipped
    for path in sorted(glob.glob(os.path.join(HERE, "test_*.py"))):
        modname = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for name in sorted(n for n in dir(mod) if n.startswith("test_")):
            full = "%s.%s" % (modname, name)
            if not selected(full, filters):
                continue
            t0 = time.time()
            try:
                getattr(mod, name)()
            except chtest.Skip as e:
                skipped += 1
                print("SKIP %s: %s" % (full, e), flush=True)
                continue
            except AssertionError as e:
                report(False, full, str(e), time.time() - t0)
                continue
            except Exception:
                report(False, full, traceback.format_exc(), time.time() - t0)
                continue
            report(True, full, secs=time.time() - t0)


def prebuild_toolchains(filters):
    """On a full run, build the toolchains tests/test_versions.py needs in
    the background while the other tests run
    (each takes minutes, once per machine): a test that reaches one still
    being built waits for it on the toolchain's lock.  Returns the pid of
    its session leader, or None."""
    import toolchains
    if filters or os.environ.get("CAMLHEAP_NO_PREBUILD"):
        return None
    log = os.path.join(chtest.BUILD, "toolchains.log")
    print("toolchains: building any of %s not built yet in the background (log: %s)" % (
        ", ".join(toolchains.USED), log), flush=True)
    # Not a child of this process: a test that reaps any child
    # (test_lifecycle's waitpid(-1) as a subreaper) must not wait for it.
    # sh starts it in a session of its own and exits at once.
    # At the tests' own priority: at nice 19 the tests starved it (two
    # toolchains in the 20 minutes of the 4.13 tests on 2 vCPUs).
    sh = subprocess.run(["sh", "-c", 'setsid "$0" "$1" >"$2" 2>&1 </dev/null & echo $!', sys.executable,
                         os.path.join(HERE, "toolchains.py"), log], stdout=subprocess.PIPE, check=True)
    return int(sh.stdout.decode().strip())


def main():
    filters = sys.argv[1:]
    if os.geteuid() != 0:
        print("warning: the end-to-end tests load BPF programs and need root", flush=True)
    builder = prebuild_toolchains(filters)
    run_units(filters)
    try:
        run_modules(filters)
    finally:
        if builder:
            # (an interrupted build leaves no stamp: it is built again next time)
            try:
                os.killpg(builder, signal.SIGTERM)
            except ProcessLookupError:
                pass
    # the tests' files go, unless a test failed (they may tell why)
    if failed or os.environ.get("CAMLHEAP_KEEP_TMP"):
        print("test files kept in %s/camlheap-test-*" % os.environ.get("TMPDIR", "/tmp"))
    else:
        chtest.remove_tmpdirs()
    if failures:
        print("\nfailed:\n  " + "\n  ".join(failures))
    print("%d passed, %d failed%s" % (passed, failed, ", %d skipped" % skipped if skipped else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
