/* sparse_data.h -- sparse training data of the redis-ps worker: libsvm text
 * and Criteo TSV, plain or gzip, streamed in batches from a byte range.
 *
 * A sample is a label (0 or 1) and a list of features (field, id, value):
 * 'id' is a uint64 feature id (an embedding-table row), 'field' the group it
 * belongs to (an embedding + MLP model pools each field into one slot of its
 * input), 'value' the feature's weight. Ids hashed by this file carry their
 * field in the top PS_SPARSE_FIELD_BITS bits (ps_sparse_id), so ids of
 * different fields never collide and the field can be recovered from the id.
 *
 * Readers stream: a reader holds one line at a time plus a read buffer, and
 * fills a caller-owned ps_sparse_batch of at most 'max_rows' rows per call.
 * A reader covers a byte range [start, end) of the (uncompressed) file the
 * way Hadoop input splits do: a range that starts mid-line skips to the next
 * line, and a line that starts inside the range is read whole even when it
 * crosses 'end'. So ranges that tile a file read every line exactly once and
 * a training task can be a file shard. Seeking into a gzip file decompresses
 * up to 'start' (zlib's gzseek); plain files seek directly.
 *
 * Pure core: no Redis, no sockets, no exit(). Errors are -1 with a message
 * naming file:line and the bad token. */
#ifndef PS_SPARSE_DATA_H
#define PS_SPARSE_DATA_H

#include <stddef.h>
#include <stdint.h>

enum { PS_SPARSE_LIBSVM = 0, PS_SPARSE_CRITEO = 1 };

#define PS_SPARSE_FIELD_BITS 8            /* field tag in the top bits of hashed ids */
#define PS_SPARSE_MAX_FIELDS (1 << PS_SPARSE_FIELD_BITS)
#define PS_SPARSE_MAX_LINE (1 << 24)      /* longest line a reader accepts (bytes) */
#define PS_CRITEO_INTS 13                 /* Criteo columns: label, I1..I13, C1..C26 */
#define PS_CRITEO_CATS 26
#define PS_CRITEO_FIELDS (PS_CRITEO_INTS + PS_CRITEO_CATS)

/* A batch of rows in compressed-sparse-row form. Start from {0}; the arrays
 * grow as rows are added and are kept by ps_sparse_batch_clear(). */
typedef struct ps_sparse_batch {
    int n;           /* rows */
    size_t nnz;      /* features over all rows */
    int ndense;      /* dense features per row (0 unless set before adding) */
    float *label;    /* n labels, 0 or 1 */
    size_t *off;     /* n + 1 offsets: row i has features off[i] .. off[i+1]-1 */
    uint32_t *field; /* nnz fields */
    uint64_t *id;    /* nnz ids */
    float *val;      /* nnz values */
    float *dense;    /* n * ndense dense features, row-major */
    size_t cap_rows, cap_nnz;
} ps_sparse_batch;

/* Formats a message into 'err' (when non-NULL and errlen > 0): the error
 * helper of the sparse worker files (sparse_data, ctr_model, ctr_gen,
 * sparse_table). */
void ps_sparse_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Empties 'b' (keeps its memory and ndense). */
void ps_sparse_batch_clear(ps_sparse_batch *b);

/* Appends a row: 'label' (0 or 1), 'k' features (fields may be NULL: all
 * field 0; vals may be NULL: all 1) and b->ndense floats from 'dense'
 * (ignored when ndense is 0). Returns 0, or -1 when out of memory. */
int ps_sparse_batch_add(ps_sparse_batch *b, float label, const uint32_t *fields,
                        const uint64_t *ids, const float *vals, size_t k, const float *dense);

/* Frees the arrays and zeroes 'b'. */
void ps_sparse_batch_free(ps_sparse_batch *b);

/* The id of token 'tok' ('len' bytes) in field 'field' (< PS_SPARSE_MAX_FIELDS):
 * the field in the top PS_SPARSE_FIELD_BITS bits, a 56-bit hash of (field,
 * token) below. Stable across machines and releases (data files and
 * trained tables depend on it). */
uint64_t ps_sparse_id(uint32_t field, const void *tok, size_t len);

/* The same for a numeric token (hashes the 8 little-endian bytes of 'v'). */
uint64_t ps_sparse_id_u64(uint32_t field, uint64_t v);

/* The field tag of an id made by ps_sparse_id*. */
static inline uint32_t ps_sparse_field_of(uint64_t id)
{
    return (uint32_t)(id >> (64 - PS_SPARSE_FIELD_BITS));
}

/* Criteo's integer preprocessing: the bucket of integer feature value 'v'
 * ('missing' nonzero: the column was empty): 0 missing, 1 negative, 2 zero,
 * 3 + floor(log2(v)) for v >= 1. */
unsigned ps_criteo_bucket(long long v, int missing);

typedef struct ps_sparse_opts {
    int format;         /* PS_SPARSE_LIBSVM or PS_SPARSE_CRITEO */
    /* libsvm: 0 puts every feature in field 0; 1..16 takes the field from
     * the top field_bits bits of the id (PS_SPARSE_FIELD_BITS for files
     * written by `ps-train gen-ctr`). */
    int field_bits;
    /* Criteo: also give the 13 integers as dense features log(1 + max(v, 0))
     * (missing = 0), batch->ndense = 13. They always appear as bucket ids. */
    int criteo_dense;
    uint64_t start, end; /* byte range of the uncompressed file; end 0 = to EOF */
    /* 0, or the size (uncompressed) the file must have, e.g. what a job
     * recorded at init: a plain file of another size is refused at open,
     * and any file that ends before it (shrunk, replaced) fails the read
     * that reaches its end instead of training fewer lines in silence. */
    uint64_t expect_bytes;
} ps_sparse_opts;

typedef struct ps_sparse_reader ps_sparse_reader;

/* Opens 'path' (plain or gzip, detected by zlib) for reading the range of
 * 'o' (NULL: libsvm, whole file). Returns a reader the caller closes with
 * ps_sparse_close(), or NULL with a message in 'err'. */
ps_sparse_reader *ps_sparse_open(const char *path, const ps_sparse_opts *o, char *err,
                                 size_t errlen);

/* Clears 'b' and reads up to 'max_rows' (>= 1) samples into it; blank lines
 * are skipped. Returns the rows read (0 at the end of the range), or -1 with
 * a message "path:line: ..." in 'err' (a bad token, a line too long, a read
 * error, a gzip stream cut short, a file shorter than o->expect_bytes);
 * after -1 the reader only returns -1. */
int ps_sparse_read(ps_sparse_reader *r, ps_sparse_batch *b, int max_rows, char *err,
                   size_t errlen);

/* Byte offset (uncompressed) where the next line starts. */
uint64_t ps_sparse_tell(const ps_sparse_reader *r);

void ps_sparse_close(ps_sparse_reader *r);

/* A reader of lines held in memory (a stream's entries): no file, 'name'
 * in its messages ("name:N: ..."). Close with ps_sparse_close(). NULL when
 * out of memory. */
ps_sparse_reader *ps_sparse_lines(const ps_sparse_opts *o, const char *name);

/* Parses one line (libsvm or Criteo, 'len' bytes, no newline; a trailing
 * '\r' is dropped) with r's options and appends it to 'b' (not cleared).
 * Returns 0, or -1 with a message in 'err' (a bad token, a blank line, an
 * embedded newline or NUL): 'b' is then unchanged and 'r' stays usable. */
int ps_sparse_add_line(ps_sparse_reader *r, ps_sparse_batch *b, const char *line, size_t len,
                       char *err, size_t errlen);

#endif
