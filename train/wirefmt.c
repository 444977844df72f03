/* wirefmt.c -- --pull-format and --push-format values (wirefmt.h). */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec.h"
#include "protocol.h"
#include "wirefmt.h"

/* The formats are those of PS_PROTO_FORMATS (common/protocol.h): 'push'
 * takes the dense ones (a model's pushes and pulls), otherwise the ones
 * tables take (a sparse job's pulls). */
int tr_parse_wire(const char *name, int push, psWireFormat *out) {
    if (name == NULL) {
        *out = PS_WIRE_F32;
        return 0;
    }
#define TR_WIRE_(ID, dense, table)                                                                 \
    if (!strcasecmp(name, #ID) && (push ? dense : table)) {                                        \
        *out = PS_WIRE_##ID;                                                                       \
        return 0;                                                                                  \
    }
    PS_PROTO_FORMATS(TR_WIRE_, TR_WIRE_)
#undef TR_WIRE_
    return -1;
}


int tr_parse_push(const char *name, pushFormat *out) {
    const char *topk = ps_format_name(PS_FMT_TOPK); /* "TOPK", then ":k" or ":ratio" */
    memset(out, 0, sizeof(*out));
    if (name == NULL || strncasecmp(name, topk, 4) != 0)
        return tr_parse_wire(name, 1, &out->fmt);
    out->fmt = PS_WIRE_TOPK;
    if (name[4] == '\0') {
        out->topk_ratio = 0.01;
        return 0;
    }
    const char *k = name + 5;
    if (name[4] != ':' || *k == '\0' || *k == '-' || *k == '+' || *k == ' ') return -1;
    char *end;
    errno = 0;
    if (strpbrk(k, ".%eE") == NULL) {
        long long n = strtoll(k, &end, 10);
        if (errno || *end != '\0' || n < 1) return -1;
        out->topk_count = n;
        return 0;
    }
    double r = strtod(k, &end);
    if (errno || end == k || r != r) return -1;
    if (*end == '%' && end[1] == '\0') r /= 100;
    else if (*end != '\0') return -1;
    if (!(r > 0 && r <= 1)) return -1;
    out->topk_ratio = r;
    return 0;
}


const char *tr_push_name(const pushFormat *pf, char *buf, size_t len) {
    static const char *const names[] = {
#define TR_NAME_(ID, dense, table) [PS_WIRE_##ID] = #ID,
        PS_PROTO_FORMATS(TR_NAME_, TR_NAME_)
#undef TR_NAME_
    };
    if (pf->fmt != PS_WIRE_TOPK) {
        snprintf(buf, len, "%s", names[pf->fmt]); /* lower case, as recorded in configs */
        for (char *p = buf; *p; p++) *p = (char)tolower((unsigned char)*p);
    }
    else if (pf->topk_count > 0)
        snprintf(buf, len, "topk:%lld", pf->topk_count);
    else {
        /* A fraction must keep its '.' (or exponent): "topk:1" is a count. */
        snprintf(buf, len, "topk:%.17g", pf->topk_ratio);
        if (strpbrk(buf + 5, ".eE") == NULL) snprintf(buf, len, "topk:%.1f", pf->topk_ratio);
    }
    return buf;
}


int tr_push_same(const pushFormat *a, const pushFormat *b) {
    return a->fmt == b->fmt && (a->fmt != PS_WIRE_TOPK || (a->topk_ratio == b->topk_ratio &&
                                                           a->topk_count == b->topk_count));
}


int tr_push_apply(psModel *m, const pushFormat *pf) {
    double r = pf->topk_ratio;
    if (pf->fmt == PS_WIRE_TOPK && pf->topk_count > 0) {
        size_t total = 0;
        for (int t = 0; t < psModelNumTensors(m); t++) total += psModelTensorElements(m, t);
        r = total > 0 ? (double)pf->topk_count / (double)total : 1;
        if (r > 1) r = 1;
    }
    return psModelSetPushFormat(m, pf->fmt, r);
}

