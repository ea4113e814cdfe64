/* shape4.c -- a block of a stopped 4.x heap described by its shape
 * (shape4.h). */
#define _GNU_SOURCE
#include "heap/shape4.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "target/proc.h"
#include "target/symbolize.h"

#define LAZY_TAG 246
#define CLOSURE_TAG 247
#define INFIX_TAG 249
#define OBJECT_TAG 248
#define FORWARD_TAG 250
#define ABSTRACT_TAG 251
#define STRING_TAG 252
#define DOUBLE_TAG 253
#define DOUBLE_ARRAY_TAG 254
#define CUSTOM_TAG 255
#define VAL_EMPTY 1        /* Val_int(0): [], Nil, Empty */
#define MAX_CELLS 256      /* list cells counted at most */

struct block {
	uint64_t v, wosize;
	unsigned tag;
	uint64_t f[5];     /* the first fields (as many as there are, up to 5) */
};

static bool is_int(uint64_t w)
{
	return w & 1;
}

static int64_t int_of(uint64_t w)
{
	return (int64_t)w >> 1;
}

/* The header and first fields of the block at v; false if v is not a
 * readable block (an immediate, a null, unmapped). */
static bool read_block(const struct target *t, uint64_t v, struct block *b)
{
	uint64_t hd;

	if (is_int(v) || v < 4096 || (v & 7) || proc_read_mem(t->pid, v - 8, &hd, 8))
		return false;
	b->v = v;
	b->wosize = hd >> 10;
	b->tag = hd & 0xff;
	memset(b->f, 0, sizeof(b->f));
	return b->wosize == 0 ||
	       proc_read_mem(t->pid, v, b->f, 8 * (b->wosize < 5 ? b->wosize : 5)) == 0;
}

/* A value that may be a block of tag 0 and `wosize` fields, or the
 * constant constructor ending a list/tree (Val_int 0). */
static bool is_node_or_empty(const struct target *t, uint64_t w, uint64_t wosize)
{
	struct block b;

	return w == VAL_EMPTY || (!is_int(w) && read_block(t, w, &b) && b.tag == 0 && b.wosize == wosize);
}

/* Cells of the list at w, up to MAX_CELLS; *more if it goes on, *ended if
 * it ends in [] (else the chain was not a list). */
static unsigned list_length(const struct target *t, uint64_t w, bool *more, bool *ended)
{
	struct block b;
	unsigned n = 0;

	*more = *ended = false;
	while (w != VAL_EMPTY) {
		if (n == MAX_CELLS) {
			*more = true;
			return n;
		}
		if (!read_block(t, w, &b) || b.tag != 0 || b.wosize != 2)
			return n;
		n++;
		w = b.f[1];
	}
	*ended = true;
	return n;
}

/* The height of a Map or Set tree node (tag 0, wosize fields, the last
 * its height): 0 for Empty, -1 if w is not such a node. */
static int64_t node_height(const struct target *t, uint64_t w, uint64_t wosize)
{
	struct block b;

	if (w == VAL_EMPTY)
		return 0;
	if (is_int(w) || !read_block(t, w, &b) || b.tag != 0 || b.wosize != wosize || !is_int(b.f[wosize - 1]))
		return -1;
	return int_of(b.f[wosize - 1]);
}

static void closure_name(const struct target *t, uint64_t code, char *out, size_t len)
{
	const struct elf_symbol *s = code > t->bias ? elf_image_function_at(t->img, code - t->bias) : NULL;

	if (s)
		symbolize_demangle(s->name, out, len);
	else
		snprintf(out, len, "at 0x%llx", (unsigned long long)code);
}

/* What kind of value v is, in a word or three ("string", "int",
 * "record/tuple of 2 fields"): a container's element, as an example. */
