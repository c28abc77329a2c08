/* examples/mlp_digits.c: a small but real inference engine on ember.
 *
 *  1. Load the UCI handwritten digits (1797 8x8 images, 10 classes; examples/fetch_digits.sh puts
 *     them in data/digits.csv) and split them 80/20 with a fixed seed.
 *  2. Train a 64-128-64-10 MLP in F32 on ember: ember_linear forward, the linear backward family
 *     for the gradients, ReLU, softmax cross-entropy, plain SGD (ember_axpy_inplace), until the
 *     test accuracy reaches 95%.
 *  3. Quantize the weights (Q8S per-tensor, Q8S per-block 32, Q4S per-block 32 packed in u32; the
 *     blocks run along d_in, the K axis of x @ W) and serve the test set through ember_linear with
 *     quantized weights on the CPU and on every OpenCL device, both in burn's mode (float
 *     activations times quantized weights, F x Q: the result of dequantize-then-matmul) and with
 *     the activations quantized too (W8A8: each layer's input quantized to Q8S per-tensor on the
 *     fly, so q_matmul runs Q x Q, the integer kernels where the device has them). Print one
 *     table: accuracy, agreement with the float model's predictions, bytes, time per batch.
 *  4. Save the quantized weights in burn's QuantizedBytes layout, load them back and check that
 *     the predictions are identical.
 *
 * usage: mlp_digits [--data PATH] [--save PATH] [--train-on cpu|opencl:N] [--quick] [--check]
 *   --train-on  the device that trains (default cpu); serving covers every device either way
 *   --quick  a reduced schedule (CTest): train to 93% at most 60 epochs, fewer timing rounds
 *   --check  exit 1 unless float accuracy >= 90% and every quantized accuracy is within 2 points
 *            of it, the reloaded weights predict identically, and every device quantizes to the
 *            same bytes as the CPU
 * The exit status is 0 on success, 1 on a failure, 77 when the data file is missing. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ember/ember.h>

#include "blas_coretype.h" /* ember's own tools: OpenBLAS on the right core (README.md) */
#include "example_util.h"

enum { N_ALL = 1797, N_FEAT = 64, N_CLASS = 10, N_LAYERS = 3, N_SCHEMES = 3 };
static const int64_t DIMS[N_LAYERS + 1] = {N_FEAT, 128, 64, N_CLASS};

/* xorshift64*: the data split, the shuffles and the initial weights all come from one seed. */
static uint64_t rng_state = 0x5eed0f0d161757ull;
static uint64_t rng_next(void) {
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }
static void shuffle(int *idx, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rng_next() % (uint64_t)(i + 1)), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

/* ---- data ---- */

typedef struct dataset {
    int n;
    float *x;   /* [n, 64], pixels scaled to [0, 1] */
    int64_t *y; /* [n] */
} dataset;

static int load_digits(const char *path, dataset *all) {
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    all->x = xmalloc(sizeof(float) * N_ALL * N_FEAT);
    all->y = xmalloc(sizeof(int64_t) * N_ALL);
    int n = 0;
    for (; n < N_ALL; n++) {
        int v, ok = 1;
        for (int j = 0; j <= N_FEAT && ok; j++) {
            ok = fscanf(f, j ? ",%d" : "%d", &v) == 1;
            if (ok && j < N_FEAT)
                all->x[n * N_FEAT + j] = (float)v / 16.0f;
            else if (ok)
                all->y[n] = v;
        }
        if (!ok || all->y[n] < 0 || all->y[n] >= N_CLASS)
            break;
    }
    fclose(f);
    all->n = n;
    return n == N_ALL;
}

