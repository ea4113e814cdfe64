"""The source tree keeps the shape README *How it works* describes: user/
in one folder a stage, each including only the stages below it (target,
then collect, heap and profile, then output, then cmd); bpf/ with a folder per
release family; no include cycle on either side; no source file over
MAX_FILE_LINES lines, no function over MAX_FUNCTION_LINES.

Functions are found the way the code is written (kernel style, see any
file): a definition's body opens with "{" alone at column 0 and closes
with "}" at column 0."""
import glob
import os
import re

import chtest

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 150

# Which user/ folders each one may include from: the one-way flow.
MAY_INCLUDE = {
    "target": set(),
    "collect": {"target"},
    "heap": {"target"},
    "profile": set(),
    "output": {"profile", "target"},
    "cmd": {"target", "collect", "heap", "profile", "output"},
}

INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def _sources():
    root = chtest.ROOT
    files = []
    for pattern in ("user/*/*.[ch]", "bpf/*.[ch]", "bpf/*/*.h", "include/*.h"):
        files += sorted(glob.glob(os.path.join(root, pattern)))
    return [os.path.relpath(f, root) for f in files]


def _read(rel):
    with open(os.path.join(chtest.ROOT, rel)) as f:
        return f.read()


def test_user_has_one_folder_a_stage_and_nothing_loose():
    root = chtest.ROOT
    loose = [f for f in os.listdir(os.path.join(root, "user")) if f.endswith((".c", ".h"))]
    assert not loose, "files outside the stage folders of user/: %s" % loose
    folders = sorted(d for d in os.listdir(os.path.join(root, "user"))
                     if os.path.isdir(os.path.join(root, "user", d)))
    assert folders == sorted(MAY_INCLUDE), folders
    for d in folders + ["../bpf"]:
        readme = os.path.join(root, "user", d, "README.md")
        assert os.path.exists(readme) and len(open(readme).read().split()) > 20, \
            "%s must say in a paragraph what the folder owns" % readme


def test_user_folders_include_only_the_stages_below_them():
    bad = []
    for rel in _sources():
        parts = rel.split("/")
        if parts[0] != "user":
            continue
        for inc in INCLUDE.findall(_read(rel)):
            if "/" not in inc:
                if os.path.exists(os.path.join(chtest.ROOT, "user", inc)):
                    bad.append("%s includes %s without its folder" % (rel, inc))
                continue
            folder = inc.split("/")[0]
            if folder != parts[1] and folder not in MAY_INCLUDE[parts[1]]:
                bad.append("%s (%s) includes %s (%s)" % (rel, parts[1], inc, folder))
    assert not bad, "\n".join(bad)


def _resolve(rel, inc):
    """The repository file an #include "inc" of `rel` names, or None (a
    system, generated or skeleton header)."""
    for base in (os.path.dirname(rel), "user", "include", "."):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(os.path.join(chtest.ROOT, cand)):
            return cand
    return None


def _unit(rel):
    """The unit a file belongs to: x.c, x.h and x_internal.h are one."""
    base = os.path.splitext(rel)[0]
    return base[:-len("_internal")] if base.endswith("_internal") else base


def include_cycles(files, read, resolve):
    """The include cycles between units (see _unit) of `files`, as lines
    "a -> b -> a"; a .c file including another unit's header is an edge,
    so report.c including pprof.h and pprof.c including report.h is a
    cycle."""
    graph = {}
    for rel in files:
        u = _unit(rel)
        for inc in INCLUDE.findall(read(rel)):
            r = resolve(rel, inc)
            if r and _unit(r) != u:
                graph.setdefault(u, set()).add(_unit(r))
    state = {}
    cycles = []

    def visit(n, path):
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                cycles.append(" -> ".join(path[path.index(m):] + [m]))
            elif not state.get(m):
                visit(m, path + [m])
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n, [n])
    return cycles


def test_the_cycle_finder_finds_the_cycles_this_tree_once_had():
    files = {"user/report.c": '#include "report.h"\n#include "pprof.h"\n', "user/report.h": "",
             "user/pprof.c": '#include "pprof.h"\n#include "report.h"\n', "user/pprof.h": "",
             "user/top.c": '#include "top_internal.h"\n', "user/top_internal.h": '#include "top.h"\n',
             "user/top.h": "", "user/top_model.c": '#include "top_internal.h"\n'}
    found = include_cycles(sorted(files), files.get,
                           lambda rel, inc: os.path.join(os.path.dirname(rel), inc)
                           if os.path.join(os.path.dirname(rel), inc) in files else None)
    assert found == ["user/pprof -> user/report -> user/pprof"], found


def test_no_include_cycle():
    cycles = include_cycles(_sources(), _read, _resolve)
    assert not cycles, "include cycles:\n" + "\n".join(cycles)


def functions(text):
    """(name, first line, length in lines) of each function defined in C
    source `text` written in the project's style."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            # the declarator: back to the line that opens the name's "("
            j = i - 1
            while j > 0 and not re.match(r"^[A-Za-z_]", lines[j]):
                j -= 1
            m = re.search(r"(\w+)\s*\(", lines[j])
            k = i + 1
            while k < len(lines) and lines[k] != "}" and not lines[k].startswith("}"):
                k += 1
            if m and not lines[j].rstrip().endswith(("=", "= {")):
                out.append((m.group(1), j + 1, k - j + 1))
            i = k
        i += 1
    return out


def test_the_function_finder_finds_functions():
    text = "static int f(int a,\n\t     int b)\n{\n\treturn a;\n}\n\nstruct s {\n\tint x;\n};\n" \
           "int g(void)\n{\n\tif (1) {\n\t}\n\treturn 0;\n}\n"
    assert functions(text) == [("f", 1, 5), ("g", 10, 6)], functions(text)


def test_no_file_or_function_too_long():
    bad = []
    for rel in _sources():
        text = _read(rel)
        n = text.count("\n")
        if n > MAX_FILE_LINES:
            bad.append("%s: %d lines (at most %d)" % (rel, n, MAX_FILE_LINES))
        for name, line, length in functions(text):
            if length > MAX_FUNCTION_LINES:
                bad.append("%s:%d: %s is %d lines (at most %d)" % (rel, line, name, length, MAX_FUNCTION_LINES))
    assert not bad, "\n".join(bad)
