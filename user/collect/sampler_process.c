/* sampler_process.c -- what the kernel's programs recorded of a followed
 * process, read from their maps (sampler.h): when its minor heap was first
 * armed (`procs`), how it ended and whether the OOM killer chose it
 * (`exits`, include/camlheap.h struct ch_exit). */
#define _GNU_SOURCE
#include "collect/sampler_internal.h"

#include <errno.h>
#include <stdio.h>

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