static const char *kind_of(const struct target *t, uint64_t v, char *buf, size_t len)
{
	struct block b;

	if (is_int(v))
		return "int";
	if (!read_block(t, v, &b))
		return "?";
	switch (b.tag) {
	case STRING_TAG:
		return "string";
	case DOUBLE_TAG:
		return "float";
	case DOUBLE_ARRAY_TAG:
		return "float array";
	case CLOSURE_TAG:
		return "closure";
	case CUSTOM_TAG:
		return "custom block";
	case OBJECT_TAG:
		return "object or exception";
	case ABSTRACT_TAG:
		return "abstract block";
	case LAZY_TAG:
	case FORWARD_TAG:
		return "lazy value";
	case 0:
		if (b.wosize == 2)
			return "list or pair";
		snprintf(buf, len, "record/tuple of %llu fields", (unsigned long long)b.wosize);
		return buf;
	}
	snprintf(buf, len, "constructor (tag %u) of %llu fields", b.tag, (unsigned long long)b.wosize);
	return buf;
}

/* After the description in out: "; LABEL KIND", or "; LABEL KIND -> KIND"
 * with a second value (v2 != 0). */
static void example(const struct target *t, char *out, size_t len, const char *label, uint64_t v1, uint64_t v2)
{
	size_t n = strlen(out);
	char b1[48], b2[48];

	snprintf(out + n, len - n, "; %s %s%s%s", label, kind_of(t, v1, b1, sizeof(b1)), v2 ? " -> " : "",
		 v2 ? kind_of(t, v2, b2, sizeof(b2)) : "");
}

/* A Hashtbl.t's data array d: the binding of the first non-empty bucket
 * among the first 64 (Cons {key; data; next}) into *c.  1 found, 0 none
 * (all those buckets Empty), -1 unreadable or not buckets. */
static int first_binding(const struct target *t, const struct block *d, struct block *c)
{
	uint64_t bucket[64], n = d->wosize < 64 ? d->wosize : 64;

	if (proc_read_mem(t->pid, d->v, bucket, 8 * n))
		return -1;
	for (uint64_t i = 0; i < n; i++) {
		if (bucket[i] == VAL_EMPTY)
			continue;
		return !is_int(bucket[i]) && read_block(t, bucket[i], c) && c->tag == 0 && c->wosize == 3 ? 1 : -1;
	}
	return 0;
}

/* The stdlib records and list cells of tag 0; false if none fits. */
static bool describe_record(const struct target *t, const struct block *b, char *out, size_t len)
{
	struct block d, c;
	bool more, ended;
	unsigned n;
	int64_t h, hl, hr;
	int found;

	/* Hashtbl: at least 16 buckets, a power of 2 (hashtbl.ml
	 * power_2_above 16); a binding in the first 64 buckets when they are
	 * all there is and it has any; initial_size negative during an
	 * iteration (flip_ongoing_traversal) */
	if (b->wosize == 4 && is_int(b->f[0]) && !is_int(b->f[1]) && is_int(b->f[2]) && is_int(b->f[3]) &&
	    read_block(t, b->f[1], &d) && d.tag == 0 && d.wosize >= 16 && !(d.wosize & (d.wosize - 1)) &&
	    int_of(b->f[3]) != 0 && int_of(b->f[0]) >= 0 && (found = first_binding(t, &d, &c)) >= 0 &&
	    (found || int_of(b->f[0]) == 0 || d.wosize > 64)) {
		snprintf(out, len, "Hashtbl.t (by its shape): %lld binding%s in %llu buckets", (long long)int_of(b->f[0]),
			 int_of(b->f[0]) == 1 ? "" : "s", (unsigned long long)d.wosize);
		if (found)
			example(t, out, len, "a binding:", c.f[0], c.f[1]);
		return true;
	}
	if (b->wosize == 4 && !is_int(b->f[0]) && is_int(b->f[1]) && is_int(b->f[2]) && !is_int(b->f[3]) &&
	    read_block(t, b->f[0], &d) && d.tag == STRING_TAG) {
		snprintf(out, len, "Buffer.t (by its shape): %lld bytes used of %lld", (long long)int_of(b->f[1]),
			 (long long)int_of(b->f[2]));
		return true;
	}
	if (b->wosize == 3 && is_int(b->f[0]) && int_of(b->f[0]) >= 0 && is_node_or_empty(t, b->f[1], 2) &&
	    is_node_or_empty(t, b->f[2], 2) && (b->f[1] == VAL_EMPTY) == (b->f[2] == VAL_EMPTY)) {
		snprintf(out, len, "Queue.t (by its shape): %lld element%s", (long long)int_of(b->f[0]),
			 int_of(b->f[0]) == 1 ? "" : "s");
		if (b->f[1] != VAL_EMPTY && read_block(t, b->f[1], &d))
			example(t, out, len, "the first:", d.f[0], 0);
		return true;
	}
	/* Map/Set: a node's height is one more than its higher child's */
	h = b->wosize == 5 || b->wosize == 4 ? node_height(t, b->v, b->wosize) : -1;
	hl = h >= 1 ? node_height(t, b->f[0], b->wosize) : -1;
	hr = hl >= 0 ? node_height(t, b->f[b->wosize - 2], b->wosize) : -1;
	if (hr >= 0 && h < 64 && h == 1 + (hl > hr ? hl : hr)) {
		snprintf(out, len, "%s.t (by its shape): a tree of height %lld", b->wosize == 5 ? "Map" : "Set",
			 (long long)int_of(b->f[b->wosize - 1]));
		example(t, out, len, "at the root:", b->f[1], b->wosize == 5 ? b->f[2] : 0);
		return true;
	}
	if (b->wosize == 2 && is_int(b->f[1]) && int_of(b->f[1]) >= 0 && is_node_or_empty(t, b->f[0], 2)) {
		n = list_length(t, b->f[0], &more, &ended);
		if (more ? int_of(b->f[1]) > MAX_CELLS : ended && int_of(b->f[1]) == (int64_t)n) {
			snprintf(out, len, "Stack.t (by its shape): %lld element%s", (long long)int_of(b->f[1]),
				 int_of(b->f[1]) == 1 ? "" : "s");
			if (b->f[0] != VAL_EMPTY && read_block(t, b->f[0], &d))
				example(t, out, len, "the top:", d.f[0], 0);
			return true;
		}
	}
	/* a list: cells of two fields ending in [] (one cell alone could be a
	 * pair whose second is 0, false, None...) */
	if (b->wosize == 2 && is_node_or_empty(t, b->f[1], 2)) {
		n = list_length(t, b->v, &more, &ended);
		if (!more && !ended)
			return false;
		snprintf(out, len, "list of %s%u element%s%s", more ? "more than " : "", n, n == 1 && !more ? "" : "s",
			 n == 1 ? " (by its shape)" : "");
		example(t, out, len, "the head:", b->f[0], 0);
		return true;
	}
	return false;
}

