/* profile.c -- see profile.h. */
#include "profile/profile.h"

#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

/* sampler.c tells the two record types apart by size and by `kind`, read
 * at the same offset in both */
_Static_assert(offsetof(struct ch_fate_event, kind) == offsetof(struct ch_sample_event, kind),
	       "kind must sit at the same offset in fate and sample records");
_Static_assert(sizeof(struct ch_fate_event) < CH_EVENT_HEADER_BYTES, "a fate record is shorter than a sample");

struct site_key {
	uint64_t stack_id;
	uint64_t subtype;     /* profile_site.subtype */
	uint8_t kind;
	uint8_t alloc_idx;
	uint32_t domain;      /* with by_domain; else 0 */
};

static guint site_key_hash(gconstpointer k)
{
	const struct site_key *s = k;

	return (guint)(s->stack_id ^ (s->stack_id >> 32) ^ ((uint64_t)s->kind * 0x9e3779b9u) ^
		       ((uint64_t)s->alloc_idx * 0x85ebca6bu) ^ ((uint64_t)s->domain * 0xc2b2ae35u) ^
		       (s->subtype * 0x27d4eb2fu) ^ (s->subtype >> 29));
}

static gboolean site_key_equal(gconstpointer a, gconstpointer b)
{
	const struct site_key *x = a, *y = b;

	return x->stack_id == y->stack_id && x->kind == y->kind && x->alloc_idx == y->alloc_idx && x->domain == y->domain &&
	       x->subtype == y->subtype;
}

static void stack_free(gpointer v)
{
	struct profile_stack *s = v;

	free(s->frames);
	free(s);
}

static void site_free(gpointer v)
{
	struct profile_site *s = v;

	free(s);
}

struct profile *profile_new(double rate)
{
	struct profile *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->rate = rate;
	p->stacks = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, stack_free);
	p->sites = g_hash_table_new_full(site_key_hash, site_key_equal, free, site_free);
	p->blocks = g_hash_table_new_full(g_int64_hash, g_int64_equal, free, free);
	p->domain_samples = g_hash_table_new(g_direct_hash, g_direct_equal);
	p->custom_names = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
	p->interval_births = g_array_new(FALSE, TRUE, sizeof(uint64_t));
	return p;
}

void profile_free(struct profile *p)
{
	if (!p)
		return;
	g_hash_table_destroy(p->blocks);
	g_array_free(p->interval_births, TRUE);
	g_hash_table_destroy(p->sites);
	g_hash_table_destroy(p->domain_samples);
	g_hash_table_destroy(p->custom_names);
	g_hash_table_destroy(p->stacks);
	free(p);
}

static void profile_add_stack(struct profile *p, const struct ch_sample_event *ev)
{
	struct profile_stack *st;

	if (g_hash_table_contains(p->stacks, &ev->stack_id))
		return; /* re-sent after LRU eviction: identical frames */
	st = calloc(1, sizeof(*st));
	if (!st)
		return;
	st->id = ev->stack_id;
	st->nframes = ev->nframes;
	st->term = ev->term;
	st->frames = calloc(ev->nframes ? ev->nframes : 1, sizeof(uint64_t));
	if (!st->frames) {
		free(st);
		return;
	}
	for (uint32_t i = 0; i < ev->nframes; i++)
		st->frames[i] = ev->frames[i];
	/* the key points into the value, which lives as long as the entry */
	g_hash_table_insert(p->stacks, &st->id, st);
}

