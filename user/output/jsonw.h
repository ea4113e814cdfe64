/* jsonw.h -- one-line members for json-glib's JsonBuilder (report_json.c, serve_http.c).
 * Each sets the member name, then its value inside the object being built. */
#ifndef CH_JSONW_H
#define CH_JSONW_H

#include <stdint.h>

#include <json-glib/json-glib.h>

static inline void json_member_int(JsonBuilder *jb, const char *name, int64_t v)
{
	json_builder_set_member_name(jb, name);
	json_builder_add_int_value(jb, v);
}

/* v NULL: a JSON null */
static inline void json_member_str(JsonBuilder *jb, const char *name, const char *v)
{
	json_builder_set_member_name(jb, name);
	if (v)
		json_builder_add_string_value(jb, v);
	else
		json_builder_add_null_value(jb);
}

static inline void json_member_double(JsonBuilder *jb, const char *name, double v)
{
	json_builder_set_member_name(jb, name);
	json_builder_add_double_value(jb, v);
}

#endif
