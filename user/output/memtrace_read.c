/* memtrace_read.c -- the memtrace trace format v3 reader (memtrace.h): a
 * whole trace mapped (or read, from a pipe) and decoded event by event,
 * with the checks memtrace's own reader makes.
 */
#define _GNU_SOURCE
#include "output/memtrace.h"
#include "output/memtrace_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MT_MAX_READ_BT (1u << 20) /* reader: refuse absurd backtraces */

/* ---- reader ---------------------------------------------------------- */

struct rdomain {
	uint16_t domain;
	struct mtf_files files;
	uint64_t cache_loc[MT_CACHE_SIZE];
	uint16_t cache_pred[MT_CACHE_SIZE];
	uint64_t *bt;             /* last backtrace */
	size_t bt_len, bt_cap;
	uint64_t last_us;
};

struct loc_def {
	struct mt_location *locs;
	size_t n;
};

struct mt_reader {
	uint8_t *data;
	size_t len;
	bool mapped;
	struct mt_info info;
	uint16_t version0;
	size_t pos;               /* next packet */
	/* current packet */
	const uint8_t *p, *end;   /* events still to read */
	uint64_t t_begin, t_end, id_end, next_id;
	uint16_t version;
	struct rdomain *dom;
	bool in_packet;
	GPtrArray *domains;       /* struct rdomain */
	GHashTable *locs;         /* code -> struct loc_def */
	GStringChunk *strings;
	unsigned skipped_pid, skipped_truncated;
	uint32_t packets;         /* packets read (trace_info included) */
	char err[256];
	/* scratch for location events */
	struct mt_location *scratch_locs;
};

