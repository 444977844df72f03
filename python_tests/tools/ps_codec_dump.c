/* ps_codec_dump -- run the C wire codecs (common/codec.c) on stdin, for the
 * Python package's byte-for-byte cross-check (python_tests/test_pypkg_codec.py).
 *
 * Usage: ps_codec_dump encode F32|F16|BF16|I8   < float32s > blob
 *        ps_codec_dump encode TOPK k            < float32s > blob
 *        ps_codec_dump decode F32|F16|BF16|I8 n < blob     > float32s
 * Exit codes: 0 ok, 1 bad input (undecodable blob), 3 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"

/* Read all of stdin into a malloc'd buffer; '*len' gets its size. NULL on OOM. */
static unsigned char *read_all(size_t *len) {
    size_t cap = 1 << 16, n = 0, k;
    unsigned char *buf = malloc(cap);
    while (buf && (k = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += k;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (nb == NULL) { free(buf); return NULL; }
            buf = nb;
            cap *= 2;
        }
    }
    *len = n;
    return buf;
}

static int usage(void) {
    fprintf(stderr, "usage: ps_codec_dump encode FMT [k] | decode FMT n\n");
    return 3;
}

int main(int argc, char **argv) {
    ps_format f;
    size_t len, n, out_len;
    unsigned char *in, *out;
    if (argc < 3 || ps_format_parse(argv[2], strlen(argv[2]), &f) != 0) return usage();
    if ((in = read_all(&len)) == NULL) return 1;
    if (strcmp(argv[1], "encode") == 0) {
        n = len / 4;
        if (f == PS_FMT_TOPK) {
            if (argc < 4) return usage();
            uint32_t k = (uint32_t)strtoul(argv[3], NULL, 10);
            uint32_t *scratch = malloc((n ? n : 1) * sizeof(uint32_t));
            out = malloc(ps_topk_encoded_size(k < n ? k : (uint32_t)n));
            if (out == NULL || scratch == NULL) return 1;
            out_len = ps_topk_encode((const float *)(void *)in, n, k, out, scratch);
            free(scratch);
        } else {
            out_len = ps_dense_encoded_size(f, n);
            out = malloc(out_len ? out_len : 1);
            if (out == NULL) return 1;
            ps_encode(f, (const float *)(void *)in, n, out);
        }
    } else if (strcmp(argv[1], "decode") == 0 && argc >= 4) {
        n = strtoul(argv[3], NULL, 10);
        out_len = n * 4;
        out = malloc(out_len ? out_len : 1);
        if (out == NULL) return 1;
        if (ps_decode(f, in, len, n, (float *)(void *)out) != 0) return 1;
    } else {
        return usage();
    }
    fwrite(out, 1, out_len, stdout);
    free(in);
    free(out);
    return 0;
}
