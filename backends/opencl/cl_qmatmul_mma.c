/* backends/opencl/cl_qmatmul_mma.c: the NVIDIA tensor-core paths of q_matmul ("mma", "wgmma").
 *
 * Detection: an NVIDIA GPU whose cl_nv_device_attribute_query compute capability is >= 8.0 gets
 * "mma" (kernels/qgemm_mma.cl: OpenCL C with inline PTX mma.sync m16n8k32 s8, built by the
 * driver for any sm_80+ chip); exactly 9.0 gets "wgmma" (ptx/qgemm_wgmma_sm90a.ptx, a PTX module
 * for sm_90a loaded with clCreateProgramWithBinary: sm_90a code runs on 9.0 only).
 *
 * One call, per batch entry i: qgemm_prep_a copies A_i (any offset, stride or transposition) into
 * a 16-byte-aligned [m][round16(k)] temporary; qgemm_pack_b_mma / qgemm_pack_b_wgmma packs B_i into
 * the kernel's tile order (cl_pack_mma.h documents both layouts; the same layout the host packers
 * write); the GEMM kernel then writes out_i = 0 + f * (float)acc directly (mode 2; f = scale[0]
 * per-tensor, or sa[r / a_group] * sb[c / b_group] per row / column: the CPU backend's epilogue). M
 * <= 16 runs the skinny mma kernel on both paths (the weight-streaming case). Shapes past 2^30 in
 * any dimension go to the generic path. Weight pre-packing: when every B block of the call starts
 * at a whole matrix of the rhs tensor (the usual weight use), the first call packs ALL the tensor's
 * matrices in the kernel's layout and keeps them in the tensor's pack cache (one cl_mem per matrix,
 * freed with the tensor); later calls with the same layout (mma, wgmma 64x128 or 64x256 tiles;
 * trans_b) skip the pack. A call needing another layout than the cached one packs into a temporary,
 * as every call did before. The cached copy costs the packed size again in device memory (K and N
 * rounded up to the tiles). */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cl_backend.h"
#include "cl_pack_mma.h"
#include "cl_qmatmul_mma.h"
#include "cl_sources.h"

#define EMBER_CL_CC_MAJOR_NV 0x4000 /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV */
#define EMBER_CL_CC_MINOR_NV 0x4001 /* CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV */

/* 10 * major + minor for an NVIDIA GPU, else 0. */
static int nv_cc(const ember__cl_device *d) {
    if (!(d->type & CL_DEVICE_TYPE_GPU))
        return 0;
    if (!strstr(d->vendor, "NVIDIA") && !strstr(d->platform_name, "NVIDIA"))
        return 0;
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(d->id, EMBER_CL_CC_MAJOR_NV, sizeof major, &major, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(d->id, EMBER_CL_CC_MINOR_NV, sizeof minor, &minor, NULL) != CL_SUCCESS)
        return 0;
    return (int)(major * 10u + minor);
}

int ember__cl_has_mma(const ember__cl_device *d) { return nv_cc(d) >= 80; }

int ember__cl_has_wgmma(const ember__cl_device *d) { return nv_cc(d) == 90; }

/* The PTX module, built once per device and kept in the device's program list (released with
 * the others at shutdown). The options string "<ptx>" marks the entry. */
/* ptx_program's builder: the embedded PTX text (arg, with its NUL) given to the driver as a binary.
 */
static ember_status build_ptx(ember__cl_state *s, int dev, void *arg, cl_program *out) {
    ember__cl_device *d = &s->dev[dev];
    const char *src = arg;
    cl_int err = CL_SUCCESS, bin_status = CL_SUCCESS;
    size_t n = strlen(src) + 1;
    const unsigned char *bin = (const unsigned char *)src;
    cl_program prog = clCreateProgramWithBinary(d->ctx, 1, &d->id, &n, &bin, &bin_status, &err);
    if (prog && err == CL_SUCCESS)
        err = clBuildProgram(prog, 1, &d->id, "", NULL, NULL);
    if (!prog || err != CL_SUCCESS) {
        if (prog)
            clReleaseProgram(prog);
        EMBER_FAIL(EMBER_ERR_KERNEL_BUILD,
                   "q_matmul: the sm_90a PTX module did not build on opencl:%d: %s (%d)", dev,
                   ember__cl_error_name(err), (int)err);
    }
    *out = prog;
    return EMBER_OK;
}

