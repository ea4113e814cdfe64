/* fuzz_memtrace.c -- libFuzzer target: memtrace.c's writer and reader
 * against each other, and the reader against arbitrary bytes.
 *
 * Each input is used twice:
 *  1. as a trace: the reader must return an error or events, never crash,
 *     hang or read out of bounds (AddressSanitizer);
 *  2. as a program that drives the writer: time steps (small, over the 30 s
 *     packet span, backwards), location definitions (0..3 entries, or more
 *     than 255; over 50 file and definition names, so the 31-entry
 *     move-to-front tables evict; lines and characters beyond their field
 *     widths), allocations whose backtraces share a random prefix with the
 *     previous one and add a random suffix (up to 700 codes, so deeper than
 *     255, from a pool of up to 16384 codes, so many distinct codes a
 *     packet), promotions and collections of earlier objects.  The trace
 *     is then read back and every event must print exactly as the writer
 *     logged it (mt_event_print); any difference aborts.
 * Built by `make fuzz` (clang -fsanitize=fuzzer,address,undefined); `make
 * test` runs it for a bounded number of inputs.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "output/memtrace.h"

struct in {
	const uint8_t *p;
	size_t n, i;
};

static unsigned take8(struct in *in) { return in->i < in->n ? in->p[in->i++] : 0; }
static unsigned take16(struct in *in) { return take8(in) | take8(in) << 8; }
static uint32_t take32(struct in *in) { return take16(in) | (uint32_t)take16(in) << 16; }

static void read_raw(const uint8_t *data, size_t size)
{
	struct mt_reader *r;
	struct mt_event e;
	char err[256];

	if (mt_reader_open_mem(data, size, &r, err, sizeof(err)) < 0)
		return;
	for (int k = 0; k < 1000000 && mt_reader_next(r, &e) > 0; k++) {
		if (e.type == MT_EV_ALLOC)
			for (size_t i = 0; i < e.ncodes; i++)
				(void)e.codes[i];
	}
	mt_reader_close(r);
}

#define POOL_MAX 16384
#define MAX_BT 1200

static uint64_t code_of(unsigned k) { return 0x400000ull + (uint64_t)k * 16; }

static void roundtrip(const uint8_t *data, size_t size)
{
	struct in in = { data, size, 0 };
	char *wlog = NULL, *rlog = NULL;
	size_t wlen = 0, rlen = 0;
	FILE *wl = open_memstream(&wlog, &wlen);
	FILE *body = tmpfile(), *out = tmpfile();
	struct mt_writer *w;
	uint64_t t = 1700000000000000ull, start = t, nalloc = 0;
	uint64_t bt[MAX_BT], prev[MAX_BT];
	size_t prev_len = 0;
	unsigned pool = 1 + (take16(&in) % POOL_MAX);
	static uint8_t defined[POOL_MAX];
	char names[8][64];

	memset(defined, 0, sizeof(defined));
	if (!wl || !body || !out || mt_writer_new(body, 4242, start, &w) < 0)
		abort();
	mt_writer_set_log(w, wl);
	for (int ops = 0; in.i < in.n && ops < 20000; ops++) {
		unsigned op = take8(&in);
		switch (op % 10) {
		case 0:
			t += take16(&in);
			break;
		case 1:
			t += (uint64_t)(take8(&in) % 64) * 1000000; /* beyond a packet's 30 s */
			break;
		case 2:
			t -= take8(&in); /* backwards: the writer raises it */
			if (t < start)
				t = start;
			break;
		case 3:
		case 4:
		case 5:
		case 6: {
			size_t keep = prev_len ? take16(&in) % (prev_len + 1) : 0, extra;
			unsigned sel = take8(&in);

			extra = sel < 8 ? 256 + take16(&in) % 450 : sel % 12;
			if (keep + extra > MAX_BT)
				extra = MAX_BT - keep;
			memcpy(bt, prev, keep * sizeof(bt[0]));
			for (size_t i = keep; i < keep + extra; i++) {
				/* runs of codes that repeat earlier ones: predictions */
				unsigned k = sel & 1 && i > 0 ? (unsigned)((bt[i - 1] - 0x400000) / 16 + 1) % pool
							     : take16(&in) % pool;
				bt[i] = code_of(k);
			}
			size_t n = keep + extra;
			for (size_t i = 0; i < n; i++) {
				unsigned k = (unsigned)((bt[i] - 0x400000) / 16);
				if (defined[k])
					continue;
				defined[k] = 1;
				unsigned nl = take8(&in);
				nl = nl == 255 ? 256 + take8(&in) : nl % 4;
				struct mt_location *locs = calloc(nl ? nl : 1, sizeof(*locs));
				if (!locs)
					abort();
				for (unsigned j = 0; j < nl; j++) {
					unsigned f = take8(&in) % 50, d = take8(&in) % 50;
					snprintf(names[(2 * j) % 8], sizeof(names[0]), "src/dir%u/file%u.ml", f % 3, f);
					snprintf(names[(2 * j + 1) % 8], sizeof(names[0]), "Mod%u.fun%u", f, d);
					locs[j] = (struct mt_location){
						.filename = strdup(names[(2 * j) % 8]),
						.defname = strdup(names[(2 * j + 1) % 8]),
						.line = take32(&in) >> (take8(&in) % 32),
						.start_char = take16(&in) >> (take8(&in) % 16),
						.end_char = take16(&in) >> (take8(&in) % 16),
					};
				}
				if (mt_put_location(w, t, bt[i], locs, nl) < 0)
					abort();
				for (unsigned j = 0; j < nl; j++) {
					free((char *)locs[j].filename);
					free((char *)locs[j].defname);
				}
				free(locs);
			}
			uint64_t len = take8(&in) < 200 ? take8(&in) % 20 : take32(&in);
			uint64_t ns = 1 + take8(&in) % (len < 250 ? len + 1 : 250);
			enum mt_source src = (enum mt_source)(take8(&in) % 3);
			uint64_t id;
			if (mt_put_alloc(w, t, len, ns, src, bt, n, &id) < 0 || id != nalloc)
				abort();
			nalloc++;
			memcpy(prev, bt, n * sizeof(bt[0]));
			prev_len = n;
			break;
		}
		case 7:
		case 8:
		case 9:
			if (nalloc) {
				uint64_t id = take32(&in) % nalloc;
				int ret = op % 10 == 7 ? mt_put_promote(w, t, id) : mt_put_collect(w, t, id);
				if (ret < 0)
					abort();
			}
			break;
		}
	}
	struct mt_info info = { .sample_rate = 1e-4, .word_size_bits = 64, .executable = "/bin/fuzz",
				.host = "h", .runtime_params = "", .pid = 4242, .start_us = start, .context = "" };
	if (mt_writer_finish(w, &info, out) < 0)
		abort();
	mt_writer_free(w);
	fclose(wl);

	/* read it back */
	long sz = ftell(out);
	char *buf = malloc(sz > 0 ? (size_t)sz : 1);
	rewind(out);
	if (!buf || fread(buf, 1, (size_t)sz, out) != (size_t)sz)
		abort();
	/* FUZZ_SAVE=path: keep the trace (a test reads it with camlheap report) */
	const char *save = getenv("FUZZ_SAVE");
	if (save && *save) {
		FILE *f = fopen(save, "wb");
		if (!f || fwrite(buf, 1, (size_t)sz, f) != (size_t)sz || fclose(f))
			abort();
	}
	struct mt_reader *r;
	struct mt_event e;
	char err[256];
	FILE *rl = open_memstream(&rlog, &rlen);
	int ret;
	if (mt_reader_open_mem(buf, (size_t)sz, &r, err, sizeof(err)) < 0) {
		fprintf(stderr, "reader refused the writer's trace: %s\n", err);
		abort();
	}
	size_t max_bt = 0, locs_in_packet = 0, max_locs_in_packet = 0, npackets = 0;
	uint32_t last_packet = 0;
	while ((ret = mt_reader_next(r, &e)) > 0) {
		mt_event_print(rl, &e);
		if (e.type == MT_EV_ALLOC && e.ncodes > max_bt)
			max_bt = e.ncodes;
		if (e.packet != last_packet)
			locs_in_packet = 0;
		last_packet = e.packet;
		if (e.type == MT_EV_LOCATION && ++locs_in_packet > max_locs_in_packet)
			max_locs_in_packet = locs_in_packet;
	}
	if (ret < 0) {
		fprintf(stderr, "reader failed on the writer's trace: %s\n", mt_reader_error(r));
		abort();
	}
	/* every packet within the format's limit: walk the headers */
	for (long off = 0; off < sz;) {
		uint32_t bits;
		memcpy(&bits, buf + off + 4, 4);
		if (bits / 8 > MT_MAX_PACKET_BYTES || bits % 8 || bits / 8 < MT_HEADER_BYTES)
			abort();
		off += bits / 8;
		npackets++;
	}
	if (getenv("FUZZ_STATS"))
		fprintf(stderr, "stats: %zu bytes, %zu packets, %llu allocs, deepest backtrace %zu codes, %zu locations "
				"in one packet at most\n",
			(size_t)sz, npackets, (unsigned long long)nalloc, max_bt, max_locs_in_packet);
	mt_reader_close(r);
	fclose(rl);
	if (wlen != rlen || memcmp(wlog, rlog, wlen)) {
		size_t i = 0;
		while (i < wlen && i < rlen && wlog[i] == rlog[i])
			i++;
		size_t ls = i;
		while (ls > 0 && wlog[ls - 1] != '\n')
			ls--;
		fprintf(stderr, "round trip differs at byte %zu:\nwriter: %.300s\nreader: %.300s\n", i, wlog + ls,
			rlog + ls);
		abort();
	}
	free(buf);
	free(wlog);
	free(rlog);
	fclose(body);
	fclose(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	read_raw(data, size);
	roundtrip(data, size);
	return 0;
}
