"""Dynlink plugins (.cmxs): their frame tables are loaded when the target
registers them (caml_register_frametable), or at attach if already loaded,
so stacks through plugin code walk cleanly and name the plugin's sources."""
import os

import chtest
from chtest import Recorder, Waiting, check_binomial, fixture

def plugin():
    """The plugin built with the fixtures in use (test_versions switches them)."""
    return fixture("dynplug.cmxs")


def _check(rep, out, rate):
    sites = rep.sites_at("Dynplug.plugin_site", "major")
    assert sites, rep.text[:3000]
    for s in sites:
        names = [f["function"] for f in s["frames"]]
        assert s["end"] is None, "walk through the plugin ended: %s: %s" % (s["end"], names)
        assert names[-1] == "caml_start_program" and "Dynlink.Native.run.(fun)" in names and "Dynhost" in names, names
        line = chtest.site_lines("Dynplug.plugin_site")
        assert s["frames"][0]["line"] in line and s["frames"][0]["file"].endswith("dynplug.ml"), s["frames"][0]
    truth = chtest.parse_truth(out)
    check_binomial(sum(s["samples"] for s in sites), truth["Dynplug.plugin_site"][1], rate, "plugin_site")
    assert "1 Dynlink plugin" in rep.header.get("sampler", ""), rep.header.get("sampler")


def _record_plugin(attach_before_load):
    """dynhost loads the plugin, which waits; camlheap attaches before the
    load (the plugin then arrives as a note) or after it (found at attach);
    the plugin allocates only once camlheap has its frame descriptors."""
    rate = 1e-3
    w = Waiting("dynhost", [plugin(), "n=5000"])
    if attach_before_load:
        r = Recorder(w.pid, rate)
        r.wait_attached()
    w.line()                   # load the plugin
    w.expect("LOADED")         # its initialisation runs, then waits
    if attach_before_load:
        r.wait_stderr(b"dynplug.cmxs: ")  # camlheap has read the plugin
    else:
        r = Recorder(w.pid, rate)
        r.wait_attached()
    w.release()                # the plugin allocates
    frc, out, _ = w.finish()
    rc, rep, err = r.finish()
    assert frc == 0 and rc == 0, err
    _check(rep, out, rate)


def test_plugin_loaded_while_recording():
    _record_plugin(attach_before_load=True)


def test_attach_after_plugin_loaded():
    _record_plugin(attach_before_load=False)


def test_plugin_frames_known_before_its_code_runs():
    # no waiting: the plugin allocates right after Dynlink registers its
    # frame table; the kernel side reads the table at that very call, so no
    # walk through plugin code may end early
    rate = 1e-3
    rc, out, rep, err = chtest.record_launch([fixture("dynhost"), plugin(), "n=20000"], rate, stdin=b"go\n")
    assert rc == 0, err
    assert rep.walks()["unknown pc"] == 0, rep.header["stacks"]
    _check(rep, out, rate)


def test_recording_names_plugin_frames():
    # a recording symbolizes each code when it first appears: plugin code
    # that runs right after Dynlink registers it must be named there too,
    # as in the report of the run
    import os
    import subprocess
    d = chtest.tmpdir()
    path, also = os.path.join(d, "t.ctf"), os.path.join(d, "also.txt")
    rc, out, err = chtest.run_record(["--rate", "1e-3", "-o", path], [fixture("dynhost"), plugin(), "n=20000"],
                                     stdin=b"go\n", env=dict(os.environ, CAMLHEAP_ALSO_TEXT=also))
    assert rc == 0, err
    p = subprocess.run([chtest.CAMLHEAP, "report", path, "--top", "20"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr
    assert "Dynplug.plugin_site" in p.stdout.decode(), p.stdout.decode()[:3000]
    assert p.stdout.decode() == open(also).read()


def test_launch_mode_leaves_the_commands_streams_byte_identical():
    """A command run under camlheap writes exactly what it writes alone, on
    stdout and on stderr (dynhost writes to both; its plugin's frame
    tables, loaded while recording, once made camlheap add a line to the
    command's stderr); --verbose brings camlheap's messages back."""
    import subprocess
    cmd = [fixture("dynhost"), plugin(), "n=3000"]
    plain = subprocess.run(cmd, input=b"go\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert plain.returncode == 0 and plain.stderr and plain.stdout, plain
    out = os.path.join(chtest.tmpdir(), "r.txt")
    p = subprocess.run([chtest.CAMLHEAP, "record", "--rate", "1e-3", "-o", out, "--"] + cmd, input=b"go\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == plain.stdout, (p.stdout, plain.stdout)
    assert p.stderr == plain.stderr, (p.stderr, plain.stderr)
    rep = chtest.Report(open(out).read())
    assert "1 Dynlink plugin" in rep.header["sampler"], rep.header
    assert "Dynplug.plugin_site" in rep.text, rep.text[:3000]
    v = subprocess.run([chtest.CAMLHEAP, "record", "--verbose", "--rate", "1e-3", "-o", out, "--"] + cmd,
                       input=b"go\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert v.returncode == 0 and v.stdout == plain.stdout, v.stderr
    assert b"frame descriptors loaded" in v.stderr and b"camlheap: recording PID" in v.stderr, v.stderr
