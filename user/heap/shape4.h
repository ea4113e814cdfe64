/* shape4.h -- what a block of a stopped OCaml 4.x heap is, said as an OCaml
 * programmer would: a Hashtbl, a Queue, a Buffer, a Map or Set node, a
 * ref, a list, a closure named by its code, a string, a custom block by
 * its operations -- recognised from its header and a few fields, the
 * program stopped (heap/freeze.h) and nothing written.
 *
 * The stdlib's layouts, the same in 4.12.1 and 4.14.2 (stdlib/hashtbl.ml,
 * buffer.ml, queue.ml, stack.ml, map.ml, set.ml):
 *   Hashtbl.t  { mutable size: int; mutable data: bucketlist array;
 *                seed: int; mutable initial_size: int }       tag 0, 4 fields
 *   Buffer.t   { mutable buffer: bytes; mutable position: int;
 *                mutable length: int; initial_buffer: bytes }  tag 0, 4 fields
 *   Queue.t    { mutable length: int; mutable first: cell;
 *                mutable last: cell }, cell = Nil | Cons of {content; next}
 *   Stack.t    { mutable c: 'a list; mutable len: int }
 *   Map.t      Empty | Node of {l; v; d; r; h: int}            tag 0, 5 fields
 *   Set.t      Empty | Node of {l; v; r; h: int}               tag 0, 4 fields
 *   'a ref     { mutable contents: 'a }                        tag 0, 1 field
 * and the runtime's tags (runtime/caml/mlvalues.h): Closure_tag 247 (its
 * code in field 0, or field 2 for an arity other than 1; a partial
 * application's helper caml_curryN_K[_app] holds the closure applied in its
 * last field: asmcomp/cmm_helpers.ml), Infix_tag 249 (a closure of a
 * recursive set, its set Infix_offset_hd bytes before), String_tag 252
 * (the last byte the padding, hence the length),
 * Double_array_tag 254, Custom_tag 255 (field 0 its custom_operations,
 * whose first member is the identifier, runtime/caml/custom.h),
 * Abstract_tag 251 (weak arrays and ephemerons in 4.x, weak.h), Lazy_tag
 * 246, Forward_tag 250, Object_tag 248 (an object, or an exception
 * constructor: its name and id).  A value of another type can have the
 * same shape: such names are followed by "(by its shape)", and any block
 * of one field reads "ref or Some of".
 */
#ifndef CH_SHAPE4_H
#define CH_SHAPE4_H

#include <stddef.h>
#include <stdint.h>

#include "target/target.h"

/* Describe the value v (a block: the address of its first field) of t's
 * stopped process into out (NUL-terminated, truncated to len): e.g.
 * "Hashtbl.t (by its shape): 20000 bindings in 16384 buckets; a binding:
 * string -> int", "ref or Some of closure Retain.fun capturing 1 value",
 * "partial application of Leak.add", "list of 120 elements".  Reads
 * at most a few hundred words.  *code (if not NULL) receives the runtime
 * address of the code of the closure the description names, else 0 (to
 * be given a source line once the target runs again: modules.h).
 * Returns 0, or -EFAULT if v's header is unreadable (out then says so). */
int shape4_describe(const struct target *t, uint64_t v, char *out, size_t len, uint64_t *code);

#endif
