/* model.h -- private structures of libps models (model.c: definition,
 * layout, create/delete; model_io.c: pulls and pushes, a partition per
 * key of the batch layer). Not installed. */
#ifndef PS_MODEL_H
#define PS_MODEL_H

#include "batch.h"
#include "codec.h"
#include "shape.h"

typedef struct psModel psModel;

/* One partition: a key holding rows [first_row, first_row + nrows). */
typedef struct psPart {
    psKey k;                    /* its key, versions and seqs (batch.h) */
    uint64_t first_row, nrows;
    size_t offset, elements;    /* in the tensor's flat array */
    psPull pull;                /* its pull (batch.h) */
} psPart;

typedef struct psTensor {
    char *name;
    int ndim;
    uint64_t dims[PS_MAX_DIMS];
    size_t elements, row_elems;
    int nparts;
    int first_part;             /* global partition index of part 0 */
    psPart *parts;
    float *resid;               /* error feedback (lossy push formats) */
} psTensor;

struct psModel {
    char *job;
    int ntensors, tcap;
    psTensor *tensors;
    size_t partition_bytes;     /* 0 = the client's */
    int laid_out;
    ps_format push_fmt;
    ps_format pull_fmt;         /* F32 (default), F16 or BF16 */
    double topk_ratio;
    size_t max_part_elems;
    uint32_t *topk_scratch;     /* TOPK selection scratch (max_part_elems) */
    float **pull_dstv;          /* the destinations of the pull in flight (NULL: a tensor
                                   not pulled) */
    psUser user;                /* its requests on a client (batch.h): pushes in the
                                   client's shared window */
};

#endif /* PS_MODEL_H */