static void take(const dataset *all, const int *idx, int n, dataset *out) {
    out->n = n;
    out->x = xmalloc(sizeof(float) * (size_t)n * N_FEAT);
    out->y = xmalloc(sizeof(int64_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        memcpy(out->x + (size_t)i * N_FEAT, all->x + (size_t)idx[i] * N_FEAT,
               sizeof(float) * N_FEAT);
        out->y[i] = all->y[idx[i]];
    }
}

/* ---- the model ---- */

/* Weights W[l] are [d_in, d_out] (burn's layout: y = x @ W + b); float or quantized. */
typedef struct model {
    ember_tensor *w[N_LAYERS], *b[N_LAYERS];
    int act_quant; /* W8A8: quantize each layer's input (Q8S per-tensor, on the fly) */
} model;

static void model_free(model *m) {
    for (int l = 0; l < N_LAYERS; l++) {
        ember_tensor_free(m->w[l]);
        ember_tensor_free(m->b[l]);
        m->w[l] = m->b[l] = NULL;
    }
}

static ember_tensor *tensor_f32(ember_context *ctx, ember_device dev, int rank,
                                const int64_t *shape, const float *data) {
    ember_tensor *t;
    CHECK(ember_tensor_from_data(ctx, dev, EMBER_F32, rank, shape, data, &t));
    return t;
}

/* He-uniform weights, zero biases. */
static void model_init(ember_context *ctx, model *m) {
    for (int l = 0; l < N_LAYERS; l++) {
        const int64_t ws[2] = {DIMS[l], DIMS[l + 1]};
        const size_t n = (size_t)(DIMS[l] * DIMS[l + 1]);
        float *w = xmalloc(n * sizeof *w), *b = calloc((size_t)DIMS[l + 1], sizeof *b);
        const double lim = sqrt(6.0 / (double)DIMS[l]);
        for (size_t i = 0; i < n; i++)
            w[i] = (float)((2.0 * rng_uniform() - 1.0) * lim);
        ember_device cpu = {EMBER_BACKEND_CPU, 0};
        m->w[l] = tensor_f32(ctx, cpu, 2, ws, w);
        m->b[l] = tensor_f32(ctx, cpu, 1, &ws[1], b);
        free(w);
        free(b);
    }
}

/* logits = W3ᵀ relu(W2ᵀ relu(W1ᵀ x + b1) + b2) + b3; with acts != NULL the two hidden
 * activations are handed back for the backward pass (the caller frees them). */
static ember_tensor *forward(const model *m, const ember_tensor *x, ember_tensor *acts[2]) {
    const ember_tensor *in = x;
    ember_tensor *keep[2] = {NULL, NULL};
    for (int l = 0; l < N_LAYERS; l++) {
        ember_tensor *h;
        if (m->act_quant) {
            /* dynamic per-tensor Q8S: the operand form every integer q_matmul path takes */
            const ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
            ember_tensor *xq;
            CHECK(ember_quantize(in, &q8, &xq));
            CHECK(ember_linear(xq, m->w[l], m->b[l], &h));
            ember_tensor_free(xq);
        } else {
            CHECK(ember_linear(in, m->w[l], m->b[l], &h));
        }
        if (l == N_LAYERS - 1) {
            if (acts) {
                acts[0] = keep[0];
                acts[1] = keep[1];
            } else {
                ember_tensor_free(keep[0]);
                ember_tensor_free(keep[1]);
            }
            return h;
        }
        ember_tensor *a;
        CHECK(ember_relu(h, &a));
        ember_tensor_free(h);
        keep[l] = a;
        in = a;
    }
    return NULL; /* not reached */
}

/* One SGD step on the minibatch of rows `rows` (I64 indices into the training set, which lives
 * on the device: the batch is gathered there); the weights are updated in place. */
static void train_step(model *m, const ember_tensor *x_all, const ember_tensor *y_all,
                       const ember_tensor *rows, float lr) {
    ember_tensor *x, *y, *acts[2];
    CHECK(ember_select(x_all, 0, rows, &x));
    CHECK(ember_select(y_all, 0, rows, &y));
    ember_tensor *logits = forward(m, x, acts);

    ember_tensor *dy; /* the gradient flowing into layer l's output */
    CHECK(ember_cross_entropy_backward(logits, y, &dy));
    for (int l = N_LAYERS - 1; l >= 0; l--) {
        const ember_tensor *in = l ? acts[l - 1] : x;
        ember_tensor *dw, *db, *dx = NULL;
        CHECK(ember_linear_weight_backward(in, dy, &dw));
        CHECK(ember_linear_bias_backward(dy, &db));
        if (l > 0) {
            ember_tensor *da;
            CHECK(ember_linear_x_backward(m->w[l], dy, &da));
            CHECK(ember_relu_backward(acts[l - 1], da, &dx)); /* through the ReLU before */
            ember_tensor_free(da);
        }
        CHECK(ember_axpy_inplace(-lr, dw, m->w[l]));
        CHECK(ember_axpy_inplace(-lr, db, m->b[l]));
        ember_tensor_free(dw);
        ember_tensor_free(db);
        ember_tensor_free(dy);
        dy = dx;
    }
    ember_tensor_free(acts[0]);
    ember_tensor_free(acts[1]);
    ember_tensor_free(logits);
    ember_tensor_free(x);
    ember_tensor_free(y);
}

/* Serve a batch: the predicted classes (argmax on the device, then one read). */
static void predict(const model *m, const ember_tensor *x, int64_t *pred, float *logits_out) {
    ember_tensor *logits = forward(m, x, NULL), *idx;
    CHECK(ember_argmax(logits, 1, &idx));
    const int64_t n = ember_tensor_dim(x, 0);
    if (logits_out) {
        const ember_tensor *ts[2] = {idx, logits};
        void *dst[2] = {pred, logits_out};
        const size_t bytes[2] = {sizeof(int64_t) * (size_t)n, sizeof(float) * (size_t)n * N_CLASS};
        CHECK(ember_tensor_read_many(ts, dst, bytes, 2));
    } else {
        CHECK(ember_tensor_read(idx, pred, sizeof(int64_t) * (size_t)n));
    }
    ember_tensor_free(idx);
    ember_tensor_free(logits);
}

static double accuracy_of(const int64_t *pred, const int64_t *y, int n) {
    int ok = 0;
    for (int i = 0; i < n; i++)
        ok += pred[i] == y[i];
    return (double)ok / n;
}

static double evaluate(const model *m, const ember_tensor *x, const dataset *d) {
    int64_t *pred = xmalloc(sizeof(int64_t) * (size_t)d->n);
    predict(m, x, pred, NULL);
    double acc = accuracy_of(pred, d->y, d->n);
    free(pred);
    return acc;
}

static float mean_loss(const model *m, const ember_tensor *x, const ember_tensor *y) {
    ember_tensor *logits = forward(m, x, NULL), *loss;
    CHECK(ember_cross_entropy(logits, y, &loss));
    float v;
    CHECK(ember_tensor_read(loss, &v, sizeof v));
    ember_tensor_free(loss);
    ember_tensor_free(logits);
    return v;
}

/* ---- quantized weights: the schemes, their bytes, a file ---- */

typedef struct scheme_def {
    const char *name;
    ember_qscheme s;
} scheme_def;

static void make_schemes(scheme_def out[N_SCHEMES]) {
    /* Blocks of 32 along d_in (the K axis of x @ W, where the int8 kernels want them): a block
     * shape of [32, 1] over W [d_in, d_out]. */
    const int64_t blk[2] = {32, 1};
    out[0].name = "Q8S per-tensor";
    out[0].s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    out[1].name = "Q8S block 32";
    out[1].s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, blk);
    out[2].name = "Q4S block 32 u32";
    out[2].s = ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, blk);
}

