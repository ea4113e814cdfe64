/* ondemand.h -- libmicrohttpd, libcurl and libgvc, loaded (dlopen) by the
 * commands that use them (serve's HTTP endpoints, status's client, census
 * --retainers' SVG graph) instead of by
 * every camlheap process at its start.  With what they pull in (GnuTLS,
 * OpenSSL, Kerberos, LDAP, SASL, ...: 28 of the 57 shared libraries
 * camlheap linked) they were 16 ms of the ~27 ms of CPU any camlheap took
 * to start on this VM, where a fresh page costs ~10 us, and a service
 * starts a camlheap per followed process (measured on a C program linked
 * to the same libraries: 27-28 ms with them, 10-12 ms without).
 */
#ifndef CH_ONDEMAND_H
#define CH_ONDEMAND_H

#include <stddef.h>
#include <stdio.h>

#define CURL_DISABLE_TYPECHECK /* calls go through the pointers below, not curl's checking macros */
#include <curl/curl.h>
#include <graphviz/gvc.h>
#include <microhttpd.h>

/* The functions camlheap calls, each a pointer of the library's own type
 * (its header's prototype), by the library's name. */
#define ONDEMAND_MHD(X)                                                                                          \
	X(MHD_start_daemon) X(MHD_stop_daemon) X(MHD_create_response_from_buffer) X(MHD_create_response_from_fd) \
	X(MHD_add_response_header) X(MHD_queue_response) X(MHD_destroy_response) X(MHD_lookup_connection_value)
#define ONDEMAND_CURL(X)                                                                                    \
	X(curl_easy_init) X(curl_easy_setopt) X(curl_easy_perform) X(curl_easy_getinfo) X(curl_easy_cleanup) \
	X(curl_easy_strerror)

#define ONDEMAND_GVC(X)                                                                                   \
	X(gvContext) X(agmemread) X(gvLayout) X(gvRenderData) X(gvFreeRenderData) X(gvFreeLayout) X(agclose) \
	X(gvFreeContext)

#define ONDEMAND_FIELD(f) __typeof__(f) *f;
struct ondemand_mhd {
	ONDEMAND_MHD(ONDEMAND_FIELD)
};
struct ondemand_curl {
	ONDEMAND_CURL(ONDEMAND_FIELD)
};
struct ondemand_gvc {
	ONDEMAND_GVC(ONDEMAND_FIELD)
};
#undef ONDEMAND_FIELD

/* libmicrohttpd (the soname the headers are of: libmicrohttpd.so.12),
 * loaded at the first call and kept: its functions, or NULL with `err`
 * saying which library or function is missing and which Debian package
 * has it.  Thread-safe. */
const struct ondemand_mhd *ondemand_mhd(char *err, size_t errlen);

/* libcurl (libcurl.so.4), as ondemand_mhd. */
const struct ondemand_curl *ondemand_curl(char *err, size_t errlen);

/* Graphviz's libgvc (libgvc.so.6; agmemread and agclose from the libcgraph
 * it loads), as ondemand_mhd: census --retainers -o FILE.svg. */
const struct ondemand_gvc *ondemand_gvc(char *err, size_t errlen);

/* The DOT graph `dot` (NUL-terminated) laid out by Graphviz's dot and
 * written as SVG to f.  Returns 0, or -1 with err set (libgvc missing, the
 * graph refused, the layout or the write failed). */
int ondemand_dot_to_svg(const char *dot, FILE *f, char *err, size_t errlen);

#endif
