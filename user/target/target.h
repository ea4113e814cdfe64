/* target.h -- the process camlheap profiles, inspected as a whole before
 * any probe exists: its executable (opened once; the probes, the frame
 * tables and the symbols all come from that very file, whatever the
 * process execs later), its OCaml runtime (ocaml_runtime.h), frame tables
 * (frametable.h) and modules (modules.h).
 */
#ifndef CH_TARGET_H
#define CH_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "target/elf_image.h"
#include "target/frametable.h"
#include "target/modules.h"
#include "target/ocaml_runtime.h"

/* Fill pid and launched, exe_fd = -1, the rest zero, then target_inspect. */
struct target {
	pid_t pid;
	bool launched;
	char exe[4096];
	char proc_exe[64];          /* "/proc/self/fd/N": the very file parsed, whatever the target execs */
	char proc_exe_link[64];     /* "/proc/PID/exe": what the target runs now */
	int exe_fd;
	struct elf_image *img;
	struct frametable *ft;
	struct ocaml_runtime rt;
	uint64_t bias;
	struct modules mods;        /* owns img and ft once the target is inspected */
	struct stat exe_st;         /* identity of the executable at attach */
};

/* Everything about the target that can fail before any probe exists: the
 * process (t->pid, its thread-group leader), its executable (opened once,
 * t->proc_exe), the runtime's release and layout, the frame tables, the
 * load bias and the executable's module.  Returns 0, or -errno with the
 * reason in msg (len bytes): -ESRCH no such process, -EACCES not allowed,
 * -ENOEXEC not an x86-64 ELF, -ENOTSUP not a supported native OCaml
 * program, -ESTALE it execed meanwhile. */
int target_inspect(struct target *t, char *msg, size_t len);

/* The message for a target that called exec while camlheap attached. */
void target_say_exec_while_attaching(char *msg, size_t len, pid_t pid);

/* Gc.Memprof's current rate in the target, samples per word: > 0 while the
 * program samples itself, -1 if it does not or it cannot be read (no
 * symbol, or no access).  4.x: memprof.c's `lambda` (4.14
 * runtime/memprof.c); 5.3 and 5.4: domain 0's Gc.Memprof configuration
 * (5.3 runtime/memprof.c:377-412). */
double target_memprof_rate(const struct target *t);

/* Does the target still run the image that was parsed, at the same load
 * bias?  (An exec before the exec tracepoint was attached is caught here.)
 * Returns 0 if so, -ESTALE if it execed, -ESRCH if it is gone, another
 * -errno if it cannot tell. */
int target_check_unchanged(struct target *t);

/* The target has exited (a launched child: a zombie, not yet reaped). */
bool target_gone(const struct target *t);

/* Close the executable and free the image, frame tables and modules. */
void target_release(struct target *t);

#endif
