"""Every bad input gets a clear message, a non-zero status, and loses nothing."""
import os
import shutil
import subprocess
import threading
import time

import chtest
from chtest import CAMLHEAP, check_binomial, fixture, tmpdir


def _camlheap(args, **kw):
    p = subprocess.run([CAMLHEAP] + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60, **kw)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def _free_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid  # reaped: no such process until the kernel wraps around


def _with_process(argv, fn):
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        if "--wait" in argv or argv[0].endswith(".byte"):
            p.stdout.readline()  # READY: the program is running its own code
        else:
            time.sleep(0.2)  # exec done; the test only inspects the executable
        return fn(p.pid)
    finally:
        p.kill()
        p.wait()


def test_pid_does_not_exist():
    pid = _free_pid()
    rc, out, err = _camlheap(["record", "-p", str(pid)])
    assert rc == 2 and "no process with PID %d" % pid in err, (rc, err)


def test_thread_id_is_not_a_pid():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        rc, out, err = _camlheap(["record", "-p", str(t.native_id)])
    finally:
        stop.set()
        t.join()
    assert rc == 2 and "is not a process ID" in err, (rc, err)


def test_c_program_is_not_ocaml():
    rc, out, err = _with_process(["sleep", "60"], lambda pid: _camlheap(["record", "-p", str(pid)]))
    assert rc == 2 and "is not a native OCaml program" in err, (rc, err)


def test_bytecode_program_is_refused():
    byte = fixture("hello_byte.byte")
    rc, out, err = _with_process([byte, "--wait"], lambda pid: _camlheap(["record", "-p", str(pid)]))
    assert rc == 2 and "bytecode" in err and "ocamlopt" in err, (rc, err)


def test_custom_bytecode_executable_is_refused():
    byte = fixture("hello_byte.custom")
    rc, out, err = _with_process([byte, "--wait"], lambda pid: _camlheap(["record", "-p", str(pid)]))
    assert rc == 2 and "bytecode" in err, (rc, err)


def test_unsupported_runtime_version():
    d = tmpdir()
    exe = os.path.join(d, "alloc_major_4_09")
    data = open(fixture("alloc_major"), "rb").read()
    assert data.count(b"\x004.13.1\x00") >= 1, "fixture lacks its version string"
    open(exe, "wb").write(data.replace(b"\x004.13.1\x00", b"\x004.09.1\x00"))
    os.chmod(exe, 0o755)
    rc, out, err = _camlheap(["record", "--", exe, "n=1"])
    assert rc == 2 and "OCaml 4.09.1 runtime" in err and "supported: 4.12, 4.13, 4.14, 5.1, 5.2, 5.3, 5.4" in err, (rc, err)
    assert "the command was not run" in err and "TRUTH" not in out, (out, err)


def test_missing_runtime_symbols():
    d = tmpdir()
    src = os.path.join(d, "fake.c")
    exe = os.path.join(d, "fake_ocaml")
    # looks native OCaml (frame table, start symbol), lacks the probed runtime
    open(src, "w").write('#include <unistd.h>\nvoid *caml_frametable[1];\n'
                         'void caml_start_program(void) {}\nint main(void) { pause(); return 0; }\n')
    subprocess.run(["gcc", "-rdynamic", "-o", exe, src], check=True)
    rc, out, err = _with_process([exe], lambda pid: _camlheap(["record", "-p", str(pid)]))
    assert rc == 2 and "lacks runtime symbols" in err and "caml_memprof_track_alloc_shr" in err, (rc, err)


def test_missing_privileges():
    if os.geteuid() != 0:
        raise chtest.Skip("needs root to drop to an unprivileged user")
    # a copy nobody can reach: the checkout may sit in a private directory
    d = tmpdir()
    os.chmod(d, 0o755)
    exe = os.path.join(d, "camlheap")
    shutil.copy(CAMLHEAP, exe)
    os.chmod(exe, 0o755)
    p = subprocess.run([exe, "record", "--", fixture("exit_code")], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                       preexec_fn=lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534)))
    rc, err = p.returncode, p.stderr.decode()
    assert rc == 2 and "missing privileges" in err and "CAP_SYS_ADMIN" in err and "run it as root" in err, (rc, err)


