/* examples/quickstart.c: a first tour of ember (README.md shows it). Build: part of the CMake
 * build (build/examples/quickstart); outside the tree: cc quickstart.c $(pkg-config --cflags
 * --libs ember). */
#include <stdio.h>

#include <ember/ember.h>

#include "blas_coretype.h" /* ember's own tools only: README.md, "OpenBLAS core type" */

/* Every fallible call returns an ember_status; the detail is in ember_last_error(). */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        ember_status st_ = (call);                                                                 \
        if (st_ != EMBER_OK) {                                                                     \
            fprintf(stderr, "%s failed: %s: %s\n", #call, ember_status_name(st_),                  \
                    ember_last_error());                                                           \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    (void)argc;
    int rc = 1;
    ember_context *ctx = NULL;
    ember_tensor *x = NULL, *w = NULL, *b = NULL, *y = NULL, *z = NULL;

    /* 1. A context: the CPU backend is device 0; OpenCL devices are listed when a platform
     *    exists. NULL options = defaults + environment (EMBER_NUM_THREADS, EMBER_LOG, ...). */
    CHECK(ember_context_create(NULL, &ctx));
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    ember_device_info info;
    CHECK(ember_device_describe(ctx, cpu, &info));
    ember_tool_blas_coretype(argv, info.blas_core); /* may re-run this program once */
    printf("ember %s on %s (OpenBLAS core %s, int8 path %s), %d OpenCL device(s)\n",
           ember_version_string(), info.name, info.blas_core, info.int8_matmul_path,
           ember_device_count(ctx, EMBER_BACKEND_OPENCL));

    /* 2. Tensors are created from host data (copied) on a device. Row-major, rank 1..8. */
    const int64_t xs[] = {2, 3}, ws[] = {3, 2}, bs[] = {2};
    const float xv[] = {1, 2, 3, 4, 5, 6};
    const float wv[] = {1, 0, 0, 1, 1, 1}; /* W is [d_in, d_out], burn's layout */
    const float bv[] = {0.5f, -0.5f};
    CHECK(ember_tensor_from_data(ctx, cpu, EMBER_F32, 2, xs, xv, &x));
    CHECK(ember_tensor_from_data(ctx, cpu, EMBER_F32, 2, ws, wv, &w));
    CHECK(ember_tensor_from_data(ctx, cpu, EMBER_F32, 1, bs, bv, &b));

    /* 3. Ops allocate their output: y = x @ W + b. */
    CHECK(ember_linear(x, w, b, &y));
    float yv[4];
    CHECK(ember_tensor_read(y, yv, sizeof yv));
    printf("linear: [[%g, %g], [%g, %g]]\n", yv[0], yv[1], yv[2], yv[3]);

    /* 4. Where burn panics, ember returns a code, leaves *out NULL and the inputs untouched. */
    ember_status st = ember_matmul(x, x, &z); /* [2, 3] @ [2, 3] */
    printf("matmul of mismatched shapes: %s (%s); out is %s\n", ember_status_name(st),
           ember_last_error(), z ? "set" : "NULL");
    rc = st == EMBER_ERR_SHAPE_MISMATCH && !z ? 0 : 1;

done:
    /* 5. Free tensors, then the context (freeing NULL is a no-op). */
    ember_tensor_free(x);
    ember_tensor_free(w);
    ember_tensor_free(b);
    ember_tensor_free(y);
    ember_tensor_free(z);
    ember_context_destroy(ctx);
    return rc;
}
