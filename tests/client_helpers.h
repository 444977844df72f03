/* client_helpers.h -- libps clients and a small model on the fake nodes
 * of fake_node.h, shared by test_engine*.c and test_durability.c. Test code
 * only: static inline functions (each test file uses what it needs),
 * included after <cmocka.h>, ps_internal.h and fake_node.h. */
#ifndef PS_CLIENT_HELPERS_H
#define PS_CLIENT_HELPERS_H

/* A client of fake node 'f' with options 'opt' (NULL: defaults). */
static inline psClient *connect_to(fake *f, const psOptions *opt) {
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->port);
    psClient *c = psConnect(addr, opt);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    return c;
}

/* Model "j" with tensor "w" of 4 rows x 2 floats in 4 partitions. */
static inline psModel *model4(void) {
    uint64_t dims[2] = {4, 2};
    psModel *m = psModelNew("j");
    assert_non_null(m);
    assert_int_equal(psModelSetPartitionBytes(m, 8), PS_OK);
    assert_int_equal(psModelAddTensor(m, "w", 2, dims), 0);
    return m;
}

/* Push zeros to every partition of model4() 'm' with 'versions'. */
static inline void push_zeros(psClient *c, psModel *m, const uint64_t *versions) {
    float g[8] = {0};
    const float *grads[1] = {g};
    assert_int_equal(psModelPush(c, m, grads, versions, 1.0f), PS_OK);
}

/* Free 'm' (may be NULL), then 'c', then stop 'a'. */
static inline void close_all(fake *a, psClient *c, psModel *m) {
    psModelFree(m);
    psClientFree(c);
    fake_stop(a);
}

#endif /* PS_CLIENT_HELPERS_H */
