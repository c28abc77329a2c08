/* backends/opencl/cl_sources.h (private): the OpenCL kernel sources embedded at build time.
 *
 * backends/opencl/opencl.cmake embeds every backends/opencl/kernels/<name>.cl with
 * cmake/embed_cl.cmake and generates a table of them, ember__cl_sources[], ended by a row whose
 * name is NULL. The source text is NUL-terminated; *len excludes the NUL. */
#ifndef EMBER_CL_SOURCES_H
#define EMBER_CL_SOURCES_H

#include <stddef.h>

typedef struct ember__cl_source_entry {
    const char *name;       /* the file name without ".cl", e.g. "gemm" */
    const char *const *src; /* the NUL-terminated source */
    const size_t *len;      /* its length in bytes, without the NUL */
} ember__cl_source_entry;

extern const ember__cl_source_entry ember__cl_sources[];

#endif
