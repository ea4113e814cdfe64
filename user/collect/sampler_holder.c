/* sampler_holder.c -- the holder of the sampler's uprobe links
 * (sampler.h sampler_hand_off_links): a small process that keeps the
 * links open while camlheap runs and exits after it, so that neither
 * camlheap's exit nor its death (kill -9) waits for the kernel's ~1 s
 * release of a uprobe.  The target is touched by it only if camlheap died
 * in the middle of an OCaml 5 young_limit write (ptexec5_settle_after_death:
 * UINTNAT_MAX, one trap with nothing to do). */
#define _GNU_SOURCE
#include "collect/sampler_internal.h"
#include "collect/ptexec5.h"
#include "target/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "alloc.skel.h"

/* Close every descriptor of this process whose /proc/self/fd link does
 * (close_matching) or does not (!close_matching) start with `prefix`,
 * except `keep`. */
static void close_fds_by_link(const char *prefix, bool close_matching, int keep)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	while (d && (e = readdir(d))) {
		char path[64], what[64];
		int fd = atoi(e->d_name);
		ssize_t n;

		if (e->d_name[0] == '.' || fd == dirfd(d) || fd == keep)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, what, sizeof(what) - 1);
		what[n > 0 ? n : 0] = '\0';
		if ((strncmp(what, prefix, strlen(prefix)) == 0) == close_matching)
			close(fd);
	}
	if (d)
		closedir(d);
}

/* Wait up to 0.5 s until the map of young_trigger loans (bpf/minor5.bpf.h
 * trig_loans, fd `fd`) is empty: every lent value given back.  Returns the
 * loans still out. */
int sampler_wait_loans_returned(int fd)
{
	int n = 0;

	for (int tries = 0; tries < 500; tries++) {
		__u32 key, next, *prev = NULL;

		n = 0;
		while (bpf_map_get_next_key(fd, prev, &next) == 0) {
			n++;
			key = next;
			prev = &key;
		}
		if (!n)
			break;
		usleep(1000);
	}
	return n;
}

/* The holder: blocks until every write end of its pipe is closed (camlheap
 * detached, or died), then exits, releasing the inherited links.  With the
 * kernel executor on OCaml 5, `lend_link` (the caml_reset_young_limit entry
 * link) goes first, and the holder waits up to 0.5 s for the loans in
 * `loans_fd` to be given back before the return probe goes with the rest
 * (bpf/minor5.bpf.h); both are -1 otherwise. */
static void holder_main(int rd, int lend_link, int loans_fd)
{
	char c;
	sigset_t all;
	int devnull;
	ssize_t n;

	/* keep only the BPF objects and the pipe: not camlheap's stdout or
	 * stderr (a reader waiting for their EOF would wait for the holder),
	 * nor its files */
	close_fds_by_link("anon_inode:bpf", false, rd);
	devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
		if (devnull > 2)
			close(devnull);
	}

	/* Ctrl-C to the terminal's group must not release the probes
	 * before camlheap has stopped sampling */
	setsid();
	sigfillset(&all);
	sigdelset(&all, SIGKILL);
	sigprocmask(SIG_SETMASK, &all, NULL);
	while ((n = read(rd, &c, 1)) < 0 && errno == EINTR)
		;
	/* end of file without the detach's byte: camlheap died, maybe in the
	 * middle of an OCaml 5 write */
	if (n == 0)
		ptexec5_settle_after_death();
	if (lend_link >= 0) {
		close(lend_link);
		sampler_wait_loans_returned(loans_fd);
	}
	_exit(0);
}

static void drop_link(struct bpf_link **link)
{
	int fd;

	if (!*link)
		return;
	fd = bpf_link__fd(*link);
	bpf_link__disconnect(*link);
	bpf_link__destroy(*link);
	if (fd >= 0)
		close(fd);
	*link = NULL;
}

int sampler_hand_off_links(struct sampler *s, int holder_nice, char *err, size_t errlen)
{
	int fds[2], status, lend_link = -1, loans_fd = -1;
	pid_t mid;

	if (s->executor == CH_EXEC_KERNEL && sampler_link_fd(s, OCAML_PROBE_RESET_LIMIT) >= 0) {
		lend_link = sampler_link_fd(s, OCAML_PROBE_RESET_LIMIT);
		loans_fd = bpf_map__fd(s->skel->maps.trig_loans);
	}

	if (pipe2(fds, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -errno;
	}
	mid = fork();
	if (mid < 0) {
		int e = errno;

		close(fds[0]);
		close(fds[1]);
		snprintf(err, errlen, "fork: %s", strerror(e));
		return -e;
	}
	if (mid == 0) {
		/* a grandchild: never camlheap's child, so neither camlheap's
		 * waits nor its tracer thread ever see it */
		pid_t h = fork();

		if (h == 0) {
			close(fds[1]);
			proc_thread_nice_restore(holder_nice);
			holder_main(fds[0], lend_link, loans_fd);
		}
		_exit(h < 0 ? 1 : 0);
	}
	close(fds[0]);
	if (waitpid(mid, &status, 0) == mid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		close(fds[1]);
		snprintf(err, errlen, "cannot start the probe holder process");
		return -ECHILD;
	}
	/* the holder's copies keep the probes attached; ours go: a
	 * disconnected libbpf link leaves its descriptors open, so close the
	 * link's, and the perf events under the uprobe links (libbpf does not
	 * expose those; camlheap opens no other perf event) */
	for (int i = 0; i < OCAML_PROBE__COUNT; i++) {
		drop_link(&s->links[i]);
		if (s->ulinks[i] >= 0)
			close(s->ulinks[i]);
		s->ulinks[i] = -1;
	}
	for (int i = 0; i < 2 * CH_MFN__COUNT; i++) {
		drop_link(&s->mlinks[i]);
		if (s->umlinks[i] >= 0)
			close(s->umlinks[i]);
		s->umlinks[i] = -1;
	}
	drop_link(&s->exec_link);
	drop_link(&s->exit_link);
	drop_link(&s->oom_link);
	close_fds_by_link("anon_inode:[perf_event]", true, -1);
	s->holder_fd = fds[1];
	return 0;
}
