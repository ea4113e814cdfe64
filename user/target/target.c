/* target.c -- the target as a whole (target.h): a process, the executable
 * it runs (opened once: every later step reads that very file), its OCaml
 * runtime, frame tables and modules; whether it still runs that image;
 * and its own Gc.Memprof rate. */
#define _GNU_SOURCE
#include "target/target.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "camlheap.h"
#include "target/proc.h"

void target_say_exec_while_attaching(char *msg, size_t len, pid_t pid)
{
	snprintf(msg, len,
		 "PID %d called exec while camlheap was attaching: nothing recorded; attach again to profile "
		 "the new program",
		 (int)pid);
}

/* Everything about the target that can fail before any probe exists. */
int target_inspect(struct target *t, char *msg, size_t len)
{
	char why[1024];
	int ret;

	if (!t->launched && !proc_is_process(t->pid)) {
		if (kill(t->pid, 0) < 0 && errno == ESRCH)
			snprintf(msg, len, "no process with PID %d", t->pid);
		else
			snprintf(msg, len, "%d is not a process ID (a thread ID, or not visible here): pass the PID "
					   "of the process (its thread-group leader)",
				 t->pid);
		return -ESRCH;
	}
	ret = proc_exe_path(t->pid, t->exe, sizeof(t->exe));
	if (ret == -EACCES) {
		snprintf(msg, len,
			 "not allowed to inspect PID %d (/proc/%d/exe): camlheap needs ptrace access to the target "
			 "(CAP_SYS_PTRACE); %s",
			 t->pid, t->pid,
			 geteuid() == 0 ? "camlheap runs as root, so a security module (Yama, SELinux, AppArmor) or "
					  "a PID namespace forbids it"
					: "run it as root");
		return ret;
	}
	if (ret < 0) {
		snprintf(msg, len, "PID %d has no executable (exited, a zombie or a kernel thread)", t->pid);
		return ret;
	}
	/* Everything (parsing, uprobes, DWARF) goes through one open file:
	 * if the target execs meanwhile, the probes still land in the binary
	 * that was parsed, never at its offsets in another one. */
	snprintf(t->proc_exe_link, sizeof(t->proc_exe_link), "/proc/%d/exe", t->pid);
	t->exe_fd = open(t->proc_exe_link, O_RDONLY | O_CLOEXEC);
	if (t->exe_fd < 0 || fstat(t->exe_fd, &t->exe_st) < 0) {
		snprintf(msg, len, "PID %d has no executable (exited, a zombie or a kernel thread)", t->pid);
		return -ESRCH;
	}
	snprintf(t->proc_exe, sizeof(t->proc_exe), "/proc/self/fd/%d", t->exe_fd);
	ret = elf_image_open(t->proc_exe, &t->img);
	if (ret < 0) {
		snprintf(msg, len, "PID %d runs %s, which %s", t->pid, t->exe,
			 ret == -ENOEXEC ? "is not an x86-64 ELF executable: only native OCaml programs are supported"
					 : "cannot be read");
		return ret;
	}
	if (ocaml_runtime_detect(t->img, t->exe, &t->rt, why, sizeof(why)) != OCAML_OK) {
		snprintf(msg, len, "PID %d: %s", t->pid, why);
		return -ENOTSUP;
	}
	ret = frametable_load(t->img, &t->ft);
	if (ret < 0) {
		snprintf(msg, len, "PID %d: cannot parse the frame tables of %s (%s)", t->pid, t->exe, strerror(-ret));
		return ret;
	}
	t->mods.dbg52 = t->ft->dbg52;
	ret = proc_load_bias(t->pid, t->img, &t->bias);
	if (ret == 0)
		ret = modules_add_exe(&t->mods, t->pid, t->img, t->ft, t->bias);
	if (ret == -ENOENT && !t->launched) {
		struct stat now;

		if (stat(t->proc_exe_link, &now) == 0 &&
		    (now.st_dev != t->exe_st.st_dev || now.st_ino != t->exe_st.st_ino)) {
			target_say_exec_while_attaching(msg, len, t->pid);
			return -ESTALE;
		}
	}
	if (ret < 0) {
		snprintf(msg, len, "PID %d: cannot find where %s is mapped (/proc/%d/maps): %s", t->pid, t->exe,
			 t->pid, strerror(-ret));
		return ret;
	}
	return 0;
}

