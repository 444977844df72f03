/* protocol.c -- lookups over the tables of protocol.h, and the checks that
 * the tables are well formed (the build fails otherwise). */

#include "protocol.h"

#include <string.h>
#include <strings.h>

/* ------------------------------------------------------ table consistency */

/* Each kind's list names every optimizer at most once: the sum of the bits
 * equals their union only when no bit repeats. */
#define PS_BIT_(ID) + (1ull << PS_PROTO_OPT_##ID)
#define PS_OR_(ID) | (1ull << PS_PROTO_OPT_##ID)
_Static_assert(PS_PROTO_OPT_COUNT <= 64, "optimizer bit sets fit a uint64");
_Static_assert((0 PS_PROTO_TENSOR_OPTIMS(PS_BIT_, PS_BIT_)) ==
                   (0 PS_PROTO_TENSOR_OPTIMS(PS_OR_, PS_OR_)),
               "PS_PROTO_TENSOR_OPTIMS names an optimizer twice");
_Static_assert((0 PS_PROTO_TABLE_OPTIMS(PS_BIT_, PS_BIT_)) ==
                   (0 PS_PROTO_TABLE_OPTIMS(PS_OR_, PS_OR_)),
               "PS_PROTO_TABLE_OPTIMS names an optimizer twice");
/* Every optimizer applies to tensors, tables or both. */
_Static_assert(((0 PS_PROTO_TENSOR_OPTIMS(PS_OR_, PS_OR_)) |
                (0 PS_PROTO_TABLE_OPTIMS(PS_OR_, PS_OR_))) ==
                   (PS_PROTO_OPT_COUNT == 64 ? ~0ull : (1ull << PS_PROTO_OPT_COUNT) - 1),
               "an optimizer of PS_PROTO_OPTIMIZERS is in neither PS_PROTO_TENSOR_OPTIMS nor "
               "PS_PROTO_TABLE_OPTIMS");
#undef PS_BIT_
#undef PS_OR_

/* The first format is F32, dense and taken by tables (the joined name lists
 * and every command's default rely on it). */
#define PS_FIRST_(ID, dense, table)                                                                \
    _Static_assert(dense && table, "the first wire format is dense and taken by tables");          \
    enum { PS_PROTO_FIRST_FORMAT_IS_##ID = 1 };
#define PS_NONE_(ID, dense, table)
PS_PROTO_FORMATS(PS_FIRST_, PS_NONE_)
_Static_assert(PS_PROTO_FIRST_FORMAT_IS_F32, "the first wire format must be F32");
#undef PS_FIRST_
#undef PS_NONE_

/* ---------------------------------------------------------------- lookups */

static const struct {
    const char *name;
    int updates;
} Optims[PS_PROTO_OPT_COUNT] = {
#define PS_ROW_(ID, name, upd) [PS_PROTO_OPT_##ID] = {name, upd},
    PS_PROTO_OPTIMIZERS(PS_ROW_)
#undef PS_ROW_
};

/* The optimizer of each tensor / table code. */
static const int TensorOptims[] = {
#define PS_ROW_(ID) PS_PROTO_OPT_##ID,
    PS_PROTO_TENSOR_OPTIMS(PS_ROW_, PS_ROW_)
#undef PS_ROW_
};
static const int TableOptims[] = {
#define PS_ROW_(ID) PS_PROTO_OPT_##ID,
    PS_PROTO_TABLE_OPTIMS(PS_ROW_, PS_ROW_)
#undef PS_ROW_
};
_Static_assert(sizeof(TensorOptims) / sizeof(TensorOptims[0]) == PS_PROTO_TENSOR_OPTIM_COUNT,
               "tensor optimizer count");
_Static_assert(sizeof(TableOptims) / sizeof(TableOptims[0]) == PS_PROTO_TABLE_OPTIM_COUNT,
               "table optimizer count");

/* ASCII-only lower-casing, independent of the C locale. */
static char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c; }

