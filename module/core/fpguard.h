/* fpguard.h (module) -- run-time determinism checks done at OnLoad.
 *
 * Replicas stay bit-identical only if every process rounds floats the IEEE
 * default way. Another module loaded into the same server (or a library it
 * pulls in, e.g. one built with -ffast-math, whose crtfastmath.o sets the
 * flush-to-zero bits at load) can change the FPU mode for the whole
 * process; a build with clang -ffp-contract=fast ignores fpguard.h's pragma.
 * Pure core: no Redis calls; the module logs and refuses to load. */

#ifndef PS_MODULE_FPGUARD_H
#define PS_MODULE_FPGUARD_H

/* Returns NULL when the FPU mode is the IEEE default (round to nearest
 * even; on x86 also MXCSR flush-to-zero and denormals-are-zero clear),
 * otherwise a static phrase saying what differs. On other architectures
 * only the rounding mode is checked (their flush-to-zero bits are not
 * portable to read). */
const char *ps_fpu_mode_check(void);

/* Returns NULL when the optimizer kernels round a*b+c in two steps (no
 * fused multiply-add), otherwise a static phrase. Runs the real SGD kernel
 * on inputs whose fused and unfused results differ, through both its
 * vector body and its scalar tail. */
const char *ps_fp_contract_check(void);

#endif /* PS_MODULE_FPGUARD_H */