static ember_status ptx_program(ember__cl_state *s, int dev, cl_program *out) {
    const char *src = NULL;
    for (const ember__cl_source_entry *e = ember__cl_sources; e->name; e++)
        if (strcmp(e->name, "qgemm_wgmma_sm90a") == 0)
            src = *e->src;
    /* KERNEL_BUILD: the backend then demotes this device to the generic path */
    EMBER_FAIL_IF(!src, EMBER_ERR_KERNEL_BUILD, "q_matmul: the wgmma PTX module is not embedded");
    return ember__cl_program_cached(s, dev, src, "<ptx>", build_ptx, (void *)(uintptr_t)src, out);
}

#define CLPACK_KIND 0x434c5042 /* "CLPB": data is a clpack */

/* The packed matrices of one rhs tensor: layout = 0 mma fragment order, else the wgmma tile
 * width (128 or 256); buf[j] = matrix j of the tensor (pbytes each). */
typedef struct clpack {
    int layout, trans;
    int64_t k, n, nmat;
    size_t pbytes;
    cl_mem buf[];
} clpack;

static void clpack_release(void *state, void *data) {
    (void)state;
    clpack *c = data;
    for (int64_t j = 0; j < c->nmat; j++)
        if (c->buf[j])
            clReleaseMemObject(c->buf[j]);
    ember__free(c);
}

/* Pack matrix at byte offsets boff[idx] of q->b into dst (layout as in clpack). */
static ember_status pack_b(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q, cl_mem boff,
                           cl_int idx, int layout, size_t pbytes, cl_mem dst) {
    cl_int tb = q->trans_b, K = (cl_int)q->k, N = (cl_int)q->n, bn = layout;
    cl_long ldb = q->ldb, pb = (cl_long)pbytes;
    const size_t local = 256, global = ember__cl_round_up(pbytes, 256);
    if (layout) {
        const ember__cl_arg args[] = {EMBER_CL_ARG(q->b), EMBER_CL_ARG(boff), EMBER_CL_ARG(idx),
                                      EMBER_CL_ARG(ldb),  EMBER_CL_ARG(tb),   EMBER_CL_ARG(K),
                                      EMBER_CL_ARG(N),    EMBER_CL_ARG(bn),   EMBER_CL_ARG(dst),
                                      EMBER_CL_ARG(pb)};
        return ember__cl_launch(s, dev, "q_matmul", "qgemm_mma", "", "qgemm_pack_b_wgmma", 10, args,
                                1, &global, &local);
    }
    const ember__cl_arg args[] = {EMBER_CL_ARG(q->b), EMBER_CL_ARG(boff), EMBER_CL_ARG(idx),
                                  EMBER_CL_ARG(ldb),  EMBER_CL_ARG(tb),   EMBER_CL_ARG(K),
                                  EMBER_CL_ARG(N),    EMBER_CL_ARG(dst),  EMBER_CL_ARG(pb)};
    return ember__cl_launch(s, dev, "q_matmul", "qgemm_mma", "", "qgemm_pack_b_mma", 9, args, 1,
                            &global, &local);
}

/* The rhs tensor's packed matrices in `layout`, from its pack cache (filled here on first use), or
 * *out = NULL when the call's B blocks are not whole matrices of the tensor or the cache holds
 * another layout (the caller then packs per call). */