def test_command_not_found():
    rc, out, err = _camlheap(["record", "--", "/nonexistent/program"])
    assert rc == 127 and "cannot run /nonexistent/program" in err, (rc, err)


def test_launched_non_ocaml_command_is_not_run():
    d = tmpdir()
    marker = os.path.join(d, "ran")
    rc, out, err = _camlheap(["record", "--", "/bin/touch", marker])
    assert rc == 2 and "is not a native OCaml program" in err, (rc, err)
    assert not os.path.exists(marker), "the refused command ran anyway"


def test_bad_options():
    for args, what in ((["--rate", "0"], "invalid rate"), (["--rate", "2"], "invalid rate"),
                       (["--format", "xml"], "unknown format"), (["-p", "abc"], "invalid PID"),
                       ([], "nothing to profile"), (["--max-depth", "5000"], "invalid --max-depth")):
        rc, out, err = _camlheap(["record"] + args + (["-p", "1"] if args and args[0] != "-p" else []))
        assert rc == 2 and what in err, (args, rc, err)


def test_output_file_kept_on_failure():
    d = tmpdir()
    out = os.path.join(d, "report.txt")
    open(out, "w").write("previous report\n")
    rc, _, err = _camlheap(["record", "-p", str(_free_pid()), "-o", out])
    assert rc == 2, err
    assert open(out).read() == "previous report\n"
    assert os.listdir(d) == ["report.txt"], os.listdir(d)


def test_unwritable_output_fails_before_running():
    # checked first, so neither a recording nor a run of the command is wasted
    rc, out, err = _camlheap(["record", "-o", "/nonexistent-dir/report.txt", "--", fixture("exit_code")])
    assert rc == 2 and "cannot write the report to /nonexistent-dir/report.txt" in err, (rc, err)
    assert "TRUTH" not in out, out


def test_output_to_devices_fifos_and_symlinks():
    import stat
    import threading
    exe = [fixture("exit_code")]
    # a device is written through, never replaced
    rc, out, err = _camlheap(["record", "-o", "/dev/null", "--"] + exe)
    assert rc == 3 and stat.S_ISCHR(os.stat("/dev/null").st_mode), (rc, err)
    d = tmpdir()
    # a FIFO: its reader gets the report
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(open(fifo).read()))
    t.start()
    rc, out, err = _camlheap(["record", "--format", "text", "-o", fifo, "--"] + exe)
    t.join(30)
    assert rc == 3 and stat.S_ISFIFO(os.stat(fifo).st_mode), (rc, err)
    assert got and got[0].startswith("camlheap: executor "), got
    # a symlink: the link stays, its target is replaced, its mode is kept
    target = os.path.join(d, "target.txt")
    open(target, "w").write("old\n")
    os.chmod(target, 0o600)
    link = os.path.join(d, "link.txt")
    os.symlink(target, link)
    rc, out, err = _camlheap(["record", "-o", link, "--"] + exe)
    assert rc == 3, err
    assert os.path.islink(link) and open(target).read().startswith("camlheap:"), open(target).read()[:80]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600, oct(os.stat(target).st_mode)
    # a dangling symlink: the write creates its target
    dang = os.path.join(d, "dangling.txt")
    os.symlink(os.path.join(d, "created.txt"), dang)
    rc, out, err = _camlheap(["record", "-o", dang, "--"] + exe)
    assert rc == 3 and os.path.islink(dang) and open(dang).read().startswith("camlheap:"), err
    assert sorted(os.listdir(d)) == ["created.txt", "dangling.txt", "fifo", "link.txt", "target.txt"], os.listdir(d)