/* Gc.Memprof's current rate in the target (memprof.c `lambda`): > 0 while
 * the program samples itself, 0 when it does not, -1 if it cannot be read
 * (no .symtab, or no access). */
static int read_u64(int fd, uint64_t addr, uint64_t *out)
{
	return pread(fd, out, sizeof(*out), (off_t)addr) == sizeof(*out) ? 0 : -1;
}

/* OCaml 5.3 and 5.4: the Gc.Memprof configuration of domain 0 (a profile applies to
 * every domain), through all_domains[0].state->memprof->entries.config, a
 * Gc.Memprof.t block: field 0 its status (Val_int(0): sampling), field 1
 * its rate, a boxed float (5.3 runtime/memprof.c:377-412). */
static double memprof53_rate(const struct target *t, int fd)
{
	uint64_t all = 0, state = 0, mp = 0, config = 0, status = 0, box = 0;
	double lambda = -1;

	if (!t->rt.all_domains_sym || !t->rt.memprof_off || read_u64(fd, t->rt.all_domains_sym + t->bias, &all) || !all ||
	    read_u64(fd, all + t->rt.dom_internal_state_off, &state) || !state ||
	    read_u64(fd, state + t->rt.memprof_off, &mp) || !mp || read_u64(fd, mp + CH_OCAML53_MEMPROF_CONFIG, &config) ||
	    config == 1 /* Val_unit: never started */ || (config & 7) || read_u64(fd, config, &status) ||
	    status != 1 /* Val_int(CONFIG_STATUS_SAMPLING) */ || read_u64(fd, config + 8, &box) ||
	    pread(fd, &lambda, sizeof(lambda), (off_t)box) != sizeof(lambda))
		return -1;
	return lambda;
}

double target_memprof_rate(const struct target *t)
{
	char path[64];
	double lambda = -1;
	int fd;

	if (!t->rt.memprof_lambda_sym && !t->rt.all_domains_sym)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)t->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (t->rt.major == 5)
		lambda = memprof53_rate(t, fd);
	else if (pread(fd, &lambda, sizeof(lambda), (off_t)(t->rt.memprof_lambda_sym + t->bias)) != sizeof(lambda))
		lambda = -1;
	close(fd);
	return lambda > 0 && lambda <= 1 ? lambda : -1;
}

/* Does the target still run the image that was parsed, at the same place?
 * (An exec before the exec tracepoint was attached is caught here.)
 * Returns 0 if so, -ESTALE if it execed, another -errno if it cannot tell. */
int target_check_unchanged(struct target *t)
{
	struct stat st;
	uint64_t bias;
	int ret;

	if (stat(t->proc_exe_link, &st) < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	if (st.st_dev != t->exe_st.st_dev || st.st_ino != t->exe_st.st_ino)
		return -ESTALE;
	ret = proc_load_bias(t->pid, t->img, &bias);
	if (ret == -ENOENT)
		return -ESTALE; /* the parsed file is no longer mapped */
	if (ret < 0)
		return ret;
	return bias == t->bias ? 0 : -ESTALE;
}

void target_release(struct target *t)
{
	if (t->exe_fd >= 0)
		close(t->exe_fd);
	t->exe_fd = -1;
	if (t->mods.n) {
		modules_free(&t->mods); /* owns img and ft */
	} else {
		frametable_free(t->ft);
		elf_image_close(t->img);
	}
	t->ft = NULL;
	t->img = NULL;
}

/* The target has exited (a launched child: it is a zombie, not yet reaped). */
bool target_gone(const struct target *t)
{
	char state = 0;
	int ret;

	if (kill(t->pid, 0) < 0 && errno == ESRCH)
		return true;
	ret = proc_stat(t->pid, &state, NULL);
	if (ret == -ESRCH)
		return true;
	return ret == 0 && (state == 'Z' || state == 'X'); /* not gone for want of descriptors */
}