/* The code a closure runs: field 0, or with an arity other than 1 (field
 * 1 is closinfo: arity << 56 | start of environment << 1 | 1, 4.12+
 * runtime/caml/mlvalues.h) field 2, field 0 then being caml_curryN or
 * caml_tuplifyN (4.14 asmcomp/cmm_helpers.ml). */
static uint64_t closure_code(const struct block *b)
{
	int64_t arity = (int64_t)b->f[1] >> 56;

	return b->wosize > 2 && arity != 1 && arity != 0 ? b->f[2] : b->f[0];
}

/* A closure by its function's name and what it captured; a partial
 * application (its code a caml_curryN_K or caml_curryN_K_app, whose last
 * field is the closure applied: cmm_helpers.ml intermediate_curry_functions)
 * by the function applied, through at most 4 of them. */
static void describe_closure(const struct target *t, const struct block *c, const char *note, char *out, size_t len,
			     uint64_t *code)
{
	uint64_t env = c->wosize > 1 ? (c->f[1] << 8) >> 9 : c->wosize;
	uint64_t captured = env < c->wosize ? c->wosize - env : 0, last;
	struct block b = *c, inner;
	bool partial = false;
	char name[96];

	for (int k = 0; k < 5; k++) {
		*code = closure_code(&b);
		closure_name(t, *code, name, sizeof(name));
		if (k == 4 || strncmp(name, "caml_curry", 10) || b.wosize < 3 ||
		    proc_read_mem(t->pid, b.v + 8 * (b.wosize - 1), &last, 8) || !read_block(t, last, &inner) ||
		    inner.tag != CLOSURE_TAG)
			break;
		partial = true;
		b = inner;
	}
	if (partial)
		snprintf(out, len, "partial application of %s%s", name, note);
	else
		snprintf(out, len, "closure %s%s capturing %llu value%s", name, note, (unsigned long long)captured,
			 captured == 1 ? "" : "s");
}