static int rfail(struct mt_reader *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(r->err, sizeof(r->err), "malformed trace at byte %zu: ",
			 r->in_packet ? (size_t)(r->p - r->data) : r->pos);
	if (n > 0 && (size_t)n < sizeof(r->err))
		vsnprintf(r->err + n, sizeof(r->err) - n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Bounds-checked reads from [*p, end). */
struct rcur {
	const uint8_t *p, *end;
	bool bad;
};

static uint64_t get_n(struct rcur *c, int n)
{
	uint64_t v = 0;
	if (c->end - c->p < n) {
		c->bad = true;
		c->p = c->end;
		return 0;
	}
	for (int i = 0; i < n; i++)
		v |= (uint64_t)c->p[i] << (8 * i);
	c->p += n;
	return v;
}
#define get8(c) ((uint8_t)get_n(c, 1))
#define get16(c) ((uint16_t)get_n(c, 2))
#define get32(c) ((uint32_t)get_n(c, 4))
#define get64(c) (get_n(c, 8))

static int64_t get_vint(struct rcur *c)
{
	uint8_t b = get8(c);
	if (b < 253)
		return b;
	if (b == 253)
		return get16(c);
	if (b == 254)
		return (int32_t)get32(c);
	return (int64_t)get64(c);
}

static const char *get_str(struct mt_reader *r, struct rcur *c)
{
	const uint8_t *z = memchr(c->p, 0, c->end - c->p);
	if (!z) {
		c->bad = true;
		c->p = c->end;
		return "";
	}
	const char *s = g_string_chunk_insert_const(r->strings, (const char *)c->p);
	c->p = z + 1;
	return s;
}

struct hdr {
	uint32_t size_bits;
	uint64_t t_begin, t_end;
	uint16_t version;
	uint64_t pid;
	uint16_t domain;
	uint16_t v_ix, v_pred;
	uint64_t v_val;
	uint64_t id_begin, id_end;
	size_t header_bytes;
};

static int read_header(struct mt_reader *r, struct rcur *c, struct hdr *h)
{
	const uint8_t *start = c->p;
	uint32_t magic = get32(c);
	h->size_bits = get32(c);
	h->t_begin = get64(c);
	h->t_end = get64(c);
	(void)get32(c);
	h->version = get16(c);
	h->pid = get64(c);
	h->domain = h->version >= 3 ? get16(c) : 0;
	h->v_ix = get16(c);
	h->v_pred = get16(c);
	h->v_val = get64(c);
	h->id_begin = get64(c);
	h->id_end = get64(c);
	if (c->bad)
		return rfail(r, "packet header cut short");
	if (magic != MT_MAGIC)
		return rfail(r, "not a CTF packet (magic 0x%08x)", magic);
	if (h->version > MT_VERSION || h->version < 1)
		return rfail(r, "trace format v%03u, but expected v%03u or older", h->version, MT_VERSION);
	if ((int32_t)h->size_bits < 0)
		return rfail(r, "bad packet size");
	if (h->t_begin > h->t_end)
		return rfail(r, "packet timestamps not monotone (begin %llu > end %llu)",
			     (unsigned long long)h->t_begin, (unsigned long long)h->t_end);
	if (h->id_begin > h->id_end)
		return rfail(r, "alloc ids not monotone");
	h->header_bytes = c->p - start;
	if (h->size_bits / 8 < h->header_bytes)
		return rfail(r, "packet size %u bits is below its header", h->size_bits);
	return 0;
}

static int get_event_header(struct mt_reader *r, struct rcur *c, unsigned *code, uint64_t *t)
{
	uint32_t v = get32(c);
	if (c->bad)
		return rfail(r, "event header cut short");
	uint32_t start_low = (uint32_t)r->t_begin & EV_TIME_MASK;
	uint64_t low = v & EV_TIME_MASK;
	if (low < start_low)
		low += 1u << EV_TIME_BITS;
	*t = (r->t_begin & ~(uint64_t)EV_TIME_MASK) + low;
	*code = v >> EV_TIME_BITS;
	if (*t < r->t_begin || *t > r->t_end)
		return rfail(r, "event time %llu outside its packet [%llu, %llu]", (unsigned long long)*t,
			     (unsigned long long)r->t_begin, (unsigned long long)r->t_end);
	return 0;
}

static void rdomain_free(gpointer p)
{
	struct rdomain *d = p;
	mtf_files_clear(&d->files);
	free(d->bt);
	free(d);
}

static void locdef_free(gpointer p)
{
	struct loc_def *d = p;
	free(d->locs);
	free(d);
}

static int reader_init(struct mt_reader *r, char *err, size_t errlen)
{
	struct rcur c = { r->data, r->data + r->len, false };
	struct hdr h;
	r->domains = g_ptr_array_new_with_free_func(rdomain_free);
	r->locs = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, locdef_free);
	r->strings = g_string_chunk_new(4096);
	r->scratch_locs = calloc(MT_MAX_LOCS, sizeof(*r->scratch_locs));
	if (!r->scratch_locs)
		return -ENOMEM;
	int ret = read_header(r, &c, &h);
	if (ret < 0)
		goto bad;
	size_t content = h.size_bits / 8 - h.header_bytes;
	if ((size_t)(c.end - c.p) < content) {
		ret = rfail(r, "trace info packet cut short");
		goto bad;
	}
	c.end = c.p + content;
	r->t_begin = h.t_begin;
	r->t_end = h.t_end;
	unsigned code;
	uint64_t t;
	if ((ret = get_event_header(r, &c, &code, &t)) < 0)
		goto bad;
	if (code != MT_EV_TRACE_INFO || t != h.t_begin) {
		ret = rfail(r, "the first packet does not hold the trace info");
		goto bad;
	}
	uint64_t bits = get64(&c);
	memcpy(&r->info.sample_rate, &bits, sizeof(bits));
	r->info.word_size_bits = get8(&c);
	r->info.executable = get_str(r, &c);
	r->info.host = get_str(r, &c);
	r->info.runtime_params = get_str(r, &c);
	r->info.pid = get64(&c);
	r->info.context = h.version >= 2 ? get_str(r, &c) : "";
	r->info.start_us = h.t_begin;
	r->info.domain = h.domain;
	if (c.bad || c.p != c.end) {
		ret = rfail(r, "trace info packet malformed");
		goto bad;
	}
	if (!(r->info.sample_rate > 0 && r->info.sample_rate <= 1)) {
		ret = rfail(r, "sample rate %g is not in (0, 1]", r->info.sample_rate);
		goto bad;
	}
	r->version0 = h.version;
	r->packets = 1;
	r->pos = c.end - r->data;
	return 0;
bad:
	snprintf(err, errlen, "%s", r->err);
	return ret;
}

static struct rdomain *get_domain(struct mt_reader *r, uint16_t domain)
{
	for (guint i = 0; i < r->domains->len; i++) {
		struct rdomain *d = g_ptr_array_index(r->domains, i);
		if (d->domain == domain)
			return d;
	}
	struct rdomain *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->domain = domain;
	d->last_us = r->info.start_us;
	g_ptr_array_add(r->domains, d);
	return d;
}

static int open_packet(struct mt_reader *r)
{
	for (;;) {
		if (r->pos >= r->len)
			return 0;
		struct rcur c = { r->data + r->pos, r->data + r->len, false };
		struct hdr h;
		r->in_packet = false;
		int ret = read_header(r, &c, &h);
		if (ret < 0)
			return ret;
		size_t content = h.size_bits / 8 - h.header_bytes;
		size_t avail = c.end - c.p;
		if (h.pid != r->info.pid) {
			r->skipped_pid++;
			r->pos = c.p - r->data + (content < avail ? content : avail);
			continue;
		}
		if (avail < content) {
			r->skipped_truncated++;
			r->pos = r->len;
			continue;
		}
		r->p = c.p;
		r->end = c.p + content;
		r->pos = r->end - r->data;
		r->t_begin = h.t_begin;
		r->t_end = h.t_end;
		r->id_end = h.id_end;
		r->next_id = h.id_begin;
		r->version = h.version;
		r->dom = get_domain(r, h.domain);
		if (!r->dom)
			return -ENOMEM;
		if (h.v_ix != 0xffff) {
			if (h.v_ix >= MT_CACHE_SIZE || r->dom->cache_pred[h.v_ix] != h.v_pred ||
			    r->dom->cache_loc[h.v_ix] != h.v_val)
				return rfail(r, "cache verification failed");
		}
		r->in_packet = true;
		r->packets++;
		return 1;
	}
}

static int read_location(struct mt_reader *r, struct rcur *c, struct mt_event *ev)
{
	struct mtf_files *files = &r->dom->files;
	ev->code = get64(c);
	size_t n = get8(c);
	for (size_t i = 0; i < n; i++) {
		uint64_t lo = get32(c), hi = get16(c);
		uint64_t enc = hi << 32 | lo;
		struct mt_location *l = &r->scratch_locs[i];
		l->line = enc & 0xfffff;
		l->start_char = (enc >> 20) & 0xff;
		l->end_char = (enc >> 28) & 0x3ff;
		unsigned fcode = (enc >> 38) & 0x1f, dcode = (enc >> 43) & 0x1f;
		if (c->bad)
			return rfail(r, "location cut short");
		struct mtf_defs *defs;
		if (fcode == MTF_NOT_FOUND) {
			const char *s = get_str(r, c);
			/* memtrace's reader reuses the defname table about to be
			 * pushed off (compatibility with its v001 encoder) */
			struct mtf_defs *d = files->defs[MTF_LEN - 1];
			if (!files->name[MTF_LEN - 1] || !d)
				d = calloc(1, sizeof(*d));
			char *dup = strdup(s);
			if (!d || !dup) {
				free(dup);
				return -ENOMEM;
			}
			mtf_files_push(files, dup, d);
			l->filename = g_string_chunk_insert_const(r->strings, s);
		} else {
			if (!files->name[fcode])
				return rfail(r, "filename move-to-front index %u names no entry", fcode);
			mtf_files_swap(files, fcode);
			l->filename = g_string_chunk_insert_const(r->strings, files->name[0]);
		}
		defs = files->defs[0];
		if (dcode == MTF_NOT_FOUND) {
			const char *s = get_str(r, c);
			char *dup = strdup(s);
			if (!dup)
				return -ENOMEM;
			mtf_defs_push(defs, dup);
			l->defname = g_string_chunk_insert_const(r->strings, s);
		} else {
			if (!defs->name[dcode])
				return rfail(r, "defname move-to-front index %u names no entry", dcode);
			mtf_defs_swap(defs, dcode);
			l->defname = g_string_chunk_insert_const(r->strings, defs->name[0]);
		}
		if (c->bad)
			return rfail(r, "location cut short");
	}
	if (c->bad)
		return rfail(r, "location cut short");
	struct loc_def *old = g_hash_table_lookup(r->locs, &ev->code);
	if (old) {
		bool same = old->n == n;
		for (size_t i = 0; same && i < n; i++) {
			const struct mt_location *a = &old->locs[i], *b = &r->scratch_locs[i];
			same = a->line == b->line && a->start_char == b->start_char && a->end_char == b->end_char &&
			       !strcmp(a->filename, b->filename) && !strcmp(a->defname, b->defname);
		}
		if (!same)
			return rfail(r, "location 0x%llx redefined differently", (unsigned long long)ev->code);
		ev->locs = old->locs;
		ev->nlocs = n;
		return 0;
	}
	/* the key lives in the entry: codes are stored after the locations */
	struct loc_def *d = malloc(sizeof(*d) + sizeof(uint64_t));
	if (!d)
		return -ENOMEM;
	d->locs = calloc(n ? n : 1, sizeof(*d->locs));
	if (!d->locs) {
		free(d);
		return -ENOMEM;
	}
	memcpy(d->locs, r->scratch_locs, n * sizeof(*d->locs));
	d->n = n;
	uint64_t *key = (uint64_t *)(d + 1);
	*key = ev->code;
	g_hash_table_insert(r->locs, key, d);
	ev->locs = d->locs;
	ev->nlocs = n;
	return 0;
}

static int bt_push(struct rdomain *d, size_t pos, uint64_t code)
{
	if (pos >= MT_MAX_READ_BT)
		return -E2BIG;
	if (pos >= d->bt_cap) {
		size_t cap = d->bt_cap ? d->bt_cap * 2 : 64;
		while (cap <= pos)
			cap *= 2;
		uint64_t *p = realloc(d->bt, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		d->bt = p;
		d->bt_cap = cap;
	}
	d->bt[pos] = code;
	return 0;
}

/* backtrace_codec.ml Reader.get_backtrace */
static int read_backtrace(struct mt_reader *r, struct rcur *c, size_t nencoded, size_t common, struct mt_event *ev)
{
	struct rdomain *d = r->dom;
	bool keep = common <= d->bt_len;
	size_t pos = keep ? common : 0;
	unsigned pred = 0;
	/* memtrace decodes into a throwaway buffer when the prefix is longer
	 * than the last backtrace (it was truncated), keeping the old one */
	for (size_t i = 0; i < nencoded; i++) {
		uint16_t cw = get16(c);
		unsigned bucket = cw >> 2, tag = cw & 3, npred = 0;
		if (c->bad)
			return rfail(r, "backtrace cut short");
		d->cache_pred[pred] = (uint16_t)bucket;
		if (tag == 3) {
			uint64_t lit = get64(c);
			if (c->bad)
				return rfail(r, "backtrace cut short");
			d->cache_loc[bucket] = lit;
			if (keep && bt_push(d, pos, lit) < 0)
				return rfail(r, "backtrace longer than %u codes", MT_MAX_READ_BT);
			pos++;
			pred = bucket;
			continue;
		}
		npred = tag == 2 ? get8(c) : tag;
		if (c->bad)
			return rfail(r, "backtrace cut short");
		if (keep && bt_push(d, pos, d->cache_loc[bucket]) < 0)
			return rfail(r, "backtrace longer than %u codes", MT_MAX_READ_BT);
		pos++;
		pred = bucket;
		for (unsigned k = 0; k < npred; k++) {
			unsigned p2 = d->cache_pred[pred];
			if (keep && bt_push(d, pos, d->cache_loc[p2]) < 0)
				return rfail(r, "backtrace longer than %u codes", MT_MAX_READ_BT);
			pos++;
			pred = p2;
		}
	}
	if (keep)
		d->bt_len = pos;
	ev->codes = d->bt;
	ev->ncodes = d->bt_len;
	return 0;
}

int mt_reader_next(struct mt_reader *r, struct mt_event *ev)
{
	int ret;
	for (;;) {
		if (!r->in_packet) {
			ret = open_packet(r);
			if (ret <= 0)
				return ret;
		}
		if (r->p < r->end)
			break;
		if (r->next_id != r->id_end)
			return rfail(r, "alloc ids out of sync with the packet header (%llu events, header says %llu)",
				     (unsigned long long)r->next_id, (unsigned long long)r->id_end);
		r->in_packet = false;
	}
	struct rcur c = { r->p, r->end, false };
	unsigned code;
	uint64_t t;
	memset(ev, 0, sizeof(*ev));
	if ((ret = get_event_header(r, &c, &code, &t)) < 0)
		return ret;
	if (t < r->dom->last_us)
		return rfail(r, "event times go backwards");
	r->dom->last_us = t;
	ev->time_us = t;
	ev->domain = r->dom->domain;
	ev->packet = r->packets;
	switch (code) {
	case MT_EV_TRACE_INFO:
		return rfail(r, "a second trace info event");
	case MT_EV_LOCATION:
		ev->type = MT_EV_LOCATION;
		if ((ret = read_location(r, &c, ev)) < 0)
			return ret;
		break;
	case MT_EV_ALLOC:
	default:
		if (code != MT_EV_ALLOC && !(code >= 101 && code <= 116))
			return rfail(r, "unknown event code %u", code);
		ev->type = MT_EV_ALLOC;
		if (code == MT_EV_ALLOC) {
			int64_t len = get_vint(&c), ns = get_vint(&c);
			unsigned src = get8(&c);
			if (src > MT_SRC_EXTERNAL)
				return rfail(r, "bad allocation source %u", src);
			if (len < 0 || ns < 0)
				return rfail(r, "negative allocation length or sample count");
			ev->length = (uint64_t)len;
			ev->nsamples = (uint64_t)ns;
			ev->source = src;
		} else {
			ev->is_short = true;
			ev->length = code - 100;
			ev->nsamples = 1;
			ev->source = MT_SRC_MINOR;
		}
		int64_t common = get_vint(&c);
		ev->nencoded = ev->is_short ? get8(&c) : get16(&c);
		if (c.bad || common < 0)
			return rfail(r, "allocation event cut short");
		ev->common_prefix = (size_t)common;
		if ((ret = read_backtrace(r, &c, ev->nencoded, ev->common_prefix, ev)) < 0)
			return ret;
		ev->id = r->next_id++;
		break;
	case MT_EV_PROMOTE:
	case MT_EV_COLLECT: {
		int64_t delta = get_vint(&c);
		if (c.bad)
			return rfail(r, "event cut short");
		if (code == MT_EV_PROMOTE && delta < 0)
			return rfail(r, "promote id out of sync");
		ev->type = code;
		ev->id = r->next_id - 1 - (uint64_t)delta;
		if ((int64_t)ev->id < 0 || ev->id >= r->next_id)
			return rfail(r, "%s of an object not yet allocated", code == MT_EV_PROMOTE ? "promote" : "collect");
		break;
	}
	}
	if (c.bad)
		return rfail(r, "event cut short");
	r->p = c.p;
	return 1;
}

static int reader_finish_open(struct mt_reader *r, struct mt_reader **out, char *err, size_t errlen)
{
	int ret = reader_init(r, err, errlen);
	if (ret < 0) {
		mt_reader_close(r);
		return ret;
	}
	*out = r;
	return 0;
}

int mt_reader_open(const char *path, struct mt_reader **out, char *err, size_t errlen)
{
	struct mt_reader *r = calloc(1, sizeof(*r));
	struct stat st;
	int fd;
	if (!r)
		return -ENOMEM;
	fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : dup(0);
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		free(r);
		return -e;
	}
	if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode)) {
		/* a pipe (`camlheap report -`): read it whole */
		size_t cap = 1 << 20, len = 0;
		uint8_t *buf = malloc(cap);
		ssize_t k;

		while (buf && (k = read(fd, buf + len, cap - len)) != 0) {
			if (k < 0) {
				if (errno == EINTR)
					continue;
				break;
			}
			len += (size_t)k;
			if (len == cap) {
				uint8_t *nb = realloc(buf, cap *= 2);
				if (!nb) {
					free(buf);
					buf = NULL;
				} else {
					buf = nb;
				}
			}
		}
		close(fd);
		free(r);
		if (!buf) {
			snprintf(err, errlen, "cannot read %s: out of memory", path);
			return -ENOMEM;
		}
		int ret = len < MT_HEADER_BYTES ? -EINVAL : mt_reader_open_mem(buf, len, out, err, errlen);
		if (len < MT_HEADER_BYTES)
			snprintf(err, errlen, "%s is not a memtrace trace (too short)", path);
		free(buf);
		return ret;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < MT_HEADER_BYTES) {
		snprintf(err, errlen, "%s is not a memtrace trace (%s)", path,
			 S_ISREG(st.st_mode) ? "too short" : S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
		close(fd);
		free(r);
		return -EINVAL;
	}
	r->data = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (r->data == MAP_FAILED) {
		int e = errno;
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
		free(r);
		return -e;
	}
	r->len = st.st_size;
	r->mapped = true;
	return reader_finish_open(r, out, err, errlen);
}

