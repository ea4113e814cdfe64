"""No BPF program hands uninitialised stack to a map or the ring buffer.

A privileged program may read stack it never wrote (the verifier allows
it for CAP_PERFMON, kernel/bpf/verifier.c allow_uninit_stack), so a
struct put into a map with some of its fields unset carries whatever the
stack held: OCaml 5's per-domain entry once got a stale `minor_armed`
with a zero sample point this way, and one launch in ten sampled nothing
of the minor heap.  Rule: a struct whose address is given to
bpf_map_update_elem or bpf_ringbuf_output is declared with an
initialiser (`= {}` or designated fields, which zero the rest)."""
import glob
import os
import re

import chtest

CALL = re.compile(r"\b(bpf_map_update_elem|bpf_ringbuf_output)\s*\(([^;]*)\)\s*[;)|=!<>]")
ADDR = re.compile(r"&\s*([A-Za-z_]\w*)\s*(?=[,)])")


def _decl_uninitialised(body, name):
    """True if `body` declares struct variable `name` without an
    initialiser (`struct t a, name;` or `struct t name;`)."""
    for m in re.finditer(r"^\s*struct\s+\w+\s+([^;{}]*?)\b%s\b\s*([=;,\[])" % re.escape(name), body, re.M):
        before = m.group(1)
        while re.search(r"\([^()]*\)", before):
            before = re.sub(r"\([^()]*\)", "", before)
        if "(" in before:
            continue  # an argument of an initialiser's call, not a declarator
        # `struct t *p = ..., name` or `struct t name` (not a pointer)
        if "*" in before.split(",")[-1]:
            continue
        if m.group(2) != "=":
            return True
    return False


def uninitialised_handoffs(text):
    """[(function start line, variable)] of structs handed to a map or the
    ring buffer without an initialiser.  Functions are kernel style: a body
    opens with "{" at column 0 and closes with "}" at column 0."""
    bad = []
    lines = text.split("\n")
    start = None
    for i, line in enumerate(lines):
        if line == "{":
            start = i
        elif line == "}" and start is not None:
            body = "\n".join(lines[start:i + 1])
            for call in CALL.finditer(body):
                for name in ADDR.findall(call.group(2)):
                    if _decl_uninitialised(body, name):
                        bad.append((start + 1, name))
            start = None
    return bad


def test_the_finder_finds_the_bug_this_tree_once_had():
    old = """static __s64 *ocaml5_countdown(__u64 dom)
{
	struct ch_domain_key k = { .dom_state = dom };
	struct ch_domain *d = bpf_map_lookup_elem(&domains, &k), fresh;

	fresh.next_sample_words = (__s64)geom_draw() - 1;
	bpf_map_update_elem(&domains, &k, &fresh, BPF_NOEXIST);
	return 0;
}
"""
    assert uninitialised_handoffs(old) == [(2, "fresh")]
    assert uninitialised_handoffs(old.replace(", fresh;", ", fresh = {};")) == []
    plain = "int f(void)\n{\n\tstruct e e;\n\n\tif (bpf_ringbuf_output(&execs, &e, sizeof(e), 0))\n\t\treturn 1;\n}\n"
    assert uninitialised_handoffs(plain) == [(2, "e")]
    assert uninitialised_handoffs(plain.replace("struct e e;", "struct e e = { .pid = 1 };")) == []


def test_no_struct_reaches_a_map_or_the_ring_buffer_uninitialised():
    bad = []
    for f in sorted(glob.glob(os.path.join(chtest.ROOT, "bpf", "**", "*.[ch]"), recursive=True)):
        with open(f) as fh:
            for line, name in uninitialised_handoffs(fh.read()):
                bad.append("%s: function at line %d: %s" % (os.path.relpath(f, chtest.ROOT), line, name))
    assert not bad, "declare with an initialiser (= {}): %s" % bad