static ember_status cached_b(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q, int layout,
                             size_t pbytes, clpack **out) {
    *out = NULL;
    const ember_tensor *b = q->b_tensor;
    if (!b || !q->b_off_elems || b->rank < 2)
        return EMBER_OK;
    const int64_t rows = b->shape[b->rank - 2], cols = b->shape[b->rank - 1], mat = rows * cols;
    if (mat <= 0 || mat != q->k * q->n)
        return EMBER_OK;
    const int64_t nmat = (int64_t)b->numel / mat;
    for (int64_t i = 0; i < q->batch; i++)
        if (q->b_off_elems[i] % mat != 0 || q->b_off_elems[i] / mat >= nmat)
            return EMBER_OK;
    ember_tensor *bt = (ember_tensor *)b; /* the cache is mutable state of a const handle */
    pthread_mutex_lock(&bt->pack.lock);
    clpack *c = bt->pack.kind == CLPACK_KIND ? bt->pack.data : NULL;
    if (c && c->layout == layout && c->trans == q->trans_b && c->k == q->k && c->n == q->n) {
        pthread_mutex_unlock(&bt->pack.lock);
        *out = c;
        return EMBER_OK;
    }
    if (bt->pack.data) { /* another layout is cached: this call packs its own */
        pthread_mutex_unlock(&bt->pack.lock);
        return EMBER_OK;
    }
    ember_status st = EMBER_OK;
    cl_long *offs = ember__malloc((size_t)nmat * sizeof(cl_long));
    c = ember__calloc(1, sizeof *c + (size_t)nmat * sizeof(cl_mem));
    if (!offs || !c) {
        ember__free(offs);
        ember__free(c);
        pthread_mutex_unlock(&bt->pack.lock);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY,
                   "q_matmul: no memory for the packed rhs of %lld matrices", (long long)nmat);
    }
    c->layout = layout;
    c->trans = q->trans_b;
    c->k = q->k;
    c->n = q->n;
    c->nmat = nmat;
    c->pbytes = pbytes;
    for (int64_t j = 0; j < nmat; j++) /* byte offset of matrix j: rows j*rows.. of ldb bytes */
        offs[j] = (cl_long)(j * rows * q->ldb);
    cl_mem boff = NULL;
    st = ember__cl_temp(s, dev, "q_matmul", (size_t)nmat * sizeof(cl_long), offs, &boff);
    ember__free(offs);
    for (int64_t j = 0; st == EMBER_OK && j < nmat; j++) {
        st = ember__cl_temp(s, dev, "q_matmul", pbytes, NULL, &c->buf[j]);
        if (st == EMBER_OK)
            st = pack_b(s, dev, q, boff, (cl_int)j, layout, pbytes, c->buf[j]);
    }
    if (boff)
        clReleaseMemObject(boff);
    if (st != EMBER_OK) {
        clpack_release(NULL, c);
        pthread_mutex_unlock(&bt->pack.lock);
        return st;
    }
    bt->pack.data = c;
    bt->pack.bytes = (size_t)nmat * pbytes;
    bt->pack.kind = CLPACK_KIND;
    bt->pack.release = clpack_release;
    pthread_mutex_unlock(&bt->pack.lock);
    *out = c;
    return EMBER_OK;
}

static ember_status launch_ptx(ember__cl_state *s, int dev, const char *kernel, int nargs,
                               const ember__cl_arg *args, const size_t *global,
                               const size_t *local) {
    cl_program p = NULL;
    EMBER_TRY(ptx_program(s, dev, &p));
    return ember__cl_run_kernel(s, dev, "q_matmul", p, kernel, nargs, args, 2, global, local);
}

/* The generic path's run (the last path of ember__cl_qpath_at). */
static ember_status run_fallback(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    const ember__cl_qpath *p;
    for (size_t i = 0; (p = ember__cl_qpath_at(i)) != NULL; i++)
        if (strcmp(p->name, "generic") == 0)
            return p->run(s, dev, q);
    EMBER_FAIL(EMBER_ERR_INVALID_ARGUMENT, "q_matmul: no generic OpenCL path");
}