int mt_reader_open_mem(const void *data, size_t len, struct mt_reader **out, char *err, size_t errlen)
{
	struct mt_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->data = malloc(len ? len : 1);
	if (!r->data) {
		free(r);
		return -ENOMEM;
	}
	memcpy(r->data, data, len);
	r->len = len;
	return reader_finish_open(r, out, err, errlen);
}

const struct mt_info *mt_reader_info(const struct mt_reader *r) { return &r->info; }
const char *mt_reader_error(const struct mt_reader *r) { return r->err; }

void mt_reader_skipped(const struct mt_reader *r, unsigned *wrong_pid, unsigned *truncated)
{
	*wrong_pid = r->skipped_pid;
	*truncated = r->skipped_truncated;
}

const struct mt_location *mt_reader_lookup(const struct mt_reader *r, uint64_t code, size_t *n)
{
	const struct loc_def *d = g_hash_table_lookup(r->locs, &code);
	*n = d ? d->n : 0;
	return d ? d->locs : NULL;
}

void mt_reader_close(struct mt_reader *r)
{
	if (!r)
		return;
	if (r->mapped)
		munmap(r->data, r->len);
	else
		free(r->data);
	if (r->domains)
		g_ptr_array_free(r->domains, TRUE);
	if (r->locs)
		g_hash_table_destroy(r->locs);
	if (r->strings)
		g_string_chunk_free(r->strings);
	free(r->scratch_locs);
	free(r);
}
