/* backends/opencl/cl_qmatmul_mma.h (private): the NVIDIA tensor-core paths (ember__cl_qpath_wgmma,
 * ember__cl_qpath_mma) of cl_qmatmul.c. cl_qmatmul_mma.c documents detection and one call. */
#ifndef EMBER_CL_QMATMUL_MMA_H
#define EMBER_CL_QMATMUL_MMA_H

#include "cl_backend.h"

/* An NVIDIA GPU of compute capability >= 8.0 (mma.sync m16n8k32 s8) / exactly 9.0 (sm_90a wgmma).
 */
int ember__cl_has_mma(const ember__cl_device *d);
int ember__cl_has_wgmma(const ember__cl_device *d);
/* ember__cl_qpath.run for "mma" / "wgmma" (shapes past 2^30 go to the generic path). */
ember_status ember__cl_run_mma(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q);
ember_status ember__cl_run_wgmma(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q);

#endif
