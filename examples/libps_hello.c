/* libps_hello.c -- the smallest libps program: connect, create a tensor, push
 * a gradient, pull the new values. Build against an installed tree:
 *   cc libps_hello.c $(pkg-config --cflags --libs libps)
 * Run against a redis-server that loads ps.so:  ./a.out 127.0.0.1:6379 */
#include <stdio.h>
#include <redis-ps/ps.h>

int main(int argc, char **argv) {
    psClient *c = psConnect(argc > 1 ? argv[1] : "127.0.0.1:6379", NULL);
    if (c == NULL || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "out of memory");
        return 1;
    }
    psModel *m = psModelNew("hello");                  /* keys hello:<tensor>:<p> */
    uint64_t dims[1] = {4};
    psModelAddTensor(m, "w", 1, dims);                 /* tensor 0: 4 floats */
    float w[4], g[4] = {1, 2, 3, 4};
    float *params[1] = {w};
    const float *grads[1] = {g};
    if (psModelDelete(c, m) == PS_ERR ||               /* start from scratch */
        psModelCreate(c, m, "INIT CONST 0.5 OPTIM SGD LR 0.1", 0) == PS_ERR ||
        psModelPush(c, m, grads, NULL, 1.0f) == PS_ERR || psDrain(c) == PS_ERR ||
        psModelPull(c, m, params, NULL) == PS_ERR) {
        fprintf(stderr, "libps: %s\n", c->errstr);
        return 1;
    }
    printf("w = %g %g %g %g\n", w[0], w[1], w[2], w[3]);   /* 0.5 - 0.1 * g */
    psModelFree(m);
    psClientFree(c);
    return 0;
}