const char *ps_proto_optim_name(int o) {
    return o >= 0 && o < PS_PROTO_OPT_COUNT ? Optims[o].name : "unknown";
}

int ps_proto_optim_parse(const char *s, size_t len) {
    if (s == NULL) return -1;
    for (int o = 0; o < PS_PROTO_OPT_COUNT; o++) {
        const char *n = Optims[o].name;
        size_t i = 0;
        if (strlen(n) != len) continue;
        while (i < len && lower(s[i]) == n[i]) i++;
        if (i == len) return o;
    }
    return -1;
}

int ps_proto_optim_updates(int o) { return o >= 0 && o < PS_PROTO_OPT_COUNT && Optims[o].updates; }

static int code_of(const int *list, int n, int o) {
    for (int k = 0; k < n; k++)
        if (list[k] == o) return k;
    return -1;
}

int ps_proto_optim_tensor_code(int o) {
    return code_of(TensorOptims, PS_PROTO_TENSOR_OPTIM_COUNT, o);
}

int ps_proto_optim_table_code(int o) { return code_of(TableOptims, PS_PROTO_TABLE_OPTIM_COUNT, o); }

int ps_proto_optim_of_tensor_code(int code) {
    return code >= 0 && code < PS_PROTO_TENSOR_OPTIM_COUNT ? TensorOptims[code] : -1;
}

int ps_proto_optim_of_table_code(int code) {
    return code >= 0 && code < PS_PROTO_TABLE_OPTIM_COUNT ? TableOptims[code] : -1;
}

int ps_proto_optim_for(const char *name, int kind, int updates) {
    int o = name ? ps_proto_optim_parse(name, strlen(name)) : -1;
    if (o < 0 || (updates && !Optims[o].updates)) return -1;
    if ((kind == PS_PROTO_KIND_TENSOR && ps_proto_optim_tensor_code(o) < 0) ||
        (kind == PS_PROTO_KIND_TABLE && ps_proto_optim_table_code(o) < 0))
        return -1;
    return o;
}

char *ps_proto_optim_names(int kind, int updates, const char *sep, char *buf, size_t cap) {
    const int *list = kind == PS_PROTO_KIND_TABLE ? TableOptims : TensorOptims;
    int n = kind == PS_PROTO_KIND_TABLE ? PS_PROTO_TABLE_OPTIM_COUNT : PS_PROTO_TENSOR_OPTIM_COUNT;
    size_t len = 0;
    if (cap == 0) return buf;
    buf[0] = '\0';
    for (int k = 0; k < n; k++) {
        if (updates && !Optims[list[k]].updates) continue;
        const char *parts[2] = {len ? sep : "", Optims[list[k]].name};
        for (int j = 0; j < 2; j++)
            for (const char *p = parts[j]; *p && len + 1 < cap; p++) buf[len++] = *p;
        buf[len] = '\0';
    }
    return buf;
}

static const unsigned char FormatDense[] = {
#define PS_ROW_(ID, dense, table) dense,
    PS_PROTO_FORMATS(PS_ROW_, PS_ROW_)
#undef PS_ROW_
};
static const unsigned char FormatTable[] = {
#define PS_ROW_(ID, dense, table) table,
    PS_PROTO_FORMATS(PS_ROW_, PS_ROW_)
#undef PS_ROW_
};
#define PS_NFORMATS ((int)sizeof(FormatDense))

int ps_proto_format_dense(int f) { return f >= 0 && f < PS_NFORMATS && FormatDense[f]; }
int ps_proto_format_table(int f) { return f >= 0 && f < PS_NFORMATS && FormatTable[f]; }

/* ----------------------------------------------------------------- errors */

static const char *const ErrText[PS_PROTO_ERR_COUNT] = {
    [PS_PROTO_ERR_NONE] = "",
#define PS_ROW_(ID) [PS_PROTO_ERR_##ID] = PS_PROTO_ERRTEXT_##ID,
    PS_PROTO_ERRORS(PS_ROW_)
#undef PS_ROW_
};

