#!/usr/bin/env python3
"""OCaml toolchains beyond Debian's 4.13.1, built once into a cache outside
the checkout and reused by every clone on this machine.

Sources: the OCaml source packages on the npm registry (`npm pack
ocaml@VERSION`; npm checks the tarball against the registry's sha512
integrity), and the source archives in ../shared/toolchains beside the
checkout (checked against its SHA256SUMS).  Built with `./configure
--prefix=... LEAN && make && make install`, LEAN leaving out what no test
uses (ocamldoc, ocamltest, the debugger, the debug and instrumented
runtimes).  A toolchain is trusted only if its stamp names the same source
checksum, patches and configure arguments and its `ocamlopt -version` and a
compile-and-run smoke test pass; otherwise it is rebuilt.  A lock file keeps
concurrent runs from building the same one twice.  The stamp is written
last (OCaml records its prefix at configure time, so it is built in place):
an interrupted build has none and is removed and built again.

Cache: $CAMLHEAP_TOOLCHAINS, else ~/.cache/camlheap/toolchains/NAME.
Source archives: $CAMLHEAP_SHARED_TOOLCHAINS, else ../shared/toolchains.

A toolchain that cannot be had (npm unreachable, an archive missing or with
a wrong checksum) raises Unavailable, which the tests turn into a skip that
names what is missing.

Usage: python3 tests/toolchains.py [NAME...]   (default: those the tests use,
USED; prints NAME PREFIX)
"""
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

# What 4.10-4.12 need to build with glibc >= 2.34, where SIGSTKSZ is no
# longer a constant (../shared/toolchains/README.md): the alternate signal
# stack of runtime/signals_nat.c gets a constant size.
SIGSTKSZ_FIX = ("runtime/signals_nat.c", "static char sig_alt_stack[SIGSTKSZ];",
                "static char sig_alt_stack[65536];")

# Leave out what no test uses: a toolchain builds in about half the time.
LEAN = ["--disable-ocamldoc", "--disable-ocamltest", "--disable-debugger", "--disable-debug-runtime",
        "--disable-instrumented-runtime", "--disable-stdlib-manpages"]

# name -> (source, the OCaml version it holds, configure arguments, patches).
# source: "npm:VERSION" (the packagers' own versions: ocaml@5.1.4 holds
# OCaml 5.1.0) or "shared:FILE" (an archive in ../shared/toolchains).
TOOLCHAINS = {
    "4.10.0": ("npm:4.10.0", "4.10.0", LEAN, [SIGSTKSZ_FIX]),
    "4.11.0": ("npm:4.11.0", "4.11.0", LEAN, [SIGSTKSZ_FIX]),
    "4.12.0": ("npm:4.12.0", "4.12.0", LEAN, [SIGSTKSZ_FIX]),
    "4.12.1": ("shared:ocaml-4.12.1.tar.xz", "4.12.1", LEAN, [SIGSTKSZ_FIX]),
    "4.14.0": ("npm:4.14.0", "4.14.0", LEAN, []),
    "4.14.2": ("shared:ocaml-4.14.2.tar.xz", "4.14.2", LEAN, []),
    "5.1.0": ("npm:5.1.4", "5.1.0", LEAN, []),
    "5.2.0": ("shared:ocaml-5.2.0.tar.xz", "5.2.0", LEAN, []),
    "5.3.0": ("npm:5.3.0", "5.3.0", LEAN, []),
    "5.3.0-fp": ("npm:5.3.0", "5.3.0", LEAN + ["--enable-frame-pointers"], []),
    "5.4.1": ("shared:ocaml-5.4.1.tar.xz", "5.4.1", LEAN, []),
}


# What tests/test_versions.py and tests/test_releases.py build their fixtures
# with; the others are for trying a release by hand (4.10 and 4.11 are
# refused).
USED = ["4.12.0", "4.12.1", "4.14.0", "4.14.2", "5.1.0", "5.2.0", "5.3.0", "5.3.0-fp", "5.4.1"]


class Unavailable(Exception):
    """The toolchain's source cannot be had here (the message says what is missing)."""


SMOKE = 'let () = let l = List.init 1000 (fun i -> (i, string_of_int i)) in ' \
        'print_endline (Sys.ocaml_version ^ " " ^ string_of_int (List.length l))\n'


def cache_root():
    return os.environ.get("CAMLHEAP_TOOLCHAINS") or os.path.join(os.path.expanduser("~"), ".cache", "camlheap",
                                                                  "toolchains")


def shared_dir():
    return os.environ.get("CAMLHEAP_SHARED_TOOLCHAINS") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "toolchains")


def _shared_archive(name):
    """Path and sha256 of ../shared/toolchains/name, checked against SHA256SUMS."""
    d = shared_dir()
    path = os.path.join(d, name)
    if not os.path.exists(path):
        raise Unavailable("%s is missing (looked in %s)" % (name, os.path.abspath(d)))
    try:
        sums = dict(reversed(l.split(None, 1)) for l in open(os.path.join(d, "SHA256SUMS")).read().splitlines()
                    if l.strip())
    except OSError as e:
        raise Unavailable("%s has no SHA256SUMS beside it: %s" % (name, e))
    want = sums.get(name) or sums.get("*" + name)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if want is None or h.hexdigest() != want.strip():
        raise Unavailable("%s does not match its SHA256SUMS entry (%s)" % (path, want))
    return path, h.hexdigest()