/* burn's QuantizedBytes of a quantized tensor (malloc'd). */
static unsigned char *qbytes(const ember_tensor *q, size_t *len) {
    CHECK(ember_qtensor_to_bytes(q, NULL, 0, len));
    unsigned char *buf = xmalloc(*len);
    CHECK(ember_qtensor_to_bytes(q, buf, *len, len));
    return buf;
}

/* The file: "EMBERMLP", u32 version, u32 records; then per layer the scheme (QuantizedBytes carry
 * no scheme: burn keeps it in the record next to them), the shape, the QuantizedBytes, and the
 * f32 bias. Little-endian host order (x86-64). */
static const char FILE_MAGIC[8] = {'E', 'M', 'B', 'E', 'R', 'M', 'L', 'P'};

static void put(FILE *f, const void *p, size_t n) {
    if (fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "mlp_digits: write failed\n");
        exit(1);
    }
}
static void get(FILE *f, void *p, size_t n) {
    if (fread(p, 1, n, f) != n) {
        fprintf(stderr, "mlp_digits: the weights file is truncated\n");
        exit(1);
    }
}

static size_t save_model(const char *path, const model *m) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "mlp_digits: cannot write %s\n", path);
        exit(1);
    }
    const uint32_t version = 1, n = N_LAYERS;
    put(f, FILE_MAGIC, sizeof FILE_MAGIC);
    put(f, &version, sizeof version);
    put(f, &n, sizeof n);
    for (int l = 0; l < N_LAYERS; l++) {
        ember_qscheme s;
        CHECK(ember_tensor_qscheme(m->w[l], &s));
        int64_t shape[2] = {ember_tensor_dim(m->w[l], 0), ember_tensor_dim(m->w[l], 1)};
        size_t len;
        unsigned char *bytes = qbytes(m->w[l], &len);
        const uint64_t len64 = len;
        put(f, &s, sizeof s);
        put(f, shape, sizeof shape);
        put(f, &len64, sizeof len64);
        put(f, bytes, len);
        free(bytes);
        float bias[128];
        CHECK(ember_tensor_read(m->b[l], bias, sizeof bias));
        put(f, bias, sizeof(float) * (size_t)shape[1]);
    }
    long size = ftell(f);
    fclose(f);
    return (size_t)size;
}