def test_output_path_refused_before_running():
    d = tmpdir()
    for path, what in (("", "empty"), (d, "is a directory"), (os.path.join(d, "nodir", "r.txt"), "does not exist"),
                       (d + "/x/", "not a directory"), (os.path.join(d, "a" * 256), "File name too long")):
        rc, out, err = _camlheap(["record", "-o", path, "--", fixture("exit_code")])
        assert rc == 2 and what in err and "TRUTH" not in out, (path, rc, err)
    # the longest valid name works (the temporary gets a short name)
    longest = os.path.join(d, "b" * 251 + ".txt")
    rc, out, err = _camlheap(["record", "-o", longest, "--", fixture("exit_code")])
    assert rc == 3 and open(longest).read().startswith("camlheap:"), (rc, err)


def test_low_fd_limit_never_gives_a_wrong_profile():
    # With few file descriptors camlheap either refuses up front (the command
    # not run) or records correctly, also when no pidfd can be opened and the
    # target's exit must be seen by polling.
    import resource
    rate = 1e-3
    for limit in range(24, 42, 2):
        p = subprocess.run([CAMLHEAP, "record", "--verbose", "--rate", repr(rate), "--top", "1000", "-o",
                            os.path.join(tmpdir(), "r.txt"), "--", fixture("alloc_major"), "n=2000"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        out, err = p.stdout.decode(), p.stderr.decode()
        if p.returncode == 2:
            assert "Too many open files" in err and "the command was not run" in err and "TRUTH" not in out, err
            continue
        assert p.returncode == 0, (limit, p.returncode, err)
        rep = chtest.Report(open(err.split("report written to ")[1].strip()).read())
        assert "target exited with status 0" in rep.header["duration"], (limit, rep.header)
        truth = chtest.parse_truth(out)
        check_binomial(rep.samples_at("Alloc_major.site_a", "major"), truth["Alloc_major.site_a"][1], rate,
                       "site_a with %d fds" % limit)


def test_version_looking_string_is_not_the_runtime_version():
    # and without Sys.ocaml_version the release is unknown: read-only
    rc, out, rep, err = chtest.record_launch([fixture("verstring")], 1e-3)
    assert rc == 0 and out == "4.05.0\n", (rc, out, err)
    assert "(OCaml 4.x, release unknown)" in rep.header.get("target", ""), rep.header.get("target")
    assert rep.first_line().startswith("camlheap: executor observe; minor-heap allocations are not sampled (the "
                                       "program's OCaml release is unknown"), rep.first_line()


def test_binary_without_any_symbol_table():
    d = tmpdir()
    exe = os.path.join(d, "nosyms")
    shutil.copy(fixture("idle"), exe)
    subprocess.run(["strip", "--strip-all", "-R", ".dynsym", "-R", ".dynstr", exe], check=True,
                   stderr=subprocess.DEVNULL)
    rc, out, err = _camlheap(["record", "--", exe])
    assert rc == 2 and "no symbol table at all" in err and "the command was not run" in err, (rc, err)


def test_low_fd_limit_plugin_loaded_or_warned():
    # a plugin that cannot be opened for want of fds is never silently lost
    import resource
    for limit in range(28, 44, 2):
        d = tmpdir()
        p = subprocess.run([CAMLHEAP, "record", "--rate", "1e-3", "-o", os.path.join(d, "r.txt"), "--",
                            fixture("dynhost"), fixture("dynplug.cmxs"), "n=2000"],
                           input=b"go\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        if p.returncode == 2:
            continue
        assert p.returncode == 0, (limit, p.stderr)
        rep = chtest.Report(open(os.path.join(d, "r.txt")).read())
        loaded = "1 Dynlink plugin" in rep.header["sampler"]
        assert loaded or "could not be opened for want of file descriptors" in rep.text, (limit, rep.header)
