/* ember/nn.h: the small set of neural-network ops an inference or training engine needs next to
 * ember_linear: ReLU and its backward, softmax, cross-entropy loss and its gradient, an axpy update
 * (SGD: w += -lr * g), argmax and select (gathering a minibatch on the device).
 *
 * Every op here is checked by the dispatcher as the ops of ember/ops.h are: live handles (MISUSE),
 * one backend (BACKEND_MISMATCH) and one device (DEVICE_MISMATCH), shapes (SHAPE_MISMATCH, both
 * shapes in the detail) and dtypes (DTYPE_MISMATCH: float operands are F32; a quantized operand is
 * refused, dequantize it first). On failure *out is NULL and no input is modified.
 *
 * Autodiff: a forward op's float output carries the merged autodiff context of its float inputs
 * (burn's merge: Disabled + Enabled(s) gives Enabled(s), two different strategies give
 * CHECKPOINT_MISMATCH). A backward op refuses a tracked input (NOT_DIFFERENTIABLE, "Can't
 * differentiate <op>.", burn's second-order sentinel) and returns an untracked gradient.
 *
 * Devices: every op runs on every backend. The CPU and OpenCL backends have native kernels for
 * all of them; on OpenCL relu, relu_backward, axpy, argmax and select give the CPU's bits, softmax
 * and cross-entropy agree with it within a few f32 ulps (another exp, another summation order;
 * double accumulation where the device has fp64). A backend without a native kernel for an op gets
 * the host fallback: the dispatcher downloads the operands, computes on the host and uploads the
 * result, with the very numbers of the CPU backend. */
#ifndef EMBER_NN_H
#define EMBER_NN_H

#include <ember/export.h>
#include <ember/status.h>
#include <ember/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = max(x, 0) elementwise; -0.0 and NaN are kept as they are (burn's relu is mask_fill(x <= 0,
 * 0): NaN compares false and passes through). x is F32 of any shape.
 * @return EMBER_OK and *out (F32, x's shape); DTYPE_MISMATCH for a non-F32 x. */
EMBER_API ember_status ember_relu(const ember_tensor *x, ember_tensor **out);

/* burn's relu_backward(output, grad): dx = dy where y > 0, else 0. y is the output of ember_relu
 * (or its input: the mask is the same), dy the gradient of the loss with respect to y; both F32
 * of one shape. NOT_DIFFERENTIABLE ("Can't differentiate relu_backward.") when y or dy is
 * tracked. */
EMBER_API ember_status ember_relu_backward(const ember_tensor *y, const ember_tensor *dy,
                                           ember_tensor **dx);

/* Softmax over the last axis, computed stably (the row maximum is subtracted first, sums in
 * double). x is F32 of rank >= 1; *out has x's shape, every row sums to 1 (up to rounding). A
 * row of -Inf gives NaN, as in burn. */
EMBER_API ember_status ember_softmax(const ember_tensor *x, ember_tensor **out);

/* Mean cross-entropy of logits against class indices, as burn's CrossEntropyLoss (no
 * smoothing, no weights, no padding index): loss = mean over rows r of
 * logsumexp(logits[r, :]) - logits[r, targets[r]].
 * logits: F32 [..., C] with rank >= 2 and C >= 1; targets: I64 or I32 with logits' shape
 * without its last axis, every value in [0, C) (INVALID_ARGUMENT names the first one outside,
 * with its position); a zero-row batch is INVALID_ARGUMENT (the mean of nothing).
 * @return EMBER_OK and *loss, an F32 tensor of shape [1] on logits' device. */
EMBER_API ember_status ember_cross_entropy(const ember_tensor *logits, const ember_tensor *targets,
                                           ember_tensor **loss);

/* The gradient of ember_cross_entropy's mean loss with respect to the logits:
 * dlogits[r, c] = (softmax(logits[r, :])[c] - [c == targets[r]]) / rows. The same operand rules;
 * NOT_DIFFERENTIABLE ("Can't differentiate cross_entropy_backward.") for tracked logits.
 * @return EMBER_OK and *dlogits (F32, logits' shape, untracked). */
EMBER_API ember_status ember_cross_entropy_backward(const ember_tensor *logits,
                                                    const ember_tensor *targets,
                                                    ember_tensor **dlogits);

/* out = alpha * x + y elementwise (BLAS axpy, out of place). x and y are F32 of one shape (no
 * broadcasting: SHAPE_MISMATCH). An SGD step is ember_axpy(-lr, grad, w, &w_next). */
EMBER_API ember_status ember_axpy(float alpha, const ember_tensor *x, const ember_tensor *y,
                                  ember_tensor **out);

/* y += alpha * x, in place: the one op in ember that writes into a tensor it is given, so that an
 * optimizer step needs no allocation. The same operand rules as ember_axpy (x may be y). y keeps
 * its own autodiff context; the contexts must still merge (CHECKPOINT_MISMATCH). On failure y is
 * unchanged. Any copy of y a backend cached in its kernel layout is dropped. Not thread-safe
 * with other ops reading y at the same time (the only exception to ember's rule that inputs are
 * never mutated). */
EMBER_API ember_status ember_axpy_inplace(float alpha, const ember_tensor *x, ember_tensor *y);

/* The index of the largest value along `axis` (0 <= axis < rank), as burn's argmax(dim): the
 * output is I64 with x's shape except that axis, which becomes 1 (burn keeps the dim). Ties go
 * to the first index; a NaN counts as larger than any number (the first NaN wins).
 * x is F32; INVALID_ARGUMENT for a bad axis or an empty one (no index to return).
 * @return EMBER_OK and *out, on x's device (DTYPE_TRANSFER if that device cannot hold I64). */
EMBER_API ember_status ember_argmax(const ember_tensor *x, int axis, ember_tensor **out);

/* burn's select(dim, indices): the slices of x at `indices` along `axis`, in that order (repeats
 * allowed) — e.g. the rows of a minibatch gathered on the device from a dataset uploaded once.
 * x is any plain dtype (a QFloat x is DTYPE_MISMATCH: dequantize it first); indices are I64 or
 * I32 of rank 1 on x's device, each in [0, x.shape[axis]) (INVALID_ARGUMENT names the first one
 * outside, as burn panics on an out-of-bounds index).
 * @return EMBER_OK and *out: x's dtype, x's shape with that axis replaced by the number of
 *         indices; a float output carries x's autodiff context. */
EMBER_API ember_status ember_select(const ember_tensor *x, int axis, const ember_tensor *indices,
                                    ember_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