static void load_model(const char *path, ember_context *ctx, ember_device dev, model *m) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "mlp_digits: cannot read %s\n", path);
        exit(1);
    }
    char magic[8];
    uint32_t version, n;
    get(f, magic, sizeof magic);
    get(f, &version, sizeof version);
    get(f, &n, sizeof n);
    if (memcmp(magic, FILE_MAGIC, sizeof magic) || version != 1 || n != N_LAYERS) {
        fprintf(stderr, "mlp_digits: %s is not a weights file of this example\n", path);
        exit(1);
    }
    for (int l = 0; l < N_LAYERS; l++) {
        ember_qscheme s;
        int64_t shape[2];
        uint64_t len;
        get(f, &s, sizeof s);
        get(f, shape, sizeof shape);
        get(f, &len, sizeof len);
        if (shape[0] != DIMS[l] || shape[1] != DIMS[l + 1] || len > (1u << 24)) {
            fprintf(stderr, "mlp_digits: layer %d of %s has a wrong shape\n", l, path);
            exit(1);
        }
        unsigned char *bytes = xmalloc((size_t)len);
        get(f, bytes, (size_t)len);
        /* the scheme and length are checked by ember against the shape */
        CHECK(ember_qtensor_from_bytes(ctx, dev, &s, 2, shape, bytes, (size_t)len, &m->w[l]));
        free(bytes);
        float bias[128];
        get(f, bias, sizeof(float) * (size_t)shape[1]);
        m->b[l] = tensor_f32(ctx, dev, 1, &shape[1], bias);
    }
    fclose(f);
}

/* ---- serving on one device ---- */

typedef struct row {
    char scheme[32], mode[8], device[96];
    double acc, agree, ms;
    size_t bytes;
    int same_bytes; /* -1: not applicable */
} row;

/* The median time of `reps` predictions of the whole batch. */
static double time_predict(const model *m, const ember_tensor *x, int64_t *pred, int reps) {
    double t[64];
    predict(m, x, pred, NULL); /* warm up: kernels built, weights packed */
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        predict(m, x, pred, NULL);
        t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return 1e3 * t[reps / 2];
}

static ember_tensor *move(const ember_tensor *t, ember_device dev) {
    ember_tensor *o;
    CHECK(ember_to_device(t, dev, &o));
    return o;
}

/* Serve the test set on dev from the trained float model `cpu_m` (on the CPU of the same
 * context): F32 first, then each quantized scheme, quantized on dev itself. ref_bytes[s][l] hold
 * the CPU's QuantizedBytes (filled when dev is the CPU, compared otherwise). */
static double agreement(const int64_t *a, const int64_t *b, int n) {
    int same = 0;
    for (int i = 0; i < n; i++)
        same += a[i] == b[i];
    return (double)same / n;
}

