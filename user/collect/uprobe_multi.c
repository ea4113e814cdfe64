/* uprobe_multi.c -- see uprobe_multi.h. */
#define _GNU_SOURCE
#include "collect/uprobe_multi.h"

#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <linux/bpf.h>

#define CH_BPF_F_UPROBE_MULTI_RETURN 1u /* Linux 6.6 UAPI */

/* union bpf_attr's link_create as Linux 6.6 lays it out for
 * BPF_TRACE_UPROBE_MULTI (include/uapi/linux/bpf.h): prog_fd, target_fd,
 * attach_type, flags, then the uprobe_multi member of the union. */
struct link_create_uprobe_multi {
	uint32_t prog_fd;
	uint32_t target_fd;
	uint32_t attach_type;
	uint32_t flags;
	uint64_t path;            /* const char * */
	uint64_t offsets;         /* const unsigned long * */
	uint64_t ref_ctr_offsets; /* const unsigned long *, or 0 */
	uint64_t cookies;         /* const __u64 *, or 0 */
	uint32_t cnt;
	uint32_t flags_multi;     /* BPF_F_UPROBE_MULTI_RETURN */
	uint32_t pid;
	uint32_t pad;
};

static int link_create(int prog_fd, const char *path, const unsigned long *offset, uint32_t flags, int32_t pid)
{
	struct link_create_uprobe_multi a;
	long fd;

	memset(&a, 0, sizeof(a));
	a.prog_fd = (uint32_t)prog_fd;
	a.attach_type = CH_BPF_TRACE_UPROBE_MULTI;
	a.path = (uint64_t)(uintptr_t)path;
	a.offsets = (uint64_t)(uintptr_t)offset;
	a.cnt = 1;
	a.flags_multi = flags;
	a.pid = (uint32_t)pid;
	fd = syscall(SYS_bpf, BPF_LINK_CREATE, &a, sizeof(a));
	return fd < 0 ? -errno : (int)fd;
}

bool uprobe_multi_supported(void)
{
	static int known = -1;
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = CH_BPF_TRACE_UPROBE_MULTI);
	unsigned long offset = 0;
	int prog, e1, e2;

	if (known >= 0)
		return known;
	prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "ch_um_probe", "GPL", insns, 2, &opts);
	if (prog < 0) {
		known = 0;
		return false;
	}
	/* a uprobe in "/" (a directory) is refused with EBADF by a kernel
	 * that knows the link type (EINVAL before 6.6) */
	e1 = link_create(prog, "/", &offset, 0, 0);
	/* with pid -1 a kernel that filters by process refuses at once
	 * (EINVAL), before it looks at the path */
	e2 = link_create(prog, "/", &offset, 0, -1);
	if (e1 >= 0)
		close(e1);
	if (e2 >= 0)
		close(e2);
	close(prog);
	known = e1 == -EBADF && e2 == -EINVAL;
	return known;
}

int uprobe_multi_attach(int prog_fd, pid_t pid, const char *path, uint64_t file_offset, bool retprobe)
{
	unsigned long offset = (unsigned long)file_offset;

	return link_create(prog_fd, path, &offset, retprobe ? CH_BPF_F_UPROBE_MULTI_RETURN : 0, (int32_t)pid);
}
