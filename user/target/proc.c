/* proc.c -- see proc.h. */
#define _GNU_SOURCE
#include "target/proc.h"

#include <sys/uio.h>

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib.h>


int proc_stat(pid_t pid, char *state, unsigned long long *starttime)
{
	char path[64], buf[1024], *p;
	int fd, field = 3;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH ? -ESRCH : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 && errno != ESRCH ? -errno : -ESRCH;
	buf[n] = 0;
	p = strrchr(buf, ')'); /* comm may hold spaces and parens */
	if (!p || p[1] != ' ' || !p[2])
		return -EINVAL;
	p += 2;
	if (state)
		*state = *p;
	/* p is at field 3; the start time is field 22 */
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (starttime && (field != 22 || sscanf(p, "%llu", starttime) != 1))
		return -EINVAL;
	return 0;
}

int proc_exe_path(pid_t pid, char *buf, size_t len)
{
	char link[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, buf, len - 1);
	if (n < 0) {
		if (errno == EACCES || errno == EPERM)
			return -EACCES;
		return -ESRCH;
	}
	buf[n] = '\0';
	return 0;
}

int proc_status_field(pid_t pid, const char *name, long *value)
{
	char path[64], line[256];
	size_t n = strlen(name);
	FILE *f;
	int ret = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -ENOENT;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, n) && line[n] == ':' && sscanf(line + n + 1, "%ld", value) == 1) {
			ret = 0;
			break;
		}
	fclose(f);
	return ret;
}

int proc_cgroup(pid_t pid, const char *controller, char *out, size_t len)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	FILE *f;
	int ret = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -ESRCH;
	/* "ID:CONTROLLERS:PATH"; cgroup v2's line is "0::PATH" */
	while (ret && getline(&line, &cap, f) > 0) {
		char *c = strchr(line, ':'), *p = c ? strchr(c + 1, ':') : NULL, *k;

		if (!p)
			continue;
		line[strcspn(line, "\n")] = 0;
		*c = *p = 0;
		if (!controller) {
			if (!strcmp(line, "0") && !c[1])
				ret = 0;
		} else {
			char *save = NULL;

			for (k = strtok_r(c + 1, ",", &save); k && ret; k = strtok_r(NULL, ",", &save))
				if (!strcmp(k, controller))
					ret = 0;
		}
		if (!ret)
			snprintf(out, len, "%s", p + 1);
	}
	free(line);
	fclose(f);
	return ret;
}

int proc_is_process(pid_t pid)
{
	long tgid;

	return proc_status_field(pid, "Tgid", &tgid) == 0 && tgid == pid;
}

int proc_load_bias(pid_t pid, const struct elf_image *img, uint64_t *bias)
{
	char path[64], line[4096];
	struct stat st;
	FILE *f;
	uint64_t want_off = 0, want_vaddr = 0;
	int ret = -ENOENT;

	if (elf_image_first_load(img, &want_off, &want_vaddr) < 0)
		return -ENOENT;
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	if (stat(path, &st) < 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno; /* e.g. -EMFILE */
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off, ino;
		unsigned maj, min;
		char perms[8];

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &off, &maj, &min, &ino) != 7)
			continue;
		if (ino != st.st_ino || makedev(maj, min) != st.st_dev || off != want_off)
			continue;
		*bias = start - want_vaddr;
		ret = 0;
		break;
	}
	fclose(f);
	return ret;
}

int proc_pidfd(pid_t pid)
{
	long fd = syscall(SYS_pidfd_open, pid, 0);

	return fd < 0 ? -errno : (int)fd;
}

