/* resident.c -- see resident.h. */
#define _GNU_SOURCE
#include "collect/resident.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "camlheap.h"
#include "target/proc.h"

/* OCaml 4.13/4.14 caml_domain_state (runtime/caml/domain_state.tbl) */
#define OCAML4_MINOR_HEAP_WSZ 80
#define OCAML4_STAT_HEAP_WSZ 336
/* struct gc_stats {alloc_stats (4 words); heap_stats {pool_words, pool_max_words,
 * pool_live_words, pool_live_blocks, pool_frag_words, large_words, ...}}
 * (5.1/5.3 runtime/caml/gc_stats.h) */
#define GC_STATS_SIZE 96
#define GC_STATS_POOL_WORDS 32
#define GC_STATS_LARGE_WORDS 72
#define OCAML51_MAX_DOMAINS 128   /* 5.1 runtime/caml/domain.h Max_domains */
#define OCAML53_PARAMS_MAX_DOMAINS 160 /* 5.3 struct caml_params.max_domains (startup_aux.h) */

static int peek(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	return proc_read_mem(pid, addr, buf, len);
}

static uint64_t heap_words(pid_t pid, const struct ocaml_runtime *rt, uint64_t bias, const uint64_t *dom_states,
			   size_t ndom)
{
	uint64_t state = 0, v = 0, total = 0;

	if (rt->major == 4) {
		uint64_t minor = 0;

		if (!rt->caml_state_sym || peek(pid, rt->caml_state_sym + bias, &state, 8) || !state ||
		    peek(pid, state + OCAML4_STAT_HEAP_WSZ, &v, 8) || peek(pid, state + OCAML4_MINOR_HEAP_WSZ, &minor, 8))
			return 0;
		return v + minor;
	}
	if (!rt->gc_stats_sym)
		return 0;
	uint64_t stats = rt->gc_stats_sym + bias, n = OCAML51_MAX_DOMAINS;

	if (rt->gc_stats_ptr) {
		uint64_t params = 0;

		if (peek(pid, stats, &stats, 8) || !stats || !rt->params_sym || peek(pid, rt->params_sym + bias, &params, 8) ||
		    !params || peek(pid, params + OCAML53_PARAMS_MAX_DOMAINS, &n, 8) || n == 0 || n > 4096)
			return 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		int64_t w[2];

		if (peek(pid, stats + i * GC_STATS_SIZE + GC_STATS_POOL_WORDS, &w[0], 8) ||
		    peek(pid, stats + i * GC_STATS_SIZE + GC_STATS_LARGE_WORDS, &w[1], 8))
			return 0;
		if (w[0] > 0)
			total += (uint64_t)w[0];
		if (w[1] > 0)
			total += (uint64_t)w[1];
	}
	for (size_t d = 0; d < ndom; d++) {
		uint64_t young[2]; /* young_start, young_end */

		if (!peek(pid, dom_states[d] + CH_OCAML5_YOUNG_START, young, sizeof(young)) && young[1] > young[0] &&
		    young[1] - young[0] < (1ULL << 40))
			total += (young[1] - young[0]) / 8;
	}
	return total;
}

int resident_read(pid_t pid, const struct ocaml_runtime *rt, uint64_t bias, const uint64_t *dom_states, size_t ndom,
		  struct resident *out)
{
	char path[64], line[256];
	FILE *f;
	struct resident r = { 0 };
	struct timespec ts;
	int found = 0;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;

		if (sscanf(line, "VmRSS: %llu kB", &v) == 1) {
			r.rss_kib = v;
			found++;
		} else if (sscanf(line, "VmHWM: %llu kB", &v) == 1) {
			r.hwm_kib = v;
			found++;
		}
	}
	fclose(f);
	if (found < 2) /* a zombie has no memory left to show */
		return -ESRCH;
	r.heap_words = heap_words(pid, rt, bias, dom_states, ndom);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	r.at_s = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
	*out = r;
	return 0;
}
