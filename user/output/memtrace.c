/* memtrace.c -- what the memtrace writer (memtrace_write.c) and reader
 * (memtrace_read.c) share: the move-to-front tables both keep
 * (memtrace_internal.h) and the one-line event print (memtrace.h).
 */
#define _GNU_SOURCE
#include "output/memtrace.h"
#include "output/memtrace_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- move-to-front tables (location_codec.ml Mtf_table) -------------- */

/* Move entry i to the front. */
void mtf_files_swap(struct mtf_files *t, int i)
{
	char *n = t->name[i];
	struct mtf_defs *d = t->defs[i];
	memmove(&t->name[1], &t->name[0], i * sizeof(t->name[0]));
	memmove(&t->defs[1], &t->defs[0], i * sizeof(t->defs[0]));
	t->name[0] = n;
	t->defs[0] = d;
}

static void mtf_defs_free(struct mtf_defs *d)
{
	if (!d)
		return;
	for (int i = 0; i < MTF_LEN; i++)
		free(d->name[i]);
	free(d);
}

/* Push (name, defs) at the front; the last entry falls off (freed, unless
 * its defs were handed over: *kept). */
void mtf_files_push(struct mtf_files *t, char *name, struct mtf_defs *defs)
{
	free(t->name[MTF_LEN - 1]);
	if (t->defs[MTF_LEN - 1] != defs)
		mtf_defs_free(t->defs[MTF_LEN - 1]);
	memmove(&t->name[1], &t->name[0], (MTF_LEN - 1) * sizeof(t->name[0]));
	memmove(&t->defs[1], &t->defs[0], (MTF_LEN - 1) * sizeof(t->defs[0]));
	t->name[0] = name;
	t->defs[0] = defs;
}

void mtf_defs_swap(struct mtf_defs *t, int i)
{
	char *n = t->name[i];
	memmove(&t->name[1], &t->name[0], i * sizeof(t->name[0]));
	t->name[0] = n;
}

void mtf_defs_push(struct mtf_defs *t, char *name)
{
	free(t->name[MTF_LEN - 1]);
	memmove(&t->name[1], &t->name[0], (MTF_LEN - 1) * sizeof(t->name[0]));
	t->name[0] = name;
}

void mtf_files_clear(struct mtf_files *t)
{
	for (int i = 0; i < MTF_LEN; i++) {
		free(t->name[i]);
		/* a defs table is owned by one entry only */
		mtf_defs_free(t->defs[i]);
		t->name[i] = NULL;
		t->defs[i] = NULL;
	}
}

/* ---- one line an event (memtrace.h) --------------------------------- */

void mt_event_print(FILE *out, const struct mt_event *ev)
{
	static const char *const src[] = { "minor", "major", "external" };
	switch (ev->type) {
	case MT_EV_LOCATION:
		fprintf(out, "%llu location 0x%llx %zu", (unsigned long long)ev->time_us, (unsigned long long)ev->code,
			ev->nlocs);
		for (size_t i = 0; i < ev->nlocs; i++)
			fprintf(out, " [%s|%u|%u|%u|%s]", ev->locs[i].filename, ev->locs[i].line, ev->locs[i].start_char,
				ev->locs[i].end_char, ev->locs[i].defname);
		break;
	case MT_EV_ALLOC:
		fprintf(out, "%llu alloc %llu len %llu samples %llu %s bt %zu", (unsigned long long)ev->time_us,
			(unsigned long long)ev->id, (unsigned long long)ev->length, (unsigned long long)ev->nsamples,
			ev->source <= MT_SRC_EXTERNAL ? src[ev->source] : "?", ev->ncodes);
		for (size_t i = 0; i < ev->ncodes; i++)
			fprintf(out, " %llx", (unsigned long long)ev->codes[i]);
		break;
	case MT_EV_PROMOTE:
	case MT_EV_COLLECT:
		fprintf(out, "%llu %s %llu", (unsigned long long)ev->time_us,
			ev->type == MT_EV_PROMOTE ? "promote" : "collect", (unsigned long long)ev->id);
		break;
	default:
		fprintf(out, "%llu event %d", (unsigned long long)ev->time_us, (int)ev->type);
	}
	fputc('\n', out);
}
