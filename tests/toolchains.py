#!/usr/bin/env python3
"""OCaml toolchains beyond Debian's 4.13.1, built once into a cache outside
the checkout and reused by every clone on this machine.

Sources: the OCaml source packages on the npm registry (`npm pack
ocaml@VERSION`; npm checks the tarball against the registry's sha512
integrity), built with plain `./configure --prefix=... && make && make
install`.  A toolchain is trusted only if its stamp names the same tarball
integrity and configure arguments and its `ocamlopt -version` and a
compile-and-run smoke test pass; otherwise it is rebuilt.  A lock file keeps
concurrent runs from building the same one twice.  The stamp is written
last (OCaml records its prefix at configure time, so it is built in place):
an interrupted build has none and is removed and built again.

Cache: $CAMLHEAP_TOOLCHAINS, else ~/.cache/camlheap/toolchains/NAME.

Usage: python3 tests/toolchains.py [NAME...]   (default: all; prints NAME PREFIX)
"""
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile

# name -> (npm package version, the OCaml version it holds, configure arguments).
# The npm versions are the packagers' own: ocaml@5.1.4 holds OCaml 5.1.0.
TOOLCHAINS = {
    "4.14.0": ("4.14.0", "4.14.0", []),
    "5.1.0": ("5.1.4", "5.1.0", []),
    "5.3.0": ("5.3.0", "5.3.0", []),
    "5.3.0-fp": ("5.3.0", "5.3.0", ["--enable-frame-pointers"]),
}

SMOKE = 'let () = let l = List.init 1000 (fun i -> (i, string_of_int i)) in ' \
        'print_endline (Sys.ocaml_version ^ " " ^ string_of_int (List.length l))\n'


def cache_root():
    return os.environ.get("CAMLHEAP_TOOLCHAINS") or os.path.join(os.path.expanduser("~"), ".cache", "camlheap",
                                                                  "toolchains")


def _integrity(version):
    p = subprocess.run(["npm", "view", "ocaml@" + version, "dist.integrity"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0 or not p.stdout.strip():
        raise RuntimeError("npm view ocaml@%s failed: %s" % (version, p.stderr.decode(errors="replace")[-500:]))
    return p.stdout.decode().strip()


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
    """Path of the toolchain `name` (a key of TOOLCHAINS), built if needed."""
    npm_version, version, args = TOOLCHAINS[name]
    root = cache_root()
    os.makedirs(root, exist_ok=True)
    prefix = os.path.join(root, name)
    with open(os.path.join(root, "." + name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = {"npm": npm_version, "version": version, "configure": args, "integrity": _integrity(npm_version)}
        if _verify(prefix, version, stamp):
            return prefix
        print("toolchains: building OCaml %s (%s) into %s (a few minutes, once)" % (
            version, " ".join(args) or "default configure", prefix), file=log, flush=True)
        work = tempfile.mkdtemp(prefix="camlheap-tc-", dir=root)
        shutil.rmtree(prefix, ignore_errors=True)
        try:
            subprocess.run(["npm", "pack", "--silent", "ocaml@" + npm_version], cwd=work, check=True, timeout=600,
                           stdout=subprocess.DEVNULL)
            tgz = [f for f in os.listdir(work) if f.endswith(".tgz")]
            assert len(tgz) == 1, tgz
            subprocess.run(["tar", "xzf", tgz[0]], cwd=work, check=True)
            src = os.path.join(work, "package")
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
    names = sys.argv[1:] or list(TOOLCHAINS)
    for n in names:
        if n not in TOOLCHAINS:
            sys.exit("toolchains: unknown %r (known: %s)" % (n, ", ".join(TOOLCHAINS)))
    for n in names:
        print(n, ensure(n), flush=True)


if __name__ == "__main__":
    main()