int profile_add_event(struct profile *p, const struct ch_sample_event *ev, size_t size)
{
	struct site_key key = { .stack_id = ev->stack_id, .kind = ev->kind, .alloc_idx = ev->alloc_idx,
				.domain = p->by_domain ? ev->domain : 0,
				.subtype = ev->kind == CH_KIND_CUSTOM	? ev->custom_ops
					   : ev->kind == CH_KIND_BIGARRAY ? ev->ext_flags
					   : ev->kind == CH_KIND_MALLOC	? ev->ext_flags & CH_MALLOC_OUTSIDE
									  : 0 };
	struct profile_site *site;
	gpointer dsamples;
	/* under an overhead budget each kept sample stands for 2^shift */
	unsigned shift = ev->rate_shift > CH_MAX_RATE_SHIFT ? CH_MAX_RATE_SHIFT : ev->rate_shift;
	uint64_t ns = (uint64_t)ev->nsamples << shift;

	if (size < CH_EVENT_HEADER_BYTES || ev->kind >= CH_KIND__COUNT || ev->term >= CH_TERM__COUNT ||
	    ev->nframes > CH_MAX_FRAMES)
		return -EINVAL;
	if (ev->has_frames) {
		if (size < CH_EVENT_HEADER_BYTES + (size_t)ev->nframes * sizeof(uint64_t))
			return -EINVAL;
		profile_add_stack(p, ev);
	}

	site = g_hash_table_lookup(p->sites, &key);
	if (!site) {
		struct site_key *k = malloc(sizeof(*k));

		site = calloc(1, sizeof(*site));
		if (!k || !site) {
			free(k);
			free(site);
			return -ENOMEM;
		}
		*k = key;
		site->kind = ev->kind;
		site->alloc_idx = ev->alloc_idx;
		site->nallocs = ev->nallocs;
		site->stack_id = ev->stack_id;
		site->domain = key.domain;
		site->subtype = key.subtype;
		site->seq = g_hash_table_size(p->sites);
		g_hash_table_insert(p->sites, k, site);
	}
	if (!site->stack)
		site->stack = g_hash_table_lookup(p->stacks, &ev->stack_id);
	if (!site->stack)
		p->events_without_stack++;
	site->samples += ns;
	dsamples = g_hash_table_lookup(p->domain_samples, GUINT_TO_POINTER(ev->domain));
	g_hash_table_insert(p->domain_samples, GUINT_TO_POINTER(ev->domain),
			    GSIZE_TO_POINTER(GPOINTER_TO_SIZE(dsamples) + ns));
	site->events++;
	site->sampled_block_words += ev->size_words;
	site->est_objects += profile_object_weight_at(p, ev->size_words, shift);
	if (ev->minor_gcs > p->cur_minor_gcs)
		p->cur_minor_gcs = ev->minor_gcs;
	if (ev->major_gcs > p->cur_major_gcs)
		p->cur_major_gcs = ev->major_gcs;
	if (ev->sample_id) {
		uint64_t *k = malloc(sizeof(*k));
		struct profile_block *b = calloc(1, sizeof(*b));

		if (!k || !b || g_hash_table_contains(p->blocks, &ev->sample_id)) {
			free(k);
			free(b);
		} else {
			*k = ev->sample_id;
			b->site = site;
			b->time_ns = ev->time_ns;
			b->nsamples = ns;
			b->words = ev->size_words > UINT32_MAX ? UINT32_MAX : (uint32_t)ev->size_words;
			b->birth_minor_gcs = ev->minor_gcs;
			b->birth_major_gcs = ev->major_gcs;
			b->birth_cycle = ev->clean_phases;
			b->state = ev->in_minor_heap ? PROFILE_BLOCK_YOUNG : PROFILE_BLOCK_MAJOR;
			b->uncounted = ev->kind == CH_KIND_BIGARRAY && ev->ext_flags != CH_BA_OWNED;
			g_hash_table_insert(p->blocks, k, b);
			site->followed_blocks++;
			site->live_blocks++;
			if (ev->in_minor_heap)
				p->followed_minor_blocks++;
			{
				GArray *ib = p->interval_births;

				if (ib->len <= ev->clean_phases)
					g_array_set_size(ib, ev->clean_phases + 1);
				g_array_index(ib, uint64_t, ev->clean_phases)++;
			}
			site->live_samples += ns;
			b->est_objects = (float)profile_object_weight_at(p, b->words, shift);
			site->live_est_objects += b->est_objects;
			if (site->live_samples > site->peak_live_samples)
				site->peak_live_samples = site->live_samples;
			p->followed_blocks++;
			if (!b->uncounted) {
				p->live_samples += ns;
				p->live_samples_by_kind[ev->kind] += ns;
			}
			if (p->live_samples > p->peak_live_samples) {
				p->peak_live_samples = p->live_samples;
				p->peak_ns = ev->time_ns;
			}
		}
	}

	p->events++;
	p->samples += ns;
	p->samples_by_kind[ev->kind] += ns;
	if (ev->kind == CH_KIND_BIGARRAY && ev->ext_flags <= CH_BA_MAPPED)
		p->bigarray_samples[ev->ext_flags] += ns;
	if (ev->kind == CH_KIND_BIGARRAY && ev->ext_flags != CH_BA_OWNED)
		p->uncounted_samples += ns;
	p->walks_by_term[ev->term]++;
	if (!p->first_ns || ev->time_ns < p->first_ns)
		p->first_ns = ev->time_ns;
	if (ev->time_ns > p->last_ns)
		p->last_ns = ev->time_ns;
	return 0;
}

