/* ember/ember.h: the whole public API of ember, a C11 tensor core with burn's backend-dispatch and
 * quantized-tensor guard semantics. Include this header only. See README.md for a tour. */
/* Thread safety (tested by tests/test_threads.c, also under ThreadSanitizer: `make tsan`):
 * - A context may be shared by any number of threads; every call taking it may run concurrently.
 *   Creating and destroying contexts is thread-safe; destroy one only when no other thread uses
 *   it or any of its tensors.
 * - Tensors given as inputs are only read: several threads may pass the same tensor to ops at once
 *   (a quantized weight's pre-packed kernel layout is built once, under the tensor's own lock).
 * - A tensor that a call writes (ember_tensor_set_autodiff, ember_axpy_inplace's y, and
 *   ember_tensor_free) must not be used by another thread during that call.
 * - ember_last_error() and its status/location are per thread: a failure on one thread never
 *   changes what another thread reads.
 * - Nothing in ember keeps global mutable state besides the allocator's counters and the EMBER_LOG
 *   level stored at each context creation, both atomic. */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include <ember/backend.h>
#include <ember/dtype.h>
#include <ember/export.h>
#include <ember/nn.h>
#include <ember/ops.h>
#include <ember/quant.h>
#include <ember/status.h>
#include <ember/tensor.h>
#include <ember/version.h>

#endif
