/* dispatch/registry.c: the backends built into this library. A backend not built in is absent
 * (NULL): its devices count 0 and naming one gives EMBER_ERR_BACKEND_UNAVAILABLE. */
#include "internal.h"

extern const ember_backend_ops ember__cpu_ops;
#ifdef EMBER_WITH_OPENCL
extern const ember_backend_ops ember__opencl_ops;
#endif

const ember_backend_ops *ember__backend_ops(ember_backend b) {
    switch (b) {
    case EMBER_BACKEND_CPU:
        return &ember__cpu_ops;
    case EMBER_BACKEND_OPENCL:
#ifdef EMBER_WITH_OPENCL
        return &ember__opencl_ops;
#else
        return NULL;
#endif
    default:
        return NULL;
    }
}