static void block_dies(struct profile *p, uint64_t id, struct profile_block *b, const struct ch_fate_event *f)
{
	struct profile_site *site = b->site;

	site->live_samples -= b->nsamples;
	site->live_blocks--;
	/* what its birth added: a block sampled under a budget stands for
	 * more blocks than one sampled at lambda */
	site->live_est_objects -= b->est_objects;
	if (site->live_est_objects < 0 || !site->live_blocks)
		site->live_est_objects = 0; /* rounding */
	if (!b->uncounted) {
		p->live_samples -= b->nsamples;
		p->live_samples_by_kind[site->kind] -= b->nsamples;
	}
	if (f->kind == CH_FATE_FREED) {
		site->dead_major_blocks++; /* the site's deaths: freed */
		p->freed_blocks++;
	} else if (b->state == PROFILE_BLOCK_YOUNG) {
		site->dead_minor_blocks++;
		p->dead_minor_blocks++;
	} else {
		site->dead_major_blocks++;
		p->dead_major_blocks++;
	}
	if (f->time_ns > b->time_ns)
		site->dead_lifetime_s += (double)(f->time_ns - b->time_ns) / 1e9;
	if (f->minor_gcs > b->birth_minor_gcs)
		site->dead_minor_gcs += f->minor_gcs - b->birth_minor_gcs;
	g_hash_table_remove(p->blocks, &id);
}

/* One more value of a site's live-samples series (profile_site_live_grows). */
static void cycle_append(struct profile_site *s, uint64_t live)
{
	if (!s->cycle_count)
		s->cycle_first = live;
	else if ((double)live < (double)s->cycle_last * 2.0 / 3.0)
		s->cycle_dropped = true;
	s->cycle_last = live;
	s->cycle_count++;
}

static void clean_snapshot(struct profile *p)
{
	GHashTableIter it;
	gpointer k, v;

	p->clean_phases++;
	g_hash_table_iter_init(&it, p->sites);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		struct profile_site *s = v;

		if (!s->followed_blocks)
			continue;
		/* a site first seen after some clean phases: zeros before */
		if (s->cycle_count + 1 < p->clean_phases) {
			cycle_append(s, 0);
			s->cycle_count = p->clean_phases - 1;
		}
		cycle_append(s, s->live_samples);
	}
}

