/* uprobe_multi.h -- uprobes as BPF links of their own (BPF_LINK_TYPE_UPROBE_MULTI,
 * Linux 6.6 and later), where the kernel has them, instead of perf events.
 *
 * Why: a perf-event uprobe is created and released under the kernel's
 * global event_mutex, and its release waits there for an RCU tasks-trace
 * grace period (kernel/trace/trace_event_perf.c perf_trace_destroy ->
 * trace_uprobe.c probe_event_disable -> uprobe_unregister_sync), so every
 * camlheap attaching anywhere on the machine waits for each probe another
 * one releases (measured: 3 ms for 16 probes alone, 0.37-0.57 s right after
 * another instance's detach).  A uprobe_multi link takes no such lock and
 * waits for one grace period per link, outside any lock
 * (kernel/trace/bpf_trace.c bpf_uprobe_multi_link_release).
 *
 * libbpf 1.1 (Debian 12) knows neither the attach type nor its link
 * attributes: the few fields are written here from the kernel's UAPI
 * (include/uapi/linux/bpf.h, union bpf_attr, link_create.uprobe_multi,
 * Linux 6.6).
 */
#ifndef CH_UPROBE_MULTI_H
#define CH_UPROBE_MULTI_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* enum bpf_attach_type BPF_TRACE_UPROBE_MULTI (Linux 6.6 UAPI) */
#define CH_BPF_TRACE_UPROBE_MULTI 48

/* Does this kernel attach uprobe_multi links, with the process filtering
 * fixed (6.9: a pid filtered threads before; libbpf's own probe,
 * libbpf/src/features.c probe_uprobe_multi_link, checks the same two
 * answers)?  Asked once per process (a trivial program loaded, two
 * attaches refused).  Returns true or false. */
bool uprobe_multi_supported(void);

/* Attach program `prog_fd` (loaded with expected attach type
 * CH_BPF_TRACE_UPROBE_MULTI) to the instruction at `file_offset` bytes into
 * the file `path`, in process `pid` only, as a return probe if `retprobe`.
 * Returns the link's descriptor (closing it detaches), or -errno. */
int uprobe_multi_attach(int prog_fd, pid_t pid, const char *path, uint64_t file_offset, bool retprobe);

#endif
