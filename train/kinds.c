/* kinds.c -- the model kinds of ps-train jobs and their trainers (kind.h). */

#include <stddef.h>

#include "conn.h"
#include "dense.h"
#include "kind.h"
#include "sparse.h"

/* One row per kind, the first whose wants()/is_kind() accepts wins (the
 * dense MLP last: it is what a job without --model is). */
static const struct {
    const modelKind *kind;
    const trainer *trainer;
} Kinds[] = {
    {&SparseKind, &SparseTrainer},
    {&DenseKind, &DenseTrainer},
};
#define NKINDS (sizeof(Kinds) / sizeof(Kinds[0]))

const modelKind *tr_kind_for(const trainOpts *o) {
    for (size_t i = 0; i + 1 < NKINDS; i++)
        if (Kinds[i].kind->wants(o)) return Kinds[i].kind;
    return Kinds[NKINDS - 1].kind;
}

const modelKind *tr_kind_of(const jobConfig *cfg) {
    for (size_t i = 0; i + 1 < NKINDS; i++)
        if (Kinds[i].kind->is_kind(cfg)) return Kinds[i].kind;
    return Kinds[NKINDS - 1].kind;
}

const trainer *tr_trainer_of(const jobConfig *cfg) {
    const modelKind *k = tr_kind_of(cfg);
    for (size_t i = 0; i < NKINDS; i++)
        if (Kinds[i].kind == k) return Kinds[i].trainer;
    return NULL;
}

int tr_job_kind(const trainOpts *o, const modelKind **k) {
    jobConfig cfg;
    psClient *c = tr_connect(o, 0, 0);
    if (c == NULL) return -1;
    int rc = tr_load_config(c, o->job, &cfg);
    psClientFree(c);
    if (rc < 0) return -1;
    *k = rc == 1 ? &DenseKind : tr_kind_of(&cfg);
    return 0;
}