int profile_add_fate(struct profile *p, const struct ch_fate_event *f, size_t size)
{
	struct profile_block *b;
	uint64_t id = f->sample_id;

	if (size < sizeof(*f))
		return -EINVAL;
	if (f->minor_gcs > p->cur_minor_gcs)
		p->cur_minor_gcs = f->minor_gcs;
	if (f->major_gcs > p->cur_major_gcs)
		p->cur_major_gcs = f->major_gcs;
	if (f->kind == CH_NOTE_MAJOR_CLEAN) {
		/* notes are numbered: a lost one (ring full) shows as a gap,
		 * whose snapshots repeat the state known now */
		while (p->clean_phases < f->clean_phases) {
			if (p->clean_phases + 1 < f->clean_phases)
				p->lost_clean_notes++;
			clean_snapshot(p);
		}
		p->last_clean_ns = f->time_ns;
		return 0;
	}
	b = g_hash_table_lookup(p->blocks, &id);
	if (!b) {
		p->orphan_fates++;
		return 0;
	}
	switch (f->kind) {
	case CH_FATE_PROMOTE:
		if (b->state == PROFILE_BLOCK_YOUNG) {
			uint32_t d = p->clean_phases > b->birth_cycle ? p->clean_phases - b->birth_cycle : 0;

			b->promo_cycles = d > 255 ? 255 : (uint8_t)d;
			b->state = PROFILE_BLOCK_MAJOR;
			b->site->promoted_blocks++;
			p->promoted_blocks++;
		}
		break;
	case CH_FATE_DEAD_MINOR:
	case CH_FATE_DEAD_MAJOR:
	case CH_FATE_FREED:
		if (b->state == PROFILE_BLOCK_RELOCATED || b->state == PROFILE_BLOCK_UNFOLLOWED)
			break; /* cannot happen: no longer followed in the kernel */
		block_dies(p, id, b, f);
		break;
	case CH_FATE_RELOCATED:
		if (b->state == PROFILE_BLOCK_MAJOR) {
			b->state = PROFILE_BLOCK_RELOCATED;
			b->site->relocated_samples += b->nsamples;
			p->relocated_blocks++;
		}
		break;
	case CH_FATE_UNTRACKED:
	case CH_FATE_UNKNOWN:
		if (b->state == PROFILE_BLOCK_YOUNG || b->state == PROFILE_BLOCK_MAJOR) {
			b->state = PROFILE_BLOCK_UNFOLLOWED;
			b->site->unfollowed_samples += b->nsamples;
			if (f->kind == CH_FATE_UNKNOWN)
				p->unknown_fate_blocks++;
			else
				p->unfollowed_blocks++;
		}
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

struct site_census {
	GArray *ages;       /* uint32 major ages of live blocks */
	uint64_t *retained; /* live samples by judged birth interval */
};

void profile_census_compute(struct profile *p)
{
	GHashTable *tmp = g_hash_table_new(g_direct_hash, g_direct_equal);
	uint32_t judged = p->clean_phases >= 2 ? p->clean_phases - 1 : 0, active = 0;
	GHashTableIter it;
	gpointer k, v;

	g_hash_table_iter_init(&it, p->blocks);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		struct profile_block *b = v;
		struct site_census *c = g_hash_table_lookup(tmp, b->site);
		uint32_t age = p->cur_major_gcs > b->birth_major_gcs ? p->cur_major_gcs - b->birth_major_gcs : 0;

		if (!c) {
			c = g_new0(struct site_census, 1);
			c->ages = g_array_new(FALSE, FALSE, sizeof(uint32_t));
			c->retained = g_new0(uint64_t, judged + 1);
			g_hash_table_insert(tmp, b->site, c);
		}
		g_array_append_val(c->ages, age);
		if (b->birth_cycle < judged)
			c->retained[b->birth_cycle] += b->nsamples;
	}
	for (uint32_t j = 0; j < judged && j < ((GArray *)p->interval_births)->len; j++)
		active += g_array_index((GArray *)p->interval_births, uint64_t, j) > 0;
	g_hash_table_iter_init(&it, p->sites);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		struct profile_site *s = v;
		struct site_census *c = g_hash_table_lookup(tmp, s);

		s->median_major_age = -1;
		s->leak_cycles = active;
		s->leak_retaining = 0;
		s->leak_retained_samples = 0;
		s->leak_score = 0;
		if (!c)
			continue;
		if (c->ages->len) {
			uint32_t *a = (uint32_t *)c->ages->data, n = c->ages->len;

			qsort(a, n, sizeof(*a), u32_cmp);
			s->median_major_age = n % 2 ? a[n / 2] : (a[n / 2 - 1] + a[n / 2]) / 2.0;
		}
		s->leak_cycles = 0;
		for (uint32_t j = 0; j < judged; j++) {
			if (j >= ((GArray *)p->interval_births)->len ||
			    !g_array_index((GArray *)p->interval_births, uint64_t, j))
				continue; /* nothing sampled then: no information */
			s->leak_cycles++;
			s->leak_retaining += c->retained[j] > 0;
			s->leak_retained_samples += c->retained[j];
		}
		if (s->leak_cycles >= 2)
			s->leak_score = (double)s->leak_retaining / s->leak_cycles *
					(profile_estimate_words(p, s->leak_retained_samples) * 8.0 / s->leak_cycles);
		g_array_free(c->ages, TRUE);
		g_free(c->retained);
		g_free(c);
	}
	g_hash_table_destroy(tmp);
}

bool profile_site_live_grows(const struct profile_site *site)
{
	return site->cycle_count >= 3 && !site->cycle_dropped && site->cycle_last > site->cycle_first;
}

static int site_cmp(const void *a, const void *b)
{
	const struct profile_site *x = *(const struct profile_site *const *)a;
	const struct profile_site *y = *(const struct profile_site *const *)b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	/* then the order they first appeared in: the same for a recording
	 * read back, whose stack ids are its own */
	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return 0;
}

size_t profile_sites_sorted(const struct profile *p, const struct profile_site ***out)
{
	guint n = g_hash_table_size(p->sites);
	const struct profile_site **v = calloc(n ? n : 1, sizeof(*v));
	GHashTableIter it;
	gpointer k, val;
	size_t i = 0;

	if (!v) {
		*out = NULL;
		return 0;
	}
	g_hash_table_iter_init(&it, p->sites);
	while (g_hash_table_iter_next(&it, &k, &val)) {
		struct profile_site *s = val;

		if (!s->stack)
			s->stack = g_hash_table_lookup(p->stacks, &s->stack_id);
		if (!s->hidden)
			v[i++] = s;
	}
	qsort(v, i, sizeof(*v), site_cmp);
	*out = v;
	return i;
}