static int serve_on(ember_context *ctx, ember_device dev, int act_quant, const model *cpu_m,
                    const dataset *test, const int64_t *float_pred, const scheme_def *schemes,
                    unsigned char *ref[][N_LAYERS], size_t ref_len[][N_LAYERS], int reps,
                    row *rows) {
    const char *mode = act_quant ? "W8A8" : "F x Q";
    ember_device_info info;
    CHECK(ember_device_describe(ctx, dev, &info));
    char devname[96];
    snprintf(devname, sizeof devname, "%s:%d %.60s", ember_backend_name(dev.backend), dev.index,
             info.name);
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    const int is_cpu = dev.backend == EMBER_BACKEND_CPU;
    const int64_t xs[2] = {test->n, N_FEAT};
    ember_tensor *x_cpu = tensor_f32(ctx, cpu, 2, xs, test->x), *x = move(x_cpu, dev);
    ember_tensor_free(x_cpu);
    int64_t *pred = xmalloc(sizeof(int64_t) * (size_t)test->n);
    int n = 0;

    model fm = {{NULL}, {NULL}, 0};
    size_t fbytes = 0;
    for (int l = 0; l < N_LAYERS; l++) {
        fm.w[l] = move(cpu_m->w[l], dev);
        fm.b[l] = move(cpu_m->b[l], dev);
        fbytes += sizeof(float) * (size_t)(DIMS[l] * DIMS[l + 1]);
    }
    if (!act_quant) { /* the float row once per device */
        row *r = &rows[n++];
        snprintf(r->scheme, sizeof r->scheme, "F32");
        snprintf(r->mode, sizeof r->mode, "F x F");
        snprintf(r->device, sizeof r->device, "%s", devname);
        r->ms = time_predict(&fm, x, pred, reps);
        r->acc = accuracy_of(pred, test->y, test->n);
        r->agree = agreement(pred, float_pred, test->n);
        r->bytes = fbytes;
        r->same_bytes = -1;
    }
    for (int s = 0; s < N_SCHEMES; s++) {
        model qm = {{NULL}, {NULL}, act_quant};
        row *r = &rows[n++];
        r->bytes = 0;
        r->same_bytes = 1;
        for (int l = 0; l < N_LAYERS; l++) {
            CHECK(ember_quantize(fm.w[l], &schemes[s].s, &qm.w[l]));
            qm.b[l] = fm.b[l]; /* borrowed */
            size_t len;
            unsigned char *bytes = qbytes(qm.w[l], &len);
            r->bytes += len;
            if (is_cpu && !ref[s][l]) {
                ref[s][l] = bytes;
                ref_len[s][l] = len;
            } else {
                r->same_bytes &= len == ref_len[s][l] && !memcmp(bytes, ref[s][l], len);
                free(bytes);
            }
        }
        snprintf(r->scheme, sizeof r->scheme, "%s", schemes[s].name);
        snprintf(r->mode, sizeof r->mode, "%s", mode);
        snprintf(r->device, sizeof r->device, "%s", devname);
        r->ms = time_predict(&qm, x, pred, reps);
        r->acc = accuracy_of(pred, test->y, test->n);
        r->agree = agreement(pred, float_pred, test->n);
        if (is_cpu && !act_quant)
            r->same_bytes = -1; /* the reference itself */
        for (int l = 0; l < N_LAYERS; l++)
            ember_tensor_free(qm.w[l]);
    }
    model_free(&fm);
    ember_tensor_free(x);
    free(pred);
    return n;
}

/* ---- main ---- */