static ember_status run_tc(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q, int wgmma) {
    const int64_t lim = (int64_t)1 << 30;
    if (q->m > lim || q->n > lim || q->k > lim || q->m * q->n > INT64_MAX / 8 ||
        (q->sa && (q->a_group > lim || q->b_group > lim)))
        return run_fallback(s, dev, q);
    /* the epilogue factor: per-tensor scale[0] (times 1.0f), or per-row / per-column groups */
    const int pc = q->sa != NULL;
    cl_int ag = pc ? (cl_int)q->a_group : 0, bg = pc ? (cl_int)q->b_group : 0;
    int m = (int)q->m, n = (int)q->n, k = (int)q->k;
    int skinny = m <= 16;
    int use_wg = wgmma && !skinny;
    int lda16 = (k + 15) / 16 * 16;
    size_t abytes = (size_t)m * (size_t)lda16;
    /* wgmma kernel (one warpgroup per CTA, 64-row tiles; bench/results/gpu-notes.md runs 13-15):
     * 64 x 256 (3 CTAs per SM) when its tiles fill the 396 slots at least once, else 64 x 128
     * (4 CTAs per SM) with split-K: the largest of 1..4 splits that keeps one wave (528 slots) and
     * >= 8 k64 blocks a split (measured best at 512 x 4096 x 4096 (2), 128 x 4096 x 4096 (4),
     * 128 x 11008 x 4096 (3)). The kernel reduces the splits itself through a workspace and
     * per-tile counters (zero here, left zero by the kernel). */
    const int nkb = (k + 63) / 64;
    const size_t tm = (size_t)((m + 63) / 64);
    const int big = use_wg && tm * (size_t)((n + 255) / 256) >= 396;
    const int wbn = big ? 256 : 128;
    const size_t tiles = tm * (size_t)((n + wbn - 1) / wbn);
    int splits = 1;
    while (use_wg && !big && splits < 4 && tiles * (size_t)(splits + 1) <= 528 &&
           (splits + 1) * 8 <= nkb)
        splits++;
    size_t pbytes =
        use_wg ? ember__cl_pack_b_wgmma_size(k, n, wbn) : ember__cl_pack_b_mma_size(k, n);
    EMBER_FAIL_IF(pbytes == 0, EMBER_ERR_INVALID_ARGUMENT, "q_matmul: packed B size overflows");
    /* the temporaries are the device's scratch slots and constants (cl_scratch.c; the caller,
     * ember__cl_q_matmul, holds the device's qlock): nothing is created or released per call */
    cl_mem ap = NULL, bp = NULL, ones = NULL, ws = NULL, cnt = NULL;
    clpack *cache = NULL;
    ember_status st = cached_b(s, dev, q, use_wg ? wbn : 0, pbytes, &cache);
    if (st == EMBER_OK)
        st = ember__cl_scratch(s, dev, EMBER__CL_S_A, abytes, &ap);
    if (st == EMBER_OK && !cache)
        st = ember__cl_scratch(s, dev, EMBER__CL_S_B, pbytes, &bp);
    if (st == EMBER_OK)
        st = ember__cl_consts(s, dev, NULL, &ones);
    if (st == EMBER_OK && splits > 1) {
        st = ember__cl_scratch(s, dev, EMBER__CL_S_WS,
                               tiles * (size_t)splits * 64 * (size_t)wbn * 4, &ws);
        if (st == EMBER_OK) /* zero when made, and the kernels leave every counter they use at 0 */
            st = ember__cl_scratch(s, dev, EMBER__CL_S_CNT, tiles * sizeof(int), &cnt);
    }
    /* unused by a one-split launch, but a buffer must be passed: `ones` stands in */
    if (st == EMBER_OK && !ws) {
        ws = ones;
        cnt = ones;
    }
    char opts[160];
    if (skinny)
        snprintf(opts, sizeof opts, "-DSK_WARPS=8 -DSK_MT=1 -DSK_U=4");
    else if (m <= 256)
        snprintf(opts, sizeof opts, "-DBM=64 -DBN=128 -DWM=32 -DWN=64 -DSTAGES=3");
    else
        snprintf(opts, sizeof opts, "-DBM=128 -DBN=128 -DWM=64 -DWN=32 -DSTAGES=2");
    for (int64_t i = 0; st == EMBER_OK && i < q->batch; i++) {
        cl_int idx = (cl_int)i, ta = q->trans_a, M = m, N = n, K = k, ld16 = lda16;
        cl_long lda = q->lda, c_off = i * q->m * q->n;
        { /* A_i -> [m][lda16] */
            const ember__cl_arg args[] = {
                EMBER_CL_ARG(q->a), EMBER_CL_ARG(q->a_off), EMBER_CL_ARG(idx),
                EMBER_CL_ARG(lda),  EMBER_CL_ARG(ta),       EMBER_CL_ARG(M),
                EMBER_CL_ARG(K),    EMBER_CL_ARG(ap),       EMBER_CL_ARG(ld16)};
            const size_t local[2] = {64, 4};
            const size_t global[2] = {ember__cl_round_up((size_t)lda16, 64),
                                      ember__cl_round_up((size_t)m, 4)};
            st = ember__cl_launch(s, dev, "q_matmul", "qgemm_mma", "", "qgemm_prep_a", 9, args, 2,
                                  global, local);
        }
        if (st != EMBER_OK)
            break;
        /* B_i: the cached packed matrix, or packed now into bp */
        cl_mem bmat = bp;
        if (cache)
            bmat = cache->buf[q->b_off_elems[i] / (q->k * q->n)];
        else
            st = pack_b(s, dev, q, q->b_off, idx, use_wg ? wbn : 0, pbytes, bp);
        if (st != EMBER_OK)
            break;
        /* the GEMM: mode 2 (float out), per-tensor scale[0] * 1.0f */
        cl_int ldc = N, kps = use_wg ? (nkb + splits - 1) / splits : nkb, mode = 2;
        cl_mem fa = pc ? q->sa : q->scale, fb = pc ? q->sb : ones;
        if (use_wg) {
            cl_int swap = 0;
            cl_uint off_lo = (cl_uint)((uint64_t)c_off & 0xffffffffu),
                    off_hi = (cl_uint)((uint64_t)c_off >> 32);
            const ember__cl_arg args[] = {
                EMBER_CL_ARG(ap),     EMBER_CL_ARG(ld16), EMBER_CL_ARG(bmat), EMBER_CL_ARG(q->out),
                EMBER_CL_ARG(ldc),    EMBER_CL_ARG(M),    EMBER_CL_ARG(N),    EMBER_CL_ARG(K),
                EMBER_CL_ARG(kps),    EMBER_CL_ARG(mode), EMBER_CL_ARG(fa),   EMBER_CL_ARG(ag),
                EMBER_CL_ARG(fb),     EMBER_CL_ARG(bg),   EMBER_CL_ARG(swap), EMBER_CL_ARG(off_lo),
                EMBER_CL_ARG(off_hi), EMBER_CL_ARG(ws),   EMBER_CL_ARG(cnt)};
            const size_t local[2] = {128, 1}, global[2] = {tiles * 128, (size_t)splits};
            st = launch_ptx(s, dev, big ? "qgemm_wgmma_w1_64x256_s4a3" : "qgemm_wgmma_w1_64x128_s6",
                            19, args, global, local);
        } else {
            const ember__cl_arg args[] = {
                EMBER_CL_ARG(ap),  EMBER_CL_ARG(ld16), EMBER_CL_ARG(bmat), EMBER_CL_ARG(q->out),
                EMBER_CL_ARG(ldc), EMBER_CL_ARG(M),    EMBER_CL_ARG(N),    EMBER_CL_ARG(K),
                EMBER_CL_ARG(kps), EMBER_CL_ARG(mode), EMBER_CL_ARG(fa),   EMBER_CL_ARG(ag),
                EMBER_CL_ARG(fb),  EMBER_CL_ARG(bg),   EMBER_CL_ARG(c_off)};
            size_t local[2], global[2] = {0, 1};
            if (skinny) {
                local[0] = 256;
                global[0] = (size_t)((n + 7) / 8) * 256;
            } else {
                int bm = m <= 256 ? 64 : 128, nthr = m <= 256 ? 128 : 256;
                local[0] = (size_t)nthr;
                global[0] = (size_t)((m + bm - 1) / bm) * (size_t)((n + 127) / 128) * (size_t)nthr;
            }
            local[1] = 1;
            st = ember__cl_launch(s, dev, "q_matmul", "qgemm_mma", opts,
                                  skinny ? "qgemm_mma_skinny" : "qgemm_mma_tile", 15, args, 2,
                                  global, local);
        }
    }
    return st;
}

ember_status ember__cl_run_mma(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    return run_tc(s, dev, q, 0);
}

ember_status ember__cl_run_wgmma(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    return run_tc(s, dev, q, 1);
}

/* The two paths, plugged into cl_qmatmul.c's list through its weak references. Both honour
 * per-row / per-column scales (per_channel 1): f = sa[r / a_group] * sb[c / b_group]. */
const ember__cl_qpath ember__cl_qpath_wgmma = {"wgmma", "opencl.wgmma_sm90a", ember__cl_has_wgmma,
                                               ember__cl_run_wgmma, 1};
const ember__cl_qpath ember__cl_qpath_mma = {"mma", "opencl.mma_sm80", ember__cl_has_mma,
                                             ember__cl_run_mma, 1};
