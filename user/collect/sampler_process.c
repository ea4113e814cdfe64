/* sampler_process.c -- what the kernel's programs recorded of a followed
 * process, read from their maps (sampler.h): when its minor heap was first
 * armed (`procs`), how it ended and whether the OOM killer chose it
 * (`exits`, include/camlheap.h struct ch_exit), and which sampled blocks
 * it follows now (`major_tracked`, `young_tracked`). */
#define _GNU_SOURCE
#include "collect/sampler_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "alloc.skel.h"

uint64_t sampler_minor_start_ns(const struct sampler *s, pid_t pid)
{
	__u32 key = (__u32)pid;
	struct ch_proc p;

	if (!s)
		return 0;
	if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.procs), &key, &p) == 0)
		return p.minor_start_ns;
	/* after sampler_stop_sampling: its last state */
	return s->last_proc_valid && s->last_pid == pid ? s->last_proc.minor_start_ns : 0;
}

int sampler_exit_status(const struct sampler *s, pid_t pid, char *exn, size_t exnlen)
{
	__u32 key = (__u32)pid;
	struct ch_exit e;

	if (exnlen)
		exn[0] = 0;
	if (!s || bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.exits), &key, &e) != 0)
		return -ENOENT;
	if (e.flags & CH_EXIT_UNCAUGHT && exnlen) {
		e.exn[sizeof(e.exn) - 1] = 0;
		snprintf(exn, exnlen, "%s", e.exn[0] ? e.exn : "(name unreadable)");
	}
	return e.flags & CH_EXIT_STATUS_SEEN ? (int)(e.status & 0xffff) : -ENOENT;
}

bool sampler_watches_oom(const struct sampler *s)
{
	return s && s->oom_watched;
}

uint64_t sampler_oom_victim_ns(const struct sampler *s, pid_t pid)
{
	__u32 key = (__u32)pid;
	struct ch_exit e;

	if (!s || bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.exits), &key, &e) != 0)
		return 0;
	return e.flags & CH_EXIT_OOM_VICTIM ? e.oom_ns : 0;
}

int sampler_followed_blocks(const struct sampler *s, pid_t pid, struct sampler_block **out, size_t *n)
{
	__u32 key = (__u32)pid;
	struct ch_proc p;
	struct sampler_block *v;
	int fd[2] = { bpf_map__fd(s->skel->maps.major_tracked), bpf_map__fd(s->skel->maps.young_tracked) };

	*out = NULL;
	*n = 0;
	if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.procs), &key, &p) != 0)
		return -ENOENT;
	v = calloc((size_t)p.major_n + p.young_n + 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (int young = 0; young < 2; young++)
		for (__u32 i = 0; i < (young ? p.young_n : p.major_n); i++) {
			struct ch_tracked e;

			/* a pending final fate is a death not yet sent: not alive */
			if (bpf_map_lookup_elem(fd[young], &i, &e) == 0 && e.tgid == key &&
			    !(e.state & (CH_TRK_DEAD | CH_TRK_PEND_FATE)))
				v[(*n)++] = (struct sampler_block){ e.addr, e.sample_id, young };
		}
	*out = v;
	return 0;
}