static void describe(const struct target *t, uint64_t v, int depth, char *out, size_t len, uint64_t *code)
{
	struct block b;
	char name[96];

	if (is_int(v)) {
		snprintf(out, len, "the integer %lld", (long long)int_of(v));
		return;
	}
	if (!read_block(t, v, &b)) {
		snprintf(out, len, "an unreadable value 0x%llx", (unsigned long long)v);
		return;
	}
	switch (b.tag) {
	case CLOSURE_TAG:
		describe_closure(t, &b, "", out, len, code);
		return;
	case INFIX_TAG: { /* a closure inside a set of mutually recursive ones: its fields from v
			   * on (its closinfo's environment offset counts from v) */
		struct block c;

		if (read_block(t, v - 8 * b.wosize, &c) && c.tag == CLOSURE_TAG && c.wosize > b.wosize) {
			b.wosize = c.wosize - b.wosize;
			describe_closure(t, &b, " (of a recursive set)", out, len, code);
			return;
		}
		break;
	}
	case STRING_TAG: {
		uint8_t last = 0;

		if (b.wosize)
			proc_read_mem(t->pid, v + 8 * b.wosize - 1, &last, 1);
		snprintf(out, len, "string of %llu bytes", (unsigned long long)(b.wosize ? 8 * b.wosize - 1 - last : 0));
		return;
	}
	case DOUBLE_TAG:
		snprintf(out, len, "float");
		return;
	case DOUBLE_ARRAY_TAG:
		snprintf(out, len, "float array of %llu elements", (unsigned long long)b.wosize);
		return;
	case CUSTOM_TAG: {
		uint64_t id = 0;

		/* the identifier, up to 32 bytes, not past its page */
		memset(name, 0, sizeof(name));
		if (proc_read_mem(t->pid, b.f[0], &id, 8) ||
		    proc_read_mem(t->pid, id, name, 4096 - (id & 4095) < 32 ? 4096 - (id & 4095) : 32))
			strcpy(name, "?");
		name[32] = 0;
		snprintf(out, len, "custom block %s (%llu words)", name, (unsigned long long)b.wosize);
		return;
	}
	case ABSTRACT_TAG:
		snprintf(out, len, "abstract block of %llu words (a weak array or ephemeron, or C data)",
			 (unsigned long long)b.wosize);
		return;
	case LAZY_TAG:
		snprintf(out, len, "lazy value, not forced");
		return;
	case FORWARD_TAG:
		snprintf(out, len, "forced lazy value");
		return;
	case OBJECT_TAG: {
		/* an exception constructor: its name (a string) and id
		 * (runtime/caml/mlvalues.h Object_tag; 4.14 translcore.ml) */
		struct block nm;

		if (b.wosize == 2 && read_block(t, b.f[0], &nm) && nm.tag == STRING_TAG && nm.wosize &&
		    proc_read_mem(t->pid, b.f[0], name, 8 * (nm.wosize < 12 ? nm.wosize : 12)) == 0) {
			name[nm.wosize < 12 ? 8 * nm.wosize - 1 : 95] = 0; /* a longer name: its first 95 bytes */
			snprintf(out, len, "exception %s", name);
		} else {
			snprintf(out, len, "object (%llu words)", (unsigned long long)b.wosize);
		}
		return;
	}
	case 0:
		if (describe_record(t, &b, out, len))
			return;
		if (b.wosize == 1 && depth < 2) {
			int n = snprintf(out, len, "ref or Some of ");

			if (n > 0 && (size_t)n < len)
				describe(t, b.f[0], depth + 1, out + n, len - (size_t)n, code);
			return;
		}
		break;
	}
	snprintf(out, len, "block of tag %u, %llu fields%s", b.tag, (unsigned long long)b.wosize,
		 b.tag == 0 ? " (an array, record or tuple)" : " (a variant)");
}

int shape4_describe(const struct target *t, uint64_t v, char *out, size_t len, uint64_t *code)
{
	uint64_t hd, none;

	if (!code)
		code = &none;
	*code = 0;
	if (!is_int(v) && proc_read_mem(t->pid, v - 8, &hd, 8)) {
		snprintf(out, len, "an unreadable value 0x%llx", (unsigned long long)v);
		return -EFAULT;
	}
	describe(t, v, 0, out, len, code);
	return 0;
}
