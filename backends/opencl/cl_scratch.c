/* backends/opencl/cl_scratch.c: per-device buffers that q_matmul's temporaries live in across
 * calls (the declarations in cl_backend.h say how they are shared safely).
 *
 * Why: a q_matmul used to create and release its temporaries on every call (batch offset tables,
 * the epilogue factor, A in the kernels' layout, the split-K workspace and counters, a 1.0f
 * stand-in), and three of them were filled with blocking writes, each of which waited for every
 * command queued before it: every call synchronised the host with the device. Now a batch of one
 * uses a constant zero offset table, the constants are made once, and the temporaries are slots
 * that only grow. */
#include "cl_backend.h"

ember_status ember__cl_scratch(ember__cl_state *s, int dev, int slot, size_t bytes, cl_mem *out) {
    ember__cl_device *d = &s->dev[dev];
    if (bytes == 0)
        bytes = 1;
    if (d->scratch[slot] && d->scratch_bytes[slot] >= bytes) {
        *out = d->scratch[slot];
        return EMBER_OK;
    }
    /* grow by at least 1/4, so that a series of slowly growing calls does not reallocate each time;
     * the old buffer lives on in the runtime until the commands that use it are done */
    size_t want = bytes;
    if (d->scratch[slot] && want < d->scratch_bytes[slot] + d->scratch_bytes[slot] / 4)
        want = d->scratch_bytes[slot] + d->scratch_bytes[slot] / 4;
    cl_mem m = NULL;
    EMBER_TRY(ember__cl_temp(s, dev, "q_matmul", want, NULL, &m));
    if (slot == EMBER__CL_S_CNT) {
        const cl_int zero = 0;
        cl_int err =
            clEnqueueFillBuffer(d->queue, m, &zero, sizeof zero, 0, want / 4 * 4, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            clReleaseMemObject(m);
            return ember__cl_fail("q_matmul", "clEnqueueFillBuffer", dev, err);
        }
    }
    if (d->scratch[slot])
        clReleaseMemObject(d->scratch[slot]);
    d->scratch[slot] = m;
    d->scratch_bytes[slot] = want;
    *out = m;
    return EMBER_OK;
}

ember_status ember__cl_consts(ember__cl_state *s, int dev, cl_mem *zero_off, cl_mem *one) {
    ember__cl_device *d = &s->dev[dev];
    if (!d->consts[0]) {
        const cl_long zero = 0;
        const cl_float f1 = 1.0f;
        cl_mem z = NULL, o = NULL;
        EMBER_TRY(ember__cl_temp(s, dev, "q_matmul", sizeof zero, &zero, &z));
        ember_status st = ember__cl_temp(s, dev, "q_matmul", sizeof f1, &f1, &o);
        if (st != EMBER_OK) {
            clReleaseMemObject(z);
            return st;
        }
        d->consts[0] = z;
        d->consts[1] = o;
    }
    if (zero_off)
        *zero_off = d->consts[0];
    if (one)
        *one = d->consts[1];
    return EMBER_OK;
}

void ember__cl_scratch_release(ember__cl_device *d) {
    for (int i = 0; i < EMBER__CL_SCRATCH_SLOTS; i++) {
        if (d->scratch[i])
            clReleaseMemObject(d->scratch[i]);
        d->scratch[i] = NULL;
        d->scratch_bytes[i] = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (d->consts[i])
            clReleaseMemObject(d->consts[i]);
        d->consts[i] = NULL;
    }
}