double profile_object_weight_at(const struct profile *p, uint64_t words, unsigned shift)
{
	double q, rate = ldexp(p->rate, -(int)(shift > CH_MAX_RATE_SHIFT ? CH_MAX_RATE_SHIFT : shift));

	if (!words || rate >= 1.0)
		return 1.0;
	q = -expm1((double)words * log1p(-rate)); /* 1 - (1-lambda)^words, accurate for tiny lambda */
	return q > 0 ? 1.0 / q : 1.0;
}

double profile_object_weight(const struct profile *p, uint64_t words)
{
	return profile_object_weight_at(p, words, 0);
}

double profile_estimate_words(const struct profile *p, uint64_t samples)
{
	return p->rate > 0 ? (double)samples / p->rate : 0.0;
}

void profile_poisson_ci95(uint64_t n, double *lo, double *hi)
{
	const double z = 1.959963984540054;
	double x = (double)n, y = x + 1.0;

	if (n == 0) {
		*lo = 0.0;
		*hi = 3.688879454113936; /* exact: chi2(0.975; 2) / 2 */
		return;
	}
	*lo = x * pow(1.0 - 1.0 / (9.0 * x) - z / (3.0 * sqrt(x)), 3);
	*hi = y * pow(1.0 - 1.0 / (9.0 * y) + z / (3.0 * sqrt(y)), 3);
	if (*lo < 0)
		*lo = 0;
}

size_t profile_drop_small_sites(struct profile *p, uint64_t min_samples)
{
	GHashTableIter it;
	gpointer k, v;
	size_t n = 0;

	g_hash_table_iter_init(&it, p->sites);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		struct profile_site *s = v;

		if (s->samples < min_samples && !s->hidden) {
			s->hidden = true;
			n++;
		}
	}
	return n;
}

bool profile_custom_name_known(const struct profile *p, uint64_t ops)
{
	return g_hash_table_contains(p->custom_names, &ops);
}

void profile_set_custom_name(struct profile *p, uint64_t ops, const char *name)
{
	uint64_t *k = g_new(uint64_t, 1);

	*k = ops;
	g_hash_table_replace(p->custom_names, k, g_strdup(name ? name : ""));
}

const char *profile_custom_name(const struct profile *p, uint64_t ops)
{
	const char *n = g_hash_table_lookup(p->custom_names, &ops);

	return n && n[0] ? n : NULL;
}

/* In-use as Go's heap profile means it: "as of the most recently
 * completed garbage collection" (Go runtime/pprof, WriteHeapProfile and
 * the heap profile's description), which counts the allocations made
 * before that collection began and not freed by it.  Here: the sampled
 * blocks still alive that entered the major heap (allocation, or
 * promotion of a minor block) before the last completed major cycle
 * started, i.e. at least two clean phases before the last one seen
 * (entry + 2 <= clean_phases): a block entering the major heap after
 * clean phase N-1 may have been coloured black by cycle N's marking
 * (4.14 runtime/memory.c caml_alloc_shr_aux: black during Phase_mark and
 * Phase_clean, and ahead of the sweep pointer; 5.x runtime/shared_heap.c
 * allocates with the cycle's MARKED colour while marking), which then
 * could not judge it.  Blocks a completed cycle found dead are gone from
 * p->blocks; minor blocks still young are left out (not yet judged by
 * any cycle).  --malloc blocks have no collector: in use until freed.  Returns site pointer -> struct profile_inuse (owned), or NULL
 * when out of memory. */
void *profile_inuse_by_site(const struct profile *p)
{
	GHashTable *t = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, g_free);
	GHashTableIter it;
	gpointer k, v;

	if (!t || !p->blocks)
		return t;
	g_hash_table_iter_init(&it, p->blocks);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		const struct profile_block *b = v;
		uint64_t entry = (uint64_t)b->birth_cycle + b->promo_cycles;
		struct profile_inuse *st;

		if (b->state == PROFILE_BLOCK_YOUNG ||
		    (b->site->kind != CH_KIND_MALLOC && entry + 2 > p->clean_phases))
			continue;
		st = g_hash_table_lookup(t, b->site);
		if (!st) {
			st = g_new0(struct profile_inuse, 1);
			g_hash_table_insert(t, b->site, st);
		}
		st->samples += b->nsamples;
		st->est_objects += b->est_objects;
	}
	return t;
}