int main(int argc, char **argv) {
    const char *data = getenv("EMBER_DIGITS_CSV"), *save = "mlp_digits_weights.bin";
    int quick = 0, check = 0, train_cl = -1;
    if (!data)
        data = "data/digits.csv";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--save") && i + 1 < argc)
            save = argv[++i];
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--check"))
            check = 1;
        else if (!strcmp(argv[i], "--train-on") && i + 1 < argc &&
                 !strncmp(argv[i + 1], "opencl:", 7))
            train_cl = atoi(argv[++i] + 7);
        else if (!strcmp(argv[i], "--train-on") && i + 1 < argc && !strcmp(argv[i + 1], "cpu"))
            i++;
        else {
            fprintf(stderr,
                    "usage: %s [--data PATH] [--save PATH] [--train-on cpu|opencl:N] [--quick] "
                    "[--check]\n",
                    argv[0]);
            return 1;
        }
    }

    dataset all, train, test;
    if (!load_digits(data, &all)) {
        fprintf(stderr,
                "mlp_digits: cannot read 1797 digits from %s (run examples/fetch_digits.sh)\n",
                data);
        return 77;
    }
    int idx[N_ALL];
    for (int i = 0; i < N_ALL; i++)
        idx[i] = i;
    shuffle(idx, N_ALL);
    const int n_train = N_ALL * 8 / 10;
    take(&all, idx, n_train, &train);
    take(&all, idx + n_train, N_ALL - n_train, &test);
    printf("digits: %d images, %d train / %d test (seeded split)\n", all.n, train.n, test.n);

    ember_context *ctx;
    CHECK(ember_context_create(NULL, &ctx));
    ember_device_info cpu_info;
    CHECK(ember_device_describe(ctx, (ember_device){EMBER_BACKEND_CPU, 0}, &cpu_info));
    ember_tool_blas_coretype(argv, cpu_info.blas_core); /* may re-run this program once */
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};

    /* ---- train in F32 on tdev (the CPU unless --train-on opencl:N) ---- */
    const ember_device tdev = train_cl < 0 ? cpu : (ember_device){EMBER_BACKEND_OPENCL, train_cl};
    ember_device_info tinfo;
    CHECK(ember_device_describe(ctx, tdev, &tinfo));
    model m = {{NULL}, {NULL}, 0};
    model_init(ctx, &m);
    for (int l = 0; l < N_LAYERS && train_cl >= 0; l++) {
        ember_tensor *w = m.w[l], *b = m.b[l];
        CHECK(ember_to_device(w, tdev, &m.w[l]));
        CHECK(ember_to_device(b, tdev, &m.b[l]));
        ember_tensor_free(w);
        ember_tensor_free(b);
    }
    const int64_t trs[2] = {train.n, N_FEAT}, tes[2] = {test.n, N_FEAT};
    const int64_t ntr = train.n;
    ember_tensor *x_train = tensor_f32(ctx, tdev, 2, trs, train.x), *y_train;
    ember_tensor *x_test = tensor_f32(ctx, tdev, 2, tes, test.x);
    CHECK(ember_tensor_from_data(ctx, tdev, EMBER_I64, 1, &ntr, train.y, &y_train));

    const double target = quick ? 0.93 : 0.95;
    const int max_epochs = quick ? 60 : 200, batch = 32;
    const float lr = 0.05f;
    int *order = xmalloc(sizeof(int) * (size_t)train.n);
    for (int i = 0; i < train.n; i++)
        order[i] = i;
    int64_t batch_rows[32];
    double acc = 0.0, t0 = now_s();
    int epoch = 0;
    while (epoch < max_epochs && acc < target) {
        shuffle(order, train.n);
        for (int s = 0; s < train.n; s += batch) {
            int nb = train.n - s < batch ? train.n - s : batch;
            const int64_t n_rows = nb;
            for (int i = 0; i < nb; i++)
                batch_rows[i] = order[s + i];
            ember_tensor *t_rows;
            CHECK(ember_tensor_from_data(ctx, tdev, EMBER_I64, 1, &n_rows, batch_rows, &t_rows));
            train_step(&m, x_train, y_train, t_rows, lr);
            ember_tensor_free(t_rows);
        }
        epoch++;
        acc = evaluate(&m, x_test, &test);
        if (epoch == 1 || epoch % 5 == 0 || acc >= target)
            printf("epoch %3d  train loss %.4f  test accuracy %.2f%%\n", epoch,
                   (double)mean_loss(&m, x_train, y_train), 100.0 * acc);
    }
    const double train_s = now_s() - t0;
    printf("trained on %s:%d (%s) for %d epochs in %.2f s (SGD, lr %.3g, batch %d): test "
           "accuracy %.2f%%\n",
           ember_backend_name(tdev.backend), tdev.index, tinfo.name, epoch, train_s, (double)lr,
           batch, 100.0 * acc);
    const double float_acc = acc;
    free(order);
    if (train_cl >= 0) { /* the rest starts from the trained weights on the CPU */
        for (int l = 0; l < N_LAYERS; l++) {
            ember_tensor *w = m.w[l], *b = m.b[l];
            CHECK(ember_to_device(w, cpu, &m.w[l]));
            CHECK(ember_to_device(b, cpu, &m.b[l]));
            ember_tensor_free(w);
            ember_tensor_free(b);
        }
        ember_tensor *xt = x_test;
        CHECK(ember_to_device(xt, cpu, &x_test));
        ember_tensor_free(xt);
    }

    /* ---- quantize and serve on every device, in both modes ---- */
    scheme_def schemes[N_SCHEMES];
    make_schemes(schemes);
    unsigned char *ref[N_SCHEMES][N_LAYERS] = {{NULL}};
    size_t ref_len[N_SCHEMES][N_LAYERS] = {{0}};
    const int n_cl = ember_device_count(ctx, EMBER_BACKEND_OPENCL);
    const int reps = quick ? 5 : 31;
    row rows[2 * 8 * (N_SCHEMES + 1)];
    int n_rows = 0;
    int64_t *float_pred = xmalloc(sizeof(int64_t) * (size_t)test.n);
    predict(&m, x_test, float_pred, NULL);
    for (int act_quant = 0; act_quant < 2; act_quant++)
        for (int d = -1; d < n_cl && d < 7; d++) {
            ember_device dev = d < 0 ? cpu : (ember_device){EMBER_BACKEND_OPENCL, d};
            n_rows += serve_on(ctx, dev, act_quant, &m, &test, float_pred, schemes, ref, ref_len,
                               reps, rows + n_rows);
        }
    free(float_pred);

    printf("\n%-17s %-6s %-40s %9s %7s %7s %10s %9s %9s %s\n", "scheme", "mode", "device",
           "accuracy", "vs f32", "agree", "weight B", "ms/batch", "us/image", "bytes = cpu's");
    for (int i = 0; i < n_rows; i++) {
        const row *r = &rows[i];
        printf("%-17s %-6s %-40.40s %8.2f%% %+6.2f %6.1f%% %10zu %9.3f %9.2f %s\n", r->scheme,
               r->mode, r->device, 100.0 * r->acc, 100.0 * (r->acc - float_acc), 100.0 * r->agree,
               r->bytes, r->ms, 1e3 * r->ms / test.n,
               r->same_bytes < 0 ? "-"
               : r->same_bytes   ? "yes"
                                 : "NO");
    }
    printf("(batch = the %d test images; biases stay F32: %d bytes; median of %d rounds)\n", test.n,
           (int)(sizeof(float) * (128 + 64 + 10)), reps);

    /* ---- save the Q4S model in burn's QuantizedBytes, load it back, compare ---- */
    model q4 = {{NULL}, {NULL}, 0}, back = {{NULL}, {NULL}, 0};
    for (int l = 0; l < N_LAYERS; l++) {
        CHECK(ember_quantize(m.w[l], &schemes[2].s, &q4.w[l]));
        q4.b[l] = m.b[l];
    }
    size_t file_bytes = save_model(save, &q4);
    load_model(save, ctx, cpu, &back);
    int64_t *p1 = xmalloc(sizeof(int64_t) * (size_t)test.n);
    int64_t *p2 = xmalloc(sizeof(int64_t) * (size_t)test.n);
    float *l1 = xmalloc(sizeof(float) * (size_t)test.n * N_CLASS);
    float *l2 = xmalloc(sizeof(float) * (size_t)test.n * N_CLASS);
    predict(&q4, x_test, p1, l1);
    predict(&back, x_test, p2, l2);
    const int same_pred = !memcmp(p1, p2, sizeof(int64_t) * (size_t)test.n);
    const int same_logits = !memcmp(l1, l2, sizeof(float) * (size_t)test.n * N_CLASS);
    printf("\nsaved %s (%zu bytes: %s weights in burn's QuantizedBytes + F32 biases), loaded it "
           "back: predictions %s, logits %s\n",
           save, file_bytes, schemes[2].name, same_pred ? "identical" : "DIFFER",
           same_logits ? "bit-identical" : "DIFFER");
    for (int l = 0; l < N_LAYERS; l++)
        q4.b[l] = NULL;
    model_free(&q4);
    model_free(&back);
    free(p1);
    free(p2);
    free(l1);
    free(l2);

    int failed = 0;
    if (check) {
        if (float_acc < 0.90) {
            fprintf(stderr, "CHECK: float accuracy %.2f%% < 90%%\n", 100.0 * float_acc);
            failed = 1;
        }
        for (int i = 0; i < n_rows; i++) {
            if (rows[i].acc < float_acc - 0.02) {
                fprintf(stderr, "CHECK: %s %s on %s: %.2f%% is more than 2 points below float\n",
                        rows[i].scheme, rows[i].mode, rows[i].device, 100.0 * rows[i].acc);
                failed = 1;
            }
            if (rows[i].same_bytes == 0) {
                fprintf(stderr, "CHECK: %s on %s quantizes to other bytes than the CPU\n",
                        rows[i].scheme, rows[i].device);
                failed = 1;
            }
        }
        if (!same_pred || !same_logits) {
            fprintf(stderr, "CHECK: the reloaded weights predict differently\n");
            failed = 1;
        }
        printf("check: %s\n", failed ? "FAILED" : "passed");
    }

    for (int s = 0; s < N_SCHEMES; s++)
        for (int l = 0; l < N_LAYERS; l++)
            free(ref[s][l]);
    model_free(&m);
    ember_tensor_free(x_train);
    ember_tensor_free(y_train);
    ember_tensor_free(x_test);
    ember_context_destroy(ctx);
    free(all.x);
    free(all.y);
    free(train.x);
    free(train.y);
    free(test.x);
    free(test.y);
    return failed;
}
