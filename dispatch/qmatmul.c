/* dispatch/qmatmul.c: TEMPORARY stand-in so that the foundation links. The quantized-matmul issue
 * replaces this whole file with the real ember_q_matmul / ember_check_q_matmul. */
#include "internal.h"

ember_status ember_check_q_matmul(const ember_tensor *a, const ember_tensor *b) {
    (void)a;
    (void)b;
    EMBER_FAIL(EMBER_ERR_QUANT_UNSUPPORTED, "q_matmul: not implemented yet");
}

ember_status ember_q_matmul(const ember_tensor *a, const ember_tensor *b, ember_tensor **out) {
    (void)a;
    (void)b;
    if (out)
        *out = NULL;
    EMBER_FAIL(EMBER_ERR_QUANT_UNSUPPORTED, "q_matmul: not implemented yet");
}
