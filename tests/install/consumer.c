/* tests/install/consumer.c: built against an installed ember (find_package and pkg-config). */
#include <ember/ember.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (strcmp(ember_version_string(), EMBER_VERSION_STRING) != 0) {
        fprintf(stderr, "header %s, library %s\n", EMBER_VERSION_STRING, ember_version_string());
        return 1;
    }
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *ctx = NULL;
    if (ember_context_create(&o, &ctx) != EMBER_OK) {
        fprintf(stderr, "context: %s\n", ember_last_error());
        return 1;
    }
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    const int64_t sa[] = {2, 3}, sb[] = {3, 2};
    const float a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 0, 0, 1, 1, 1};
    ember_tensor *ta = NULL, *tb = NULL, *tc = NULL;
    float c[4] = {0};
    int ok = ember_tensor_from_data(ctx, cpu, EMBER_F32, 2, sa, a, &ta) == EMBER_OK &&
             ember_tensor_from_data(ctx, cpu, EMBER_F32, 2, sb, b, &tb) == EMBER_OK &&
             ember_matmul(ta, tb, &tc) == EMBER_OK &&
             ember_tensor_read(tc, c, sizeof c) == EMBER_OK;
    ok = ok && c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11;
    if (!ok)
        fprintf(stderr, "matmul failed: %s\n", ember_last_error());
    else
        printf("ember %s: [[%g, %g], [%g, %g]]\n", ember_version_string(), c[0], c[1], c[2], c[3]);
    ember_tensor_free(ta);
    ember_tensor_free(tb);
    ember_tensor_free(tc);
    ember_context_destroy(ctx);
    return ok ? 0 : 1;
}
