/* data.h -- dataset readers of the redis-ps worker: IDX (MNIST-style, plain
 * or gzip) and numeric CSV.
 *
 * Pure core: no Redis, no sockets, no exit().  Every loader fills a
 * ps_dataset the caller owns and releases with ps_dataset_free(); on error
 * it returns -1, writes a message into 'err' and leaves the dataset zeroed
 * (owning nothing). */
#ifndef PS_DATA_H
#define PS_DATA_H

#include <stddef.h>
#include <stdint.h>

#define PS_DATA_MAX_SAMPLES (1 << 28)    /* most rows a dataset may have */
#define PS_DATA_MAX_DIM (1 << 24)        /* most features per row */
#define PS_DATA_MAX_VALUES (1ULL << 31)  /* most floats (n * dim) in one dataset */
#define PS_DATA_MAX_CLASSES (1 << 20)    /* labels must be below this */
#define PS_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

typedef struct ps_dataset {
    int n;          /* samples */
    int dim;        /* features per sample */
    int nclasses;   /* max label + 1 */
    float *x;       /* n*dim row-major, features scaled (IDX pixels /255) */
    int32_t *y;     /* n labels, each 0..nclasses-1 */
} ps_dataset;

/* Reads an IDX image file (magic 0x00000803: unsigned bytes, 3 dims
 * n x rows x cols) and an IDX label file (magic 0x00000801, n bytes), each
 * gzip-compressed or plain.  Pixels become floats in [0, 1] (byte / 255),
 * dim = rows * cols, nclasses = max label + 1.  Header sizes are checked
 * (non-zero, within the PS_DATA_MAX_* limits, equal counts) before anything
 * is allocated; short files and trailing bytes are errors.  Returns 0, or -1
 * with a message in 'err'. */
int ps_dataset_load_idx(const char *images_path, const char *labels_path, ps_dataset *ds,
                        char *err, size_t errlen);

/* Reads a numeric CSV file: one sample per line, comma-separated; column
 * 'label_col' (0-based; negative counts from the end, -1 = last column)
 * holds an integer class >= 0 (written as "3" or "3.0"), every other column
 * is a float feature.  A first line that is not all numeric is a header and
 * skipped; blank lines are skipped; "\r\n" endings are accepted.  Every row
 * must have as many columns as the first one.  Errors name the file and the
 * line number.  Returns 0, or -1 with a message in 'err'. */
int ps_dataset_load_csv(const char *path, int label_col, ps_dataset *ds, char *err, size_t errlen);

/* Loads the Fashion-MNIST train (train != 0: train-images-idx3-ubyte.gz,
 * train-labels-idx1-ubyte.gz) or test split (t10k-...) from 'dir'
 * (PS_FASHION_MNIST_DIR when NULL, where Debian's dataset-fashion-mnist
 * installs it).  Returns 0, or -1 with a message in 'err'. */
int ps_dataset_fashion_mnist(const char *dir, int train, ps_dataset *ds, char *err, size_t errlen);

/* Releases the arrays of 'ds' and zeroes it; safe on a zeroed dataset. */
void ps_dataset_free(ps_dataset *ds);

#endif