const char *ps_proto_error_text(ps_proto_error e) {
    return (int)e >= 0 && e < PS_PROTO_ERR_COUNT ? ErrText[e] : "";
}

int ps_proto_error_is_err(ps_proto_error e) {
    const char *t = ps_proto_error_text(e);
    return strncmp(t, "ERR", 3) == 0 && (t[3] == ' ' || t[3] == '\0');
}

/* Length of the number at s[0 .. n) (an optional '-', then digits), 0 if none. */
static size_t number_len(const char *s, size_t n) {
    size_t i = (n > 0 && s[0] == '-') ? 1 : 0, d = i;
    while (d < n && s[d] >= '0' && s[d] <= '9') d++;
    return d > i ? d : 0;
}

/* Whether the 'n' bytes at 's' match template 't' exactly: literal bytes
 * equal, "%s" any run of bytes (backtracking), a numeric conversion ("%llu",
 * "%lld", "%u", "%d", "%zu") a number, "%%" a '%'. */
static int match(const char *t, const char *s, size_t n) {
    while (*t) {
        if (t[0] == '%' && t[1] == 's') {
            for (size_t k = 0; k <= n; k++)
                if (match(t + 2, s + k, n - k)) return 1;
            return 0;
        }
        if (t[0] == '%' && t[1] != '%') {
            const char *c = t + 1;
            while (*c == 'l' || *c == 'z') c++;
            if (*c != 'u' && *c != 'd') return 0; /* no other conversion in the table */
            size_t k = number_len(s, n);
            if (k == 0) return 0;
            t = c + 1, s += k, n -= k;
            continue;
        }
        if (t[0] == '%') t++; /* "%%" */
        if (n == 0 || *s != *t) return 0;
        t++, s++, n--;
    }
    return n == 0;
}

ps_proto_error ps_proto_error_class(const char *s, size_t len) {
    if (s == NULL || len == 0) return PS_PROTO_ERR_NONE;
    for (int e = 1; e < PS_PROTO_ERR_COUNT; e++) {
        const char *t = ErrText[e];
        if (strchr(t, ' ') == NULL) {
            /* A code: the reply's first word. */
            size_t k = strlen(t);
            if (len >= k && memcmp(s, t, k) == 0 && (len == k || s[k] == ' '))
                return (ps_proto_error)e;
        } else if (match(t, s, len)) {
            return (ps_proto_error)e;
        }
    }
    return PS_PROTO_ERR_NONE;
}

/* ----------------------------------------------------------- push options */

static const struct {
    const char *name;
    int nvals;
} PushOpts[PS_PROTO_PUSH_COUNT] = {
#define PS_ROW_(ID, nvals, tensor, table) [PS_PROTO_PUSH_##ID] = {#ID, nvals},
    PS_PROTO_PUSH_OPTIONS(PS_ROW_)
#undef PS_ROW_
};

const char *ps_proto_push_option_name(ps_proto_push_option o) {
    return (int)o >= 0 && o < PS_PROTO_PUSH_COUNT ? PushOpts[o].name : "";
}

int ps_proto_push_option_nvals(ps_proto_push_option o) {
    return (int)o >= 0 && o < PS_PROTO_PUSH_COUNT ? PushOpts[o].nvals : 0;
}

/* ------------------------------------------------------------- id formats */

static const char *const IdFormats[PS_PROTO_IDFMT_COUNT] = {
#define PS_ROW_(ID) [PS_PROTO_IDFMT_##ID] = #ID,
    PS_PROTO_ID_FORMATS(PS_ROW_, PS_ROW_)
#undef PS_ROW_
};

const char *ps_proto_idformat_name(int f) {
    return f >= 0 && f < PS_PROTO_IDFMT_COUNT ? IdFormats[f] : "";
}

int ps_proto_idformat_parse(const char *s, size_t len) {
    for (int f = 0; f < PS_PROTO_IDFMT_COUNT; f++)
        if (strlen(IdFormats[f]) == len && strncasecmp(IdFormats[f], s, len) == 0) return f;
    return -1;
}
