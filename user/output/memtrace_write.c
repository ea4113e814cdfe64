/* memtrace_write.c -- the memtrace trace format v3 writer (memtrace.h):
 * events coded into packets as memtrace's own writer codes them (buf.ml,
 * location_codec.ml, backtrace_codec.ml), the trace_info packet last
 * written but first in the file.
 */
#define _GNU_SOURCE
#include "output/memtrace.h"
#include "output/memtrace_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- little-endian buffer ------------------------------------------- */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
};

static int wb_reserve(struct wbuf *b, size_t n)
{
	if (b->len + n <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n)
		cap *= 2;
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* All puts assume wb_reserve was called for the event's worst case. */
static void put8(struct wbuf *b, uint8_t v) { b->p[b->len++] = v; }
static void put16(struct wbuf *b, uint16_t v) { put8(b, v & 0xff); put8(b, v >> 8); }
static void put32(struct wbuf *b, uint32_t v) { put16(b, v & 0xffff); put16(b, v >> 16); }
static void put64(struct wbuf *b, uint64_t v) { put32(b, (uint32_t)v); put32(b, (uint32_t)(v >> 32)); }
static void set16(uint8_t *p, uint16_t v) { p[0] = v & 0xff; p[1] = v >> 8; }
static void set32(uint8_t *p, uint32_t v) { set16(p, v & 0xffff); set16(p + 2, v >> 16); }
static void set64(uint8_t *p, uint64_t v) { set32(p, (uint32_t)v); set32(p + 4, (uint32_t)(v >> 32)); }

/* buf.ml put_vint: 0..252 in a byte, else 253 + u16, 254 + i32, 255 + i64. */
static void put_vint(struct wbuf *b, int64_t v)
{
	if (v >= 0 && v <= 252) {
		put8(b, (uint8_t)v);
	} else if (v >= 0 && v <= 0xffff) {
		put8(b, 253);
		put16(b, (uint16_t)v);
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		put8(b, 254);
		put32(b, (uint32_t)(int32_t)v);
	} else {
		put8(b, 255);
		put64(b, (uint64_t)v);
	}
}

/* buf.ml put_string: up to the first NUL, then a NUL. */
static size_t str_wire_len(const char *s) { return strlen(s ? s : "") + 1; }
static void put_str(struct wbuf *b, const char *s)
{
	size_t n = strlen(s ? s : "");
	memcpy(b->p + b->len, s ? s : "", n);
	b->len += n;
	put8(b, 0);
}

/* ---- packet header (trace.ml put_ctf_header / get_ctf_header) -------- */

static void put_header(struct wbuf *b, uint64_t pid, uint16_t domain)
{
	put32(b, MT_MAGIC);
	put32(b, 0);       /* packet size in bits, set at the end */
	put64(b, 0);       /* timestamp_begin */
	put64(b, 0);       /* timestamp_end */
	put32(b, 0);       /* flush_duration */
	put16(b, MT_VERSION);
	put64(b, pid);
	put16(b, domain);
	put16(b, 0xffff);  /* cache verifier disabled */
	put16(b, 0);
	put64(b, 0);
	put64(b, 0);       /* alloc_id_begin */
	put64(b, 0);       /* alloc_id_end (exclusive) */
}

static void finish_header(uint8_t *p, size_t packet_bytes, uint64_t t_begin, uint64_t t_end, uint64_t id_begin,
			  uint64_t id_end)
{
	set32(p + 4, (uint32_t)(packet_bytes * 8));
	set64(p + 8, t_begin);
	set64(p + 16, t_end);
	set64(p + 52, id_begin);
	set64(p + 60, id_end);
}

static void put_event_header(struct wbuf *b, unsigned code, uint64_t t_us)
{
	put32(b, ((uint32_t)code << EV_TIME_BITS) | ((uint32_t)t_us & EV_TIME_MASK));
}

/* ---- move-to-front tables, writer side (memtrace_internal.h) -------- */

/* Writer side of Mtf_table.encode: returns the index emitted (0..30, or
 * 31 = not found, pushed with a fresh table).  -ENOMEM on failure. */
static int mtf_encode_file(struct mtf_files *t, const char *s, struct mtf_defs **defs)
{
	for (int i = 0; i < MTF_LEN; i++) {
		if (!t->name[i])
			break;
		if (!strcmp(t->name[i], s)) {
			mtf_files_swap(t, i);
			*defs = t->defs[0];
			return i;
		}
	}
	char *n = strdup(s);
	struct mtf_defs *d = calloc(1, sizeof(*d));
	if (!n || !d) {
		free(n);
		free(d);
		return -ENOMEM;
	}
	mtf_files_push(t, n, d);
	*defs = d;
	return MTF_NOT_FOUND;
}

static int mtf_encode_def(struct mtf_defs *t, const char *s)
{
	for (int i = 0; i < MTF_LEN; i++) {
		if (!t->name[i])
			break;
		if (!strcmp(t->name[i], s)) {
			mtf_defs_swap(t, i);
			return i;
		}
	}
	char *n = strdup(s);
	if (!n)
		return -ENOMEM;
	mtf_defs_push(t, n);
	return MTF_NOT_FOUND;
}

/* ---- writer ---------------------------------------------------------- */

struct mt_writer {
	FILE *body;
	uint64_t pid;
	uint64_t start_us;
	struct wbuf pkt;          /* the packet being filled (header first) */
	struct wbuf ev;           /* scratch: one event */
	uint64_t pkt_begin_us, pkt_end_us;
	uint64_t pkt_id_begin;
	uint64_t next_id;         /* allocation ids handed out */
	uint64_t last_us;
	bool pkt_has_events;
	bool failed;
	/* backtrace cache (backtrace_codec.ml Writer) */
	uint64_t cache[MT_CACHE_SIZE];
	uint64_t cache_date[MT_CACHE_SIZE];
	uint16_t cache_next[MT_CACHE_SIZE];
	uint64_t *last_bt;        /* previous backtrace, outermost first */
	size_t last_bt_len, last_bt_cap;
	struct mtf_files files;
	FILE *log;
};

void mt_writer_set_log(struct mt_writer *w, FILE *log) { w->log = log; }

static void pkt_reset(struct mt_writer *w, uint64_t now)
{
	w->pkt.len = 0;
	put_header(&w->pkt, w->pid, 0);
	w->pkt_begin_us = w->pkt_end_us = now;
	w->pkt_id_begin = w->next_id;
	w->pkt_has_events = false;
}

int mt_writer_new(FILE *body, uint64_t pid, uint64_t start_us, struct mt_writer **out)
{
	struct mt_writer *w = calloc(1, sizeof(*w));
	if (!w || wb_reserve(&w->pkt, MT_MAX_PACKET_BYTES) < 0) {
		if (w)
			free(w->pkt.p);
		free(w);
		return -ENOMEM;
	}
	w->body = body;
	w->pid = pid;
	w->start_us = start_us;
	w->last_us = start_us;
	pkt_reset(w, start_us);
	*out = w;
	return 0;
}

static int pkt_flush(struct mt_writer *w, uint64_t now)
{
	if (w->pkt_has_events) {
		finish_header(w->pkt.p, w->pkt.len, w->pkt_begin_us, w->pkt_end_us, w->pkt_id_begin, w->next_id);
		if (fwrite(w->pkt.p, 1, w->pkt.len, w->body) != w->pkt.len) {
			w->failed = true;
			return -EIO;
		}
	}
	pkt_reset(w, now);
	return 0;
}

/* Time of a new event: never before the last one. */
static uint64_t ev_time(struct mt_writer *w, uint64_t t_us)
{
	if (t_us < w->last_us)
		t_us = w->last_us;
	return t_us;
}

/* Append the scratch event (whose header carries time t) to the packet,
 * flushing first if it does not fit or the packet would span >= 30 s. */
static int commit_event(struct mt_writer *w, uint64_t t, unsigned nallocs)
{
	int ret;
	if (w->failed)
		return -EIO;
	if (w->pkt_has_events &&
	    (w->pkt.len + w->ev.len > MT_MAX_PACKET_BYTES || t - w->pkt_begin_us >= MT_PACKET_MAX_US)) {
		if ((ret = pkt_flush(w, t)) < 0)
			return ret;
	}
	if (!w->pkt_has_events) {
		w->pkt_begin_us = t;
		w->pkt_id_begin = w->next_id;
	}
	if (w->pkt.len + w->ev.len > MT_MAX_PACKET_BYTES)
		return -E2BIG; /* cannot happen: events are bounded */
	memcpy(w->pkt.p + w->pkt.len, w->ev.p, w->ev.len);
	w->pkt.len += w->ev.len;
	w->pkt_end_us = t;
	w->pkt_has_events = true;
	w->last_us = t;
	w->next_id += nallocs;
	return 0;
}

/* location_codec.ml Writer.put_location */
int mt_put_location(struct mt_writer *w, uint64_t t_us, uint64_t code, const struct mt_location *locs, size_t n)
{
	static const struct mt_location unknown = { "<unknown>", "??", 1, 1, 1 };
	size_t worst = 8 + 1;
	if (code >> 63)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		worst += 6 + str_wire_len(locs[i].filename) + str_wire_len(locs[i].defname);
	if (n > MT_MAX_LOCS || worst > MT_MAX_LOC_BYTES) {
		locs = &unknown;
		n = 1;
		worst = 8 + 1 + 6 + 10 + 3;
	}
	w->ev.len = 0;
	if (wb_reserve(&w->ev, 4 + worst) < 0)
		return -ENOMEM;
	uint64_t t = ev_time(w, t_us);
	put_event_header(&w->ev, MT_EV_LOCATION, t);
	put64(&w->ev, code);
	put8(&w->ev, (uint8_t)n);
	struct mt_location logged[MT_MAX_LOCS];
	for (size_t i = 0; i < n; i++) {
		const struct mt_location *l = &locs[i];
		const char *file = l->filename ? l->filename : "";
		const char *def = l->defname ? l->defname : "";
		uint64_t line = l->line > 0xfffff ? 0xfffff : l->line;
		uint64_t sc = l->start_char > 0xff ? 0xff : l->start_char;
		uint64_t ec = l->end_char > 0x3ff ? 0x3ff : l->end_char;
		struct mtf_defs *defs;
		int fcode = mtf_encode_file(&w->files, file, &defs);
		if (fcode < 0)
			return fcode;
		int dcode = mtf_encode_def(defs, def);
		if (dcode < 0)
			return dcode;
		uint64_t enc = line | sc << 20 | ec << 28 | (uint64_t)fcode << 38 | (uint64_t)dcode << 43;
		logged[i] = (struct mt_location){ file, def, (uint32_t)line, (uint32_t)sc, (uint32_t)ec };
		put32(&w->ev, (uint32_t)enc);
		put16(&w->ev, (uint16_t)(enc >> 32));
		if (fcode == MTF_NOT_FOUND)
			put_str(&w->ev, file);
		if (dcode == MTF_NOT_FOUND)
			put_str(&w->ev, def);
	}
	int ret = commit_event(w, t, 0);
	if (!ret && w->log) {
		struct mt_event e = { .type = MT_EV_LOCATION, .time_us = t, .code = code, .locs = logged, .nlocs = n };
		mt_event_print(w->log, &e);
	}
	return ret;
}

static void put_hit(struct wbuf *b, unsigned bucket, unsigned ncorrect)
{
	if (ncorrect == 0) {
		put16(b, bucket << 2);
	} else if (ncorrect == 1) {
		put16(b, bucket << 2 | 1);
	} else {
		put16(b, bucket << 2 | 2);
		put8(b, (uint8_t)ncorrect);
	}
}

/* backtrace_codec.ml Writer.put_backtrace, over codes[from..n) (outermost
 * first; memtrace walks its callee-first array from the end, the same
 * order).  Returns the codewords written. */
static size_t put_backtrace(struct mt_writer *w, struct wbuf *b, const uint64_t *codes, size_t from, size_t n)
{
	const unsigned mask = MT_CACHE_SIZE - 1;
	uint64_t date = w->next_id;
	unsigned pred = 0, orig_hit = 0, ncorrect = 0;
	bool in_run = false;
	size_t ncodes = 0;
	for (size_t pos = from; pos < n;) {
		uint64_t code = codes[pos];
		if (in_run) {
			unsigned pb = w->cache_next[pred];
			if (w->cache[pb] == code) {
				if (ncorrect == 255) {
					/* overflow: close the run, code this frame as a fresh hit */
					put_hit(b, orig_hit, ncorrect);
					w->cache_date[pb] = date;
					w->cache_next[pred] = (uint16_t)pb;
					orig_hit = pred = pb;
					ncorrect = 0;
					ncodes++;
					pos++;
					continue;
				}
				ncorrect++;
				pred = pb;
				pos++;
				continue;
			}
			put_hit(b, orig_hit, ncorrect);
			in_run = false;
			/* fall through: code `code` without a prediction */
		}
		unsigned h1 = (unsigned)(((code * 0x4983723u) >> 11) & mask);
		unsigned h2 = (unsigned)(((code * 0xfdea731u) >> 21) & mask);
		unsigned hit = MT_CACHE_SIZE;
		if (w->cache[h1] == code)
			hit = h1;
		else if (w->cache[h2] == code)
			hit = h2;
		if (hit != MT_CACHE_SIZE) {
			w->cache_date[hit] = date;
			w->cache_next[pred] = (uint16_t)hit;
			orig_hit = pred = hit;
			ncorrect = 0;
			in_run = true;
			ncodes++;
		} else {
			unsigned bucket = w->cache_date[h1] < w->cache_date[h2] ? h1 : h2;
			w->cache[bucket] = code;
			w->cache_date[bucket] = date;
			w->cache_next[pred] = (uint16_t)bucket;
			put16(b, (uint16_t)(bucket << 2 | 3));
			put64(b, code);
			pred = bucket;
			ncodes++;
		}
		pos++;
	}
	if (in_run)
		put_hit(b, orig_hit, ncorrect);
	return ncodes;
}

int mt_put_alloc(struct mt_writer *w, uint64_t t_us, uint64_t length, uint64_t nsamples, enum mt_source source,
		 const uint64_t *codes, size_t ncodes, uint64_t *id)
{
	size_t common = 0;
	if (nsamples < 1 || source > MT_SRC_EXTERNAL || (ncodes && !codes) || length > (uint64_t)INT64_MAX ||
	    nsamples > (uint64_t)INT64_MAX)
		return -EINVAL;
	for (size_t i = 0; i < ncodes; i++)
		if (codes[i] >> 63)
			return -EINVAL;
	while (common < ncodes && common < w->last_bt_len && codes[common] == w->last_bt[common])
		common++;
	size_t new_len = ncodes - common;
	if (new_len > MT_MAX_NEW_CODES)
		return -E2BIG;
	if (ncodes > w->last_bt_cap) {
		size_t cap = ncodes * 2;
		uint64_t *p = realloc(w->last_bt, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		w->last_bt = p;
		w->last_bt_cap = cap;
	}
	w->ev.len = 0;
	if (wb_reserve(&w->ev, 64 + new_len * 11) < 0)
		return -ENOMEM;
	uint64_t t = ev_time(w, t_us);
	bool is_short = length >= 1 && length <= 16 && source == MT_SRC_MINOR && nsamples == 1 && new_len < 256;
	size_t len_off;
	put_event_header(&w->ev, is_short ? 100 + (unsigned)length : MT_EV_ALLOC, t);
	if (is_short) {
		put_vint(&w->ev, (int64_t)common);
		len_off = w->ev.len;
		put8(&w->ev, 0);
	} else {
		put_vint(&w->ev, (int64_t)length);
		put_vint(&w->ev, (int64_t)nsamples);
		put8(&w->ev, (uint8_t)source);
		put_vint(&w->ev, (int64_t)common);
		len_off = w->ev.len;
		put16(&w->ev, 0);
	}
	size_t nenc = put_backtrace(w, &w->ev, codes, common, ncodes);
	if (is_short)
		w->ev.p[len_off] = (uint8_t)nenc;
	else
		set16(w->ev.p + len_off, (uint16_t)nenc);
	if (ncodes)
		memcpy(w->last_bt, codes, ncodes * sizeof(*codes));
	w->last_bt_len = ncodes;
	uint64_t my_id = w->next_id;
	int ret = commit_event(w, t, 1);
	if (ret < 0)
		return ret;
	if (id)
		*id = my_id;
	if (w->log) {
		struct mt_event e = { .type = MT_EV_ALLOC, .time_us = t, .id = my_id, .length = length,
				      .nsamples = nsamples, .source = source, .codes = codes, .ncodes = ncodes };
		mt_event_print(w->log, &e);
	}
	return 0;
}

static int put_fate(struct mt_writer *w, unsigned code, uint64_t t_us, uint64_t id)
{
	if (id >= w->next_id)
		return -EINVAL;
	w->ev.len = 0;
	if (wb_reserve(&w->ev, 16) < 0)
		return -ENOMEM;
	uint64_t t = ev_time(w, t_us);
	put_event_header(&w->ev, code, t);
	put_vint(&w->ev, (int64_t)(w->next_id - 1 - id));
	int ret = commit_event(w, t, 0);
	if (!ret && w->log) {
		struct mt_event e = { .type = code, .time_us = t, .id = id };
		mt_event_print(w->log, &e);
	}
	return ret;
}

int mt_put_promote(struct mt_writer *w, uint64_t t_us, uint64_t id) { return put_fate(w, MT_EV_PROMOTE, t_us, id); }
int mt_put_collect(struct mt_writer *w, uint64_t t_us, uint64_t id) { return put_fate(w, MT_EV_COLLECT, t_us, id); }
uint64_t mt_writer_allocs(const struct mt_writer *w) { return w->next_id; }
uint64_t mt_writer_last_us(const struct mt_writer *w) { return w->last_us; }

int mt_writer_finish(struct mt_writer *w, const struct mt_info *info, FILE *out)
{
	struct wbuf b = { 0 };
	int ret = pkt_flush(w, w->last_us);
	if (ret < 0)
		return ret;
	if (fflush(w->body) == EOF || ferror(w->body))
		return -EIO;
	size_t need = MT_HEADER_BYTES + 4 + 8 + 1 + 8 + str_wire_len(info->executable) + str_wire_len(info->host) +
		      str_wire_len(info->runtime_params) + str_wire_len(info->context);
	if (need > MT_MAX_PACKET_BYTES)
		return -E2BIG;
	if (wb_reserve(&b, need) < 0)
		return -ENOMEM;
	put_header(&b, w->pid, info->domain);
	put_event_header(&b, MT_EV_TRACE_INFO, w->start_us);
	uint64_t rate_bits;
	memcpy(&rate_bits, &info->sample_rate, sizeof(rate_bits));
	put64(&b, rate_bits);
	put8(&b, info->word_size_bits);
	put_str(&b, info->executable);
	put_str(&b, info->host);
	put_str(&b, info->runtime_params);
	put64(&b, w->pid);
	put_str(&b, info->context);
	finish_header(b.p, b.len, w->start_us, w->start_us, 0, 0);
	if (fwrite(b.p, 1, b.len, out) != b.len || fflush(out) == EOF) {
		int e = errno ? errno : EIO;
		free(b.p);
		return -e;
	}
	free(b.p);
	/* then the body */
	if (fseeko(w->body, 0, SEEK_SET) < 0)
		return -errno;
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), w->body)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			return -(errno ? errno : EIO);
	if (fflush(out) == EOF)
		return -(errno ? errno : EIO);
	if (ferror(w->body))
		return -EIO;
	/* more events may follow (a copy written while recording) */
	if (fseeko(w->body, 0, SEEK_END) < 0)
		return -errno;
	return 0;
}

void mt_writer_free(struct mt_writer *w)
{
	if (!w)
		return;
	free(w->pkt.p);
	free(w->ev.p);
	free(w->last_bt);
	mtf_files_clear(&w->files);
	free(w);
}
