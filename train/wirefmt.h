/* wirefmt.h -- ps-train's --pull-format and --push-format values: parsing,
 * their canonical names (what a job records), applying them to a model
 * (wirefmt.c). */
#ifndef PS_TRAIN_WIREFMT_H
#define PS_TRAIN_WIREFMT_H

#include <stddef.h>

#include "redis-ps/ps.h"

/* A parsed --push-format. TOPK's k is either a fraction of every partition
 * (topk_ratio) or a count over the whole model (topk_count, turned into a
 * fraction by tr_push_apply(); libps rounds k up per partition, at least 1). */
typedef struct pushFormat {
    psWireFormat fmt;
    double topk_ratio;          /* 0 < r <= 1 with topk_count 0 */
    long long topk_count;       /* >= 1, or 0 */
} pushFormat;

/* Parses a --pull-format/--push-format name (case-insensitive) into *out;
 * 'push' (any pull too) also allows i8. Returns 0 or -1. */
int tr_parse_wire(const char *name, int push, psWireFormat *out);
/* Parses a --push-format: f32, bf16, f16, i8, or topk[:K] with K a fraction
 * (0.01, needs a '.'), a percentage (1%) or a count (1000), case-insensitive.
 * NULL is f32. Returns 0 or -1. */
int tr_parse_push(const char *name, pushFormat *out);
/* The canonical name of 'pf' (what init records), written into 'buf'. */
const char *tr_push_name(const pushFormat *pf, char *buf, size_t len);
/* 1 when 'a' and 'b' send the same bytes (same format and k). */
int tr_push_same(const pushFormat *a, const pushFormat *b);
/* Sets 'pf' as the push format of laid-out model 'm'. PS_OK or PS_ERR. */
int tr_push_apply(psModel *m, const pushFormat *pf);

#endif