static void launch_child(char *const argv[], const sigset_t *mask, int gate_r, int err_w)
{
	char c;
	int e;

	/* exactly what the command would get without camlheap: the caller's
	 * mask, and dispositions untouched (ignored ones stay ignored) */
	sigprocmask(SIG_SETMASK, mask, NULL);
	/* Wait until the parent has seized us; EOF (parent gone) also lets
	 * the command run, unprofiled. */
	while (read(gate_r, &c, 1) < 0 && errno == EINTR)
		;
	close(gate_r);
	execvp(argv[0], argv);
	e = errno;
	if (write(err_w, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(127);
}

int proc_launch(char *const argv[], const sigset_t *child_mask, pid_t *out, char *err, size_t errlen)
{
	int gate[2], errp[2], status, e = 0;
	pid_t pid;

	if (pipe2(gate, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -errno;
	}
	pid = fork();
	if (pid < 0) {
		e = errno;
		snprintf(err, errlen, "fork: %s", strerror(e));
		return -e;
	}
	if (pid == 0) {
		close(gate[1]);
		close(errp[0]);
		launch_child(argv, child_mask, gate[0], errp[1]);
	}
	close(gate[0]);
	close(errp[1]);
	if (ptrace(PTRACE_SEIZE, pid, 0, (void *)(long)PTRACE_O_TRACEEXEC) < 0) {
		e = errno;
		snprintf(err, errlen,
			 "cannot trace the command (ptrace: %s): needs CAP_SYS_PTRACE, or a Yama "
			 "ptrace_scope below 3",
			 strerror(e));
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(gate[1]);
		close(errp[0]);
		return -e;
	}
	if (write(gate[1], "g", 1) != 1) {
		e = errno;
	}
	close(gate[1]);

	for (;;) {
		if (waitpid(pid, &status, __WALL) < 0) {
			if (errno == EINTR)
				continue;
			e = errno;
			snprintf(err, errlen, "waitpid: %s", strerror(e));
			close(errp[0]);
			return -e;
		}
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			int child_errno = 0;

			if (read(errp[0], &child_errno, sizeof(child_errno)) == sizeof(child_errno))
				snprintf(err, errlen, "cannot run %s: %s", argv[0], strerror(child_errno));
			else
				snprintf(err, errlen, "%s ended before it started (status 0x%x)", argv[0], status);
			close(errp[0]);
			return child_errno ? -child_errno : -ECHILD;
		}
		if (!WIFSTOPPED(status))
			continue;
		if (status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXEC << 8))) {
			close(errp[0]);
			*out = pid;
			return 0;
		}
		if (status >> 16 == PTRACE_EVENT_STOP) {
			/* group-stop (SIGSTOP/SIGTSTP before exec): keep it stopped as
			 * without a tracer, until SIGCONT. */
			ptrace(PTRACE_LISTEN, pid, 0, 0);
			continue;
		}
		/* signal-delivery-stop: deliver the signal as if untraced */
		ptrace(PTRACE_CONT, pid, 0, (void *)(long)WSTOPSIG(status));
	}
}

int proc_launch_release(pid_t pid)
{
	return ptrace(PTRACE_DETACH, pid, 0, 0) < 0 ? -errno : 0;
}

/* bash's $'...' with \xHH escapes for bytes that are not UTF-8 or are
 * control characters: the line stays valid UTF-8 (the recording's
 * metadata is JSON) and types back the same bytes. */
static void append_ansi_c_quoted(GString *g, const char *arg)
{
	g_string_append(g, "$'");
	for (const unsigned char *c = (const unsigned char *)arg; *c; c++) {
		if (*c == '\\' || *c == '\'')
			g_string_append_printf(g, "\\%c", *c);
		else if (*c < 0x20 || *c >= 0x7f)
			g_string_append_printf(g, "\\x%02x", *c);
		else
			g_string_append_c(g, (char)*c);
	}
	g_string_append_c(g, '\'');
}

char *proc_command_line(char *const argv[])
{
	GString *g = g_string_new(NULL);
	char *s;

	for (char *const *a = argv; *a; a++) {
		bool plain = **a && strspn(*a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") ==
					strlen(*a);
		bool ctl = false;

		for (const unsigned char *c = (const unsigned char *)*a; *c; c++)
			ctl = ctl || *c < 0x20 || *c == 0x7f;
		if (a != argv)
			g_string_append_c(g, ' ');
		if (plain) {
			g_string_append(g, *a);
		} else if (!ctl && g_utf8_validate(*a, -1, NULL)) {
			char *q = g_shell_quote(*a);

			g_string_append(g, q);
			g_free(q);
		} else {
			append_ansi_c_quoted(g, *a);
		}
	}
	s = strdup(g->str);
	g_string_free(g, TRUE);
	return s;
}

int proc_thread_nice_raise(int nice)
{
	id_t tid = (id_t)syscall(SYS_gettid);
	int nice0;

	errno = 0;
	nice0 = getpriority(PRIO_PROCESS, tid);
	if (errno || nice0 <= nice || setpriority(PRIO_PROCESS, tid, nice) < 0)
		return INT_MIN;
	return nice0;
}

void proc_thread_nice_restore(int nice0)
{
	if (nice0 != INT_MIN)
		setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice0);
}

int proc_read_mem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };

	return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -EFAULT;
}
