/* profile.c -- see profile.h. */
#include "profile.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

struct site_key {
	uint64_t stack_id;
	uint8_t kind;
	uint8_t alloc_idx;
};

static guint site_key_hash(gconstpointer k)
{
	const struct site_key *s = k;

	return (guint)(s->stack_id ^ (s->stack_id >> 32) ^ ((uint64_t)s->kind * 0x9e3779b9u) ^
		       ((uint64_t)s->alloc_idx * 0x85ebca6bu));
}

static gboolean site_key_equal(gconstpointer a, gconstpointer b)
{
	const struct site_key *x = a, *y = b;

	return x->stack_id == y->stack_id && x->kind == y->kind && x->alloc_idx == y->alloc_idx;
}

static void stack_free(gpointer v)
{
	struct profile_stack *s = v;

	free(s->frames);
	free(s);
}

struct profile *profile_new(double rate)
{
	struct profile *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->rate = rate;
	p->stacks = g_hash_table_new_full(g_int64_hash, g_int64_equal, NULL, stack_free);
	p->sites = g_hash_table_new_full(site_key_hash, site_key_equal, free, free);
	return p;
}

void profile_free(struct profile *p)
{
	if (!p)
		return;
	g_hash_table_destroy(p->sites);
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
	struct site_key key = { .stack_id = ev->stack_id, .kind = ev->kind, .alloc_idx = ev->alloc_idx };
	struct profile_site *site;

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
		g_hash_table_insert(p->sites, k, site);
	}
	if (!site->stack)
		site->stack = g_hash_table_lookup(p->stacks, &ev->stack_id);
	if (!site->stack)
		p->events_without_stack++;
	site->samples += ev->nsamples;
	site->events++;
	site->sampled_block_words += ev->size_words;

	p->events++;
	p->samples += ev->nsamples;
	p->samples_by_kind[ev->kind] += ev->nsamples;
	p->walks_by_term[ev->term]++;
	if (!p->first_ns || ev->time_ns < p->first_ns)
		p->first_ns = ev->time_ns;
	if (ev->time_ns > p->last_ns)
		p->last_ns = ev->time_ns;
	return 0;
}

static int site_cmp(const void *a, const void *b)
{
	const struct profile_site *x = *(const struct profile_site *const *)a;
	const struct profile_site *y = *(const struct profile_site *const *)b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->stack_id != y->stack_id)
		return x->stack_id < y->stack_id ? -1 : 1;
	if (x->alloc_idx != y->alloc_idx)
		return x->alloc_idx < y->alloc_idx ? -1 : 1;
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
		v[i++] = s;
	}
	qsort(v, i, sizeof(*v), site_cmp);
	*out = v;
	return i;
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
