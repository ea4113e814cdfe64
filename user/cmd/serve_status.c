/* serve_status.c -- `camlheap status` (serve.h): a running service's
 * /targets, fetched with libcurl over its Unix socket or HTTP, printed as
 * a table (or as it came, --json). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "cmd/ondemand.h"
#include "cmd/serve.h"

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
	g_string_append_len(ctx, data, (gssize)(size * n));
	return size * n;
}

static const char *human_bytes(double b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
	return buf;
}

int serve_status(const char *sock, const char *url, bool json)
{
	char full[1024], cerr[CURL_ERROR_SIZE] = "";
	const struct ondemand_curl *cu = ondemand_curl(cerr, sizeof(cerr));
	CURL *c = cu ? cu->curl_easy_init() : NULL;
	GString *body = g_string_new(NULL);
	long code = 0;
	CURLcode cr;
	JsonParser *p = NULL;
	int ret = 1;

	if (!c) {
		fprintf(stderr, "camlheap: %s\n", cu ? "cannot initialise libcurl" : cerr);
		g_string_free(body, TRUE);
		return 1;
	}
	if (sock) {
		struct stat st;

		if (stat(sock, &st) < 0 || !S_ISSOCK(st.st_mode)) {
			fprintf(stderr,
				"camlheap: no camlheap serve socket at %s (%s): is the service running, with `socket = %s` "
				"in its configuration? (or give --url http://HOST:PORT, its `listen =`)\n",
				sock, errno && stat(sock, &st) < 0 ? strerror(errno) : "not a socket", sock);
			cu->curl_easy_cleanup(c);
			g_string_free(body, TRUE);
			return 1;
		}
		if (access(sock, R_OK | W_OK) < 0) {
			fprintf(stderr, "camlheap: %s: %s: the service's socket is root's (mode 0600); run camlheap status "
					"as root\n", sock, strerror(errno));
			cu->curl_easy_cleanup(c);
			g_string_free(body, TRUE);
			return 1;
		}
	}
	snprintf(full, sizeof(full), "%s/targets", url ? url : "http://localhost");
	cu->curl_easy_setopt(c, CURLOPT_URL, full);
	if (sock)
		cu->curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, sock);
	cu->curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	cu->curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
	cu->curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	cu->curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	cr = cu->curl_easy_perform(c);
	cu->curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	cu->curl_easy_cleanup(c);
	if (cr != CURLE_OK || code != 200) {
		fprintf(stderr,
			"camlheap: cannot reach camlheap serve at %s: %s\n"
			"  is it running (systemctl status camlheap)?%s\n",
			sock ? sock : full,
			cr != CURLE_OK ? (sock ? "the socket does not answer (a service that died left it)"
					       : cerr[0] ? cerr : cu->curl_easy_strerror(cr))
				       : "unexpected HTTP status",
			sock ? "" : " is that its `listen =` address?");
		goto out;
	}
	if (json) {
		fputs(body->str, stdout);
		ret = 0;
		goto out;
	}
	p = json_parser_new();
	if (!json_parser_load_from_data(p, body->str, (gssize)body->len, NULL)) {
		fprintf(stderr, "camlheap: the service answered something that is not JSON\n");
		goto out;
	}
	{
		JsonObject *root = json_node_get_object(json_parser_get_root(p));
		JsonObject *svc = json_object_get_object_member(root, "service");
		JsonArray *targets = json_object_get_array_member(root, "targets");
		char b1[32], b2[32];

		printf("camlheap serve (PID %lld), %s; %lld process%s followed; profiles every %g s in %s\n",
		       (long long)json_object_get_int_member(svc, "pid"), json_object_get_string_member(svc, "config"),
		       (long long)json_object_get_int_member(svc, "processes_followed"),
		       json_object_get_int_member(svc, "processes_followed") == 1 ? "" : "es",
		       json_object_get_double_member(svc, "interval_s"), json_object_get_string_member(svc, "output"));
		printf("%-16s %8s %-10s %-7s %9s %10s %9s %10s %10s %6s\n", "TARGET", "PID", "STATE", "OCAML", "SAMPLES/S",
		       "LAMBDA", "OVERHEAD", "LIVE(EST)", "RSS", "FILES");
		for (guint i = 0; i < json_array_get_length(targets); i++) {
			JsonObject *t = json_array_get_object_element(targets, i);
			JsonArray *procs = json_object_get_array_member(t, "processes");
			const char *name = json_object_get_string_member(t, "name");

			if (!json_array_get_length(procs))
				printf("%-16s %8s %-10s\n", name, "-", "none yet");
			for (guint j = 0; j < json_array_get_length(procs); j++) {
				JsonObject *q = json_array_get_object_element(procs, j);
				const char *ver = json_object_get_string_member(q, "ocaml_version");
				const char *msg = json_object_get_string_member(q, "message");
				const char *state = json_object_get_string_member(q, "state");

				printf("%-16s %8lld %-10s %-7s %9.0f %10.3g %8.2f%% %10s %10s %6lld\n", name,
				       (long long)json_object_get_int_member(q, "pid"), state, ver ? ver : "-",
				       json_object_get_double_member(q, "samples_per_second"),
				       json_object_get_double_member(q, "lambda_in_force"),
				       json_object_get_double_member(q, "overhead_ratio") * 100,
				       human_bytes(json_object_get_double_member(q, "live_bytes_estimate"), b1, sizeof(b1)),
				       human_bytes((double)json_object_get_int_member(q, "resident_bytes"), b2, sizeof(b2)),
				       (long long)json_object_get_int_member(q, "files_written"));
				if (msg && strcmp(state, "recording"))
					printf("%-16s %8s   %s\n", "", "", msg);
			}
		}
	}
	ret = 0;
out:
	if (p)
		g_object_unref(p);
	g_string_free(body, TRUE);
	return ret;
}