def _integrity(source):
    kind, what = source.split(":", 1)
    if kind == "shared":
        return "sha256-" + _shared_archive(what)[1]
    try:
        p = subprocess.run(["npm", "view", "ocaml@" + what, "dist.integrity"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise Unavailable("npm's ocaml@%s: %s" % (what, e))
    if p.returncode != 0 or not p.stdout.strip():
        raise Unavailable("npm view ocaml@%s failed: %s" % (what, p.stderr.decode(errors="replace")[-500:]))
    return p.stdout.decode().strip()


def _unpack(source, work):
    """The source tree of `source`, unpacked under work."""
    kind, what = source.split(":", 1)
    if kind == "shared":
        subprocess.run(["tar", "xJf", _shared_archive(what)[0], "-C", work], check=True)
        dirs = [d for d in os.listdir(work) if os.path.isdir(os.path.join(work, d))]
        assert len(dirs) == 1, dirs
        return os.path.join(work, dirs[0])
    subprocess.run(["npm", "pack", "--silent", "ocaml@" + what], cwd=work, check=True, timeout=600,
                   stdout=subprocess.DEVNULL)
    tgz = [f for f in os.listdir(work) if f.endswith(".tgz")]
    assert len(tgz) == 1, tgz
    subprocess.run(["tar", "xzf", tgz[0]], cwd=work, check=True)
    return os.path.join(work, "package")


def _patch(src, patches):
    for path, old, new in patches:
        f = os.path.join(src, path)
        text = open(f).read()
        if old not in text:
            raise RuntimeError("patch for %s: %r not found" % (f, old))
        open(f, "w").write(text.replace(old, new))


def _verify(prefix, version, stamp_want):
    """The toolchain at prefix is complete and what the stamp says."""
    try:
        stamp = json.load(open(os.path.join(prefix, "camlheap-stamp.json")))
    except (OSError, ValueError):
        return False
    if stamp != stamp_want:
        return False
    opt = os.path.join(prefix, "bin", "ocamlopt")
    try:
        v = subprocess.run([opt, "-version"], stdout=subprocess.PIPE, timeout=60).stdout.decode().strip()
        if v != version:
            return False
        with tempfile.TemporaryDirectory(prefix="camlheap-smoke-") as d:
            src = os.path.join(d, "smoke.ml")
            with open(src, "w") as f:
                f.write(SMOKE)
            subprocess.run([opt, "-o", os.path.join(d, "smoke"), src], cwd=d, check=True, timeout=120,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out = subprocess.run([os.path.join(d, "smoke")], stdout=subprocess.PIPE, timeout=60).stdout.decode()
            return out.strip() == "%s 1000" % version
    except (OSError, subprocess.SubprocessError):
        return False


def ensure(name, log=sys.stderr):
    """Path of the toolchain `name` (a key of TOOLCHAINS), built if needed.
    Raises Unavailable if its source cannot be had."""
    source, version, args, patches = TOOLCHAINS[name]
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    prefix = os.path.join(root, name)
    with open(os.path.join(root, "." + name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = {"source": source, "version": version, "configure": args, "patches": patches,
                 "integrity": _integrity(source)}
        stamp = json.loads(json.dumps(stamp))  # tuples as the JSON file has them
        if _verify(prefix, version, stamp):
            return prefix
        print("toolchains: building OCaml %s (%s) into %s (a few minutes, once)" % (
            version, " ".join(args) or "default configure", prefix), file=log, flush=True)
        work = tempfile.mkdtemp(prefix="camlheap-tc-", dir=root)
        shutil.rmtree(prefix, ignore_errors=True)
        try:
            src = _unpack(source, work)
            _patch(src, patches)
            out = open(os.path.join(work, "build.log"), "w")
            for cmd in (["./configure", "--prefix=" + prefix] + args,
                        ["make", "-j%d" % max(1, os.cpu_count() or 1)], ["make", "install"]):
                p = subprocess.run(cmd, cwd=src, stdout=out, stderr=subprocess.STDOUT, timeout=3600)
                if p.returncode != 0:
                    raise RuntimeError("OCaml %s: `%s` failed; see %s" % (version, " ".join(cmd), out.name))
            with open(os.path.join(prefix, "camlheap-stamp.json"), "w") as f:
                json.dump(stamp, f)
            if not _verify(prefix, version, stamp):
                raise RuntimeError("OCaml %s built but failed its smoke test (%s)" % (version, prefix))
            shutil.rmtree(work, ignore_errors=True)
        except BaseException:
            shutil.rmtree(prefix, ignore_errors=True)
            raise
        return prefix


def main():
    names = sys.argv[1:] or USED
    for n in names:
        if n not in TOOLCHAINS:
            sys.exit("toolchains: unknown %r (known: %s)" % (n, ", ".join(TOOLCHAINS)))
    for n in names:
        print(n, ensure(n), flush=True)


if __name__ == "__main__":
    main()
