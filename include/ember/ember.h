/* ember/ember.h: the whole public API of ember, a C11 tensor core with burn's backend-dispatch and
 * quantized-tensor guard semantics. Include this header only. See README.md for a tour. */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include <ember/export.h>
#include <ember/version.h>
#include <ember/status.h>
#include <ember/dtype.h>
#include <ember/backend.h>
#include <ember/tensor.h>
#include <ember/quant.h>
#include <ember/ops.h>
#include <ember/nn.h>

#endif
