/* qgemm_gpu.c: standalone check + bench of ember's int8 tensor-core OpenCL kernels on an NVIDIA
 * GPU.
 *
 * Build (on the GPU machine, OpenCL headers + ICD loader):
 *   gcc -O2 -std=gnu11 -o qgemm_gpu bench/gpu/qgemm_gpu.c backends/opencl/cl_pack_mma.c -lOpenCL
 * -lm Run:  ./qgemm_gpu KERNEL_DIR [PTX_FILE] [quick] [mma|wg]   (mma: OpenCL C kernels only; wg:
 * PTX only)
 *
 * For each shape: random int8 A [M][K] (lda = K rounded up to 16) and B [K][N], B packed with
 * ember__cl_pack_b_mma; a naive OpenCL int32 kernel gives C_ref on the GPU, itself checked on the
 * CPU (all entries for small shapes, 4096 random entries otherwise); every variant's int32 C must
 * equal C_ref exactly (C poisoned before the checked run); the fused float epilogue (per-row and
 * per-column scales) must equal the host's (float)acc * (sa[m] * sb[n]) bit for bit.
 * Timing: OpenCL profiling events, 5 warm-up launches then 30 timed, median, rotating over enough
 * copies of A and B to exceed the L2 (so small-M shapes stream weights from HBM).
 * Output: a table on stdout and $OUT/ember_{gpu,mma,wg}.json. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../backends/opencl/cl_pack_mma.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        cl_int e_ = (x);                                                                           \
        if (e_ != CL_SUCCESS) {                                                                    \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, e_);                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static cl_context ctx;
static cl_mem g_ws, g_cnt; /* split-K workspace and tile counters of the wgmma kernels */
static cl_command_queue q;
static cl_device_id dev;
static FILE *jf;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(s);
        return NULL;
    }
    s[n] = 0;
    fclose(f);
    if (len)
        *len = (size_t)n;
    return s;
}

static cl_program build_src(const char *src, const char *opts, const char *tag) {
    cl_int e;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &e);
    CK(e);
    e = clBuildProgram(p, 1, &dev, opts, NULL, NULL);
    size_t ll = 0;
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &ll);
    char *log = malloc(ll + 1);
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, ll, log, NULL);
    log[ll] = 0;
    /* keep the ptxas resource lines of -cl-nv-verbose */
    printf("[build %s] rc=%d\n", tag, e);
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n"))
        if (e != CL_SUCCESS || strstr(line, "registers") || strstr(line, "spill") ||
            strstr(line, "error") || strstr(line, "arning"))
            printf("   %s\n", line);
    free(log);
    if (e != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static cl_program build_ptx(const char *path) {
    size_t len;
    char *s = read_file(path, &len);
    if (!s)
        return NULL;
    cl_int e, st;
    const unsigned char *bin = (const unsigned char *)s;
    len += 1;
    cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &len, &bin, &st, &e);
    if (e != CL_SUCCESS) {
        printf("[ptx %s] create rc=%d st=%d\n", path, e, st);
        return NULL;
    }
    e = clBuildProgram(p, 1, &dev, "", NULL, NULL);
    size_t ll = 0;
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &ll);
    char *log = malloc(ll + 1);
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, ll, log, NULL);
    log[ll] = 0;
    printf("[ptx %s] build rc=%d %s\n", path, e, log);
    free(log);
    free(s);
    if (e != CL_SUCCESS)
        return NULL;
    return p;
}

static const char *ref_src =
    "__kernel void ref(__global const char *A, int lda, __global const char *B, __global int *C,"
    " int M, int N, int K) {\n"
    "  int n = get_global_id(0), m = get_global_id(1); if (m >= M || n >= N) return;\n"
    "  int s = 0; for (int k = 0; k < K; k++) s += (int)A[(size_t)m * lda + k] * (int)B[(size_t)k "
    "* N + n];\n"
    "  C[(size_t)m * N + n] = s; }\n"
    "__kernel void nop(__global uint *out) { if (get_global_id(0) == 1u << 30) out[0] = 1u; }\n"
    "__kernel void stream(__global const uint4 *p, int n16, __global uint *out) {\n"
    "  uint4 s = (uint4)(0u); for (int i = get_global_id(0); i < n16; i += get_global_size(0)) s "
    "^= p[i];\n"
    "  if ((s.x ^ s.y ^ s.z ^ s.w) == 0x12345678u) out[0] = 1u; }\n";

enum { V_TILE, V_SKINNY, V_WGMMA };
typedef struct variant {
    const char *name;
    int kind;
    const char *opts;
    int bm, bn, nthr; /* tile / wgmma: tile sizes; skinny: bm = max M, nthr = 32 * warps */
    int max_m;        /* applies when M <= max_m (0 = any) */
    int min_m;
    cl_program prog;
    cl_kernel k;
} variant;

static variant variants[] = {
    {"mma_128x128_s2", V_TILE, "-DBM=128 -DBN=128 -DWM=64 -DWN=64 -DSTAGES=2", 128, 128, 128, 0, 17,
     0, 0},
    {"mma_128x128w8_s2", V_TILE, "-DBM=128 -DBN=128 -DWM=64 -DWN=32 -DSTAGES=2", 128, 128, 256, 0,
     17, 0, 0},
    {"mma_128x64_s3", V_TILE, "-DBM=128 -DBN=64 -DWM=64 -DWN=32 -DSTAGES=3", 128, 64, 128, 0, 17, 0,
     0},
    {"mma_64x128_s3", V_TILE, "-DBM=64 -DBN=128 -DWM=32 -DWN=64 -DSTAGES=3", 64, 128, 128, 0, 1, 0,
     0},
    {"mma_skinny_m16", V_SKINNY, "-DSK_WARPS=8 -DSK_MT=1 -DSK_U=4", 16, 8, 256, 16, 1, 0, 0},
    {"mma_skinny_m16u8", V_SKINNY, "-DSK_WARPS=4 -DSK_MT=1 -DSK_U=8", 16, 8, 128, 16, 1, 0, 0},
    {"mma_skinny_m16w8u8", V_SKINNY, "-DSK_WARPS=8 -DSK_MT=1 -DSK_U=8", 16, 8, 256, 16, 1, 0, 0},
    {"mma_skinny_m32", V_SKINNY, "-DSK_WARPS=8 -DSK_MT=2 -DSK_U=4", 32, 8, 256, 32, 1, 0, 0},
};
#define NVAR ((int)(sizeof variants / sizeof variants[0]))

typedef struct wg_variant {
    const char *name, *kname;
    int bm, bn, nthr;
    int swap; /* descriptor LBO/SBO swapped (diagnostic, edge shapes only) */
    cl_kernel k;
} wg_variant;
static wg_variant wgv[] = {
    {"wgmma_128x128_a3", "qgemm_wgmma_128x128_a3", 128, 128, 256, 0, 0},
    {"wgmma_128x64_s8", "qgemm_wgmma_128x64_s8", 128, 64, 256, 0, 0},
    {"wgmma_w1_64x256_s4", "qgemm_wgmma_w1_64x256_s4", 64, 256, 128, 0, 0},
    {"wgmma_w1_64x256_s4a3", "qgemm_wgmma_w1_64x256_s4a3", 64, 256, 128, 0, 0},
    {"wgmma_w1_64x128_s6", "qgemm_wgmma_w1_64x128_s6", 64, 128, 128, 0, 0},
};
#define NWG ((int)(sizeof wgv / sizeof wgv[0]))

/* is name one of the comma-separated names of list? */
static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == n && !strncmp(p, name, n))
            return 1;
        if (!c)
            break;
        p = c + 1;
    }
    return 0;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t xr(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double ev_ns(cl_event a, cl_event b) {
    cl_ulong s, e;
    CK(clGetEventProfilingInfo(a, CL_PROFILING_COMMAND_START, sizeof s, &s, NULL));
    CK(clGetEventProfilingInfo(b, CL_PROFILING_COMMAND_END, sizeof e, &e, NULL));
    return (double)(e - s);
}

typedef struct shape {
    int M, N, K, bench;
} shape;

/* one launch of variant v (tile / skinny / wgmma), C of ldc = N; returns the launch's events */
typedef struct launch {
    int kind;
    cl_kernel k;
    int bm, bn, nthr;
    int splits;
    int mode;
} launch;
/* packed-B buffer index of a launch: 0 mma fragment order, 1 wgmma bn 256, 2 wgmma bn 128, 3 bn 64
 */
static int pack_of(const launch *L) {
    return L->kind != V_WGMMA ? 0 : (L->bn == 256 ? 1 : L->bn == 128 ? 2 : 3);
}

static cl_int enqueue(const launch *L, cl_mem A, int lda, cl_mem Bp, cl_mem C, int M, int N, int K,
                      cl_mem sa, int sas, cl_mem sb, int sbs, cl_event *e0, cl_event *e1) {
    int nkb = (K + 63) / 64;
    int kps = (nkb + L->splits - 1) / L->splits;
    int mode = L->mode;
    if (L->splits > 1 && L->kind != V_WGMMA) {
        int zero = 0;
        CK(clEnqueueFillBuffer(q, C, &zero, 4, 0, (size_t)M * N * 4, 0, NULL, e0));
        mode = 1;
    }
    cl_kernel k = L->k;
    int a = 0;
    CK(clSetKernelArg(k, a++, sizeof(cl_mem), &A));
    CK(clSetKernelArg(k, a++, sizeof(int), &lda));
    CK(clSetKernelArg(k, a++, sizeof(cl_mem), &Bp));
    CK(clSetKernelArg(k, a++, sizeof(cl_mem), &C));
    CK(clSetKernelArg(k, a++, sizeof(int), &N));
    CK(clSetKernelArg(k, a++, sizeof(int), &M));
    CK(clSetKernelArg(k, a++, sizeof(int), &N));
    CK(clSetKernelArg(k, a++, sizeof(int), &K));
    CK(clSetKernelArg(k, a++, sizeof(int), &kps));
    CK(clSetKernelArg(k, a++, sizeof(int), &mode));
    CK(clSetKernelArg(k, a++, sizeof(cl_mem), &sa));
    CK(clSetKernelArg(k, a++, sizeof(int), &sas));
    CK(clSetKernelArg(k, a++, sizeof(cl_mem), &sb));
    CK(clSetKernelArg(k, a++, sizeof(int), &sbs));
    if (L->kind != V_WGMMA) {
        cl_long c_off = 0;
        CK(clSetKernelArg(k, a++, sizeof c_off, &c_off));
    } else { /* 14 desc_swap, 15/16 c_off halves: set once; 17/18 split-K workspace and counters */
        CK(clSetKernelArg(k, 17, sizeof(cl_mem), &g_ws));
        CK(clSetKernelArg(k, 18, sizeof(cl_mem), &g_cnt));
    }
    size_t gs[2], ls[2] = {(size_t)L->nthr, 1};
    if (L->kind == V_SKINNY) {
        gs[0] = (size_t)((N + 7) / 8) * (size_t)L->nthr;
    } else {
        size_t tiles = (size_t)((M + L->bm - 1) / L->bm) * (size_t)((N + L->bn - 1) / L->bn);
        gs[0] = tiles * (size_t)L->nthr;
    }
    gs[1] = (size_t)L->splits;
    cl_event ev;
    cl_int err = clEnqueueNDRangeKernel(q, k, 2, NULL, gs, ls, 0, NULL, &ev);
    if (err != CL_SUCCESS) {
        printf("enqueue failed %d (gs %zu x %zu, ls %zu)\n", err, gs[0], gs[1], ls[0]);
        return err;
    }
    if (L->splits <= 1 || L->kind == V_WGMMA) { /* no fill command in front of this launch */
        if (e0) {
            *e0 = ev;
            clRetainEvent(ev);
        }
    }
    if (e1)
        *e1 = ev;
    else
        clReleaseEvent(ev);
    return CL_SUCCESS;
}

static int auto_splits(const launch *L, int M, int N, int K) {
    int nkb = (K + 63) / 64;
    long tiles;
    if (L->kind == V_SKINNY)
        tiles = (N + 7) / 8 / 4; /* 4 skinny groups ~ one resident slot */
    else
        tiles = (long)((M + L->bm - 1) / L->bm) * ((N + L->bn - 1) / L->bn);
    int s = 1;
    while (tiles * s < 2 * 132 && s * 2 <= nkb / 4)
        s *= 2;
    return s;
}

int main(int argc, char **argv) {
    const char *kdir = argc > 1 ? argv[1] : "backends/opencl/kernels";
    const char *ptx = argc > 2 ? argv[2] : "";
    int quick = 0, only_mma = 0, only_wg = 0;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "quick"))
            quick = 1;
        if (!strcmp(argv[i], "mma"))
            only_mma = 1;
        if (!strcmp(argv[i], "wg"))
            only_wg = 1;
    }
    if (only_mma)
        ptx = "";
    const char *outd = getenv("OUT");
    char jpath[1024];
    snprintf(jpath, sizeof jpath, "%s/ember_%s.json", outd ? outd : ".",
             getenv("EMBER_JSON") ? getenv("EMBER_JSON")
             : only_mma           ? "mma"
             : only_wg            ? "wg"
                                  : "gpu");
    jf = fopen(jpath, "w");
    fprintf(jf, "{\"rows\":[\n");

    cl_platform_id plats[8];
    cl_uint np = 0;
    CK(clGetPlatformIDs(8, plats, &np));
    int found = 0;
    for (cl_uint i = 0; i < np && !found; i++) {
        char name[256];
        clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (!strstr(name, "NVIDIA"))
            continue;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) == CL_SUCCESS)
            found = 1;
    }
    if (!found) {
        printf("no NVIDIA OpenCL GPU\n");
        return 77;
    }
    char dname[256], dver[256], drv[256];
    cl_uint cus;
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof dname, dname, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof dver, dver, NULL);
    clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof drv, drv, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    printf("device: %s | %s | driver %s | %u CUs\n", dname, dver, drv, cus);
    cl_int e;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    CK(e);
    q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &e);
    CK(e);

    char path[1024];
    snprintf(path, sizeof path, "%s/qgemm_mma.cl", kdir);
    char *src = read_file(path, NULL);
    if (!src) {
        printf("cannot read %s\n", path);
        return 1;
    }
    for (int v = 0; v < NVAR && !only_wg; v++) {
        char opts[512];
        snprintf(opts, sizeof opts, "-cl-std=CL1.2 -cl-nv-verbose %s", variants[v].opts);
        variants[v].prog = build_src(src, opts, variants[v].name);
        if (variants[v].prog) {
            variants[v].k = clCreateKernel(
                variants[v].prog,
                variants[v].kind == V_SKINNY ? "qgemm_mma_skinny" : "qgemm_mma_tile", &e);
            if (e != CL_SUCCESS) {
                printf("kernel %s: %d\n", variants[v].name, e);
                variants[v].k = NULL;
            }
        }
    }
    cl_program pref = build_src(ref_src, "", "ref");
    cl_kernel kref = clCreateKernel(pref, "ref", &e);
    CK(e);
    cl_program pw = ptx[0] ? build_ptx(ptx) : NULL;
    if (pw) {
        cl_kernel kp = clCreateKernel(pw, "qgemm_wgmma_probe", &e);
        if (e == CL_SUCCESS) {
            int8_t a8[16] = {-7}, b8[16] = {13};
            float f1 = 0.25f, f2 = 0.5f;
            int out[16] = {0};
            cl_mem pa = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 16, a8, &e);
            cl_mem pb = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 16, b8, &e);
            cl_mem pc = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 64, out, &e);
            cl_mem s1 = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 4, &f1, &e);
            cl_mem s2 = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 4, &f2, &e);
            int iv[] = {16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
            cl_uint zero32 = 0;
            clSetKernelArg(kp, 15, sizeof zero32, &zero32);
            clSetKernelArg(kp, 16, sizeof zero32, &zero32);
            clSetKernelArg(kp, 17, sizeof(cl_mem), &pc);
            clSetKernelArg(kp, 18, sizeof(cl_mem), &pc);
            clSetKernelArg(kp, 0, sizeof(cl_mem), &pa);
            clSetKernelArg(kp, 1, 4, &iv[0]);
            clSetKernelArg(kp, 2, sizeof(cl_mem), &pb);
            clSetKernelArg(kp, 3, sizeof(cl_mem), &pc);
            clSetKernelArg(kp, 4, 4, &iv[1]);
            clSetKernelArg(kp, 5, 4, &iv[2]);
            clSetKernelArg(kp, 6, 4, &iv[3]);
            clSetKernelArg(kp, 7, 4, &iv[4]);
            clSetKernelArg(kp, 8, 4, &iv[5]);
            clSetKernelArg(kp, 9, 4, &iv[6]);
            clSetKernelArg(kp, 10, sizeof(cl_mem), &s1);
            clSetKernelArg(kp, 11, 4, &iv[7]);
            clSetKernelArg(kp, 12, sizeof(cl_mem), &s2);
            clSetKernelArg(kp, 13, 4, &iv[8]);
            clSetKernelArg(kp, 14, 4, &iv[9]);
            size_t g1 = 32, l1 = 32;
            e = clEnqueueNDRangeKernel(q, kp, 1, NULL, &g1, &l1, 0, NULL, NULL);
            cl_int e2 = clEnqueueReadBuffer(q, pc, CL_TRUE, 0, 64, out, 0, NULL, NULL);
            printf("[probe] enqueue %d read %d:", e, e2);
            for (int i = 0; i < 13; i++)
                printf(" %d", out[i]);
            printf("   (want 16 17 18 19 20 21 22 23 24 25 -7 13 500250)\n");
            clReleaseMemObject(pa);
            clReleaseMemObject(pb);
            clReleaseMemObject(pc);
            clReleaseMemObject(s1);
            clReleaseMemObject(s2);
            clReleaseKernel(kp);
        }
    }
    const char *wg_only = getenv("EMBER_WG_ONLY");
    for (int w = 0; w < NWG; w++) {
        wgv[w].k = NULL;
        if (!pw)
            continue;
        if (wg_only && !in_list(wg_only, wgv[w].kname))
            continue;
        wgv[w].k = clCreateKernel(pw, wgv[w].kname, &e);
        if (e != CL_SUCCESS) {
            printf("wgmma kernel %s: %d\n", wgv[w].kname, e);
            wgv[w].k = NULL;
            continue;
        }
        CK(clSetKernelArg(wgv[w].k, 14, sizeof(int), &wgv[w].swap));
        cl_uint c_off0 = 0;
        CK(clSetKernelArg(wgv[w].k, 15, sizeof c_off0, &c_off0));
        CK(clSetKernelArg(wgv[w].k, 16, sizeof c_off0, &c_off0));
        size_t wgs = 0;
        cl_ulong lm = 0, pm = 0;
        clGetKernelWorkGroupInfo(wgv[w].k, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof wgs, &wgs, NULL);
        clGetKernelWorkGroupInfo(wgv[w].k, dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lm, &lm, NULL);
        clGetKernelWorkGroupInfo(wgv[w].k, dev, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof pm, &pm, NULL);
        printf("[ptx kernel %s] max work-group %zu, local mem %llu, private mem %llu\n",
               wgv[w].kname, wgs, (unsigned long long)lm, (unsigned long long)pm);
    }

    shape shapes[] = {
        /* edge shapes: check only */
        {1, 8, 64, 0},
        {1, 1000, 1000, 0},
        {3, 77, 130, 0},
        {17, 200, 96, 0},
        {33, 129, 4100, 0},
        {130, 260, 272, 0},
        {257, 384, 1000, 0},
        {300, 515, 2049, 0},
        /* bench shapes */
        {1, 4096, 4096, 1},
        {16, 4096, 4096, 1},
        {128, 4096, 4096, 1},
        {512, 4096, 4096, 1},
        {128, 11008, 4096, 1},
        {4096, 4096, 4096, 1},
        {8192, 8192, 8192, 1},
        {1, 11008, 4096, 1},
    };
    int nshape = (int)(sizeof shapes / sizeof shapes[0]);
    int first_row = 1;
    int fails = 0;
    printf("\n%-22s %-18s %7s %9s %9s %9s %s\n", "shape", "variant", "splits", "med_us", "batch_us",
           "TOPS", "check");
    for (int si = 0; si < nshape; si++) {
        shape S = shapes[si];
        if (quick && S.M == 8192)
            continue;
        int M = S.M, N = S.N, K = S.K;
        int lda = (K + 15) / 16 * 16;
        size_t abytes = (size_t)M * lda, bbytes = (size_t)K * N,
               pbytes = ember__cl_pack_b_mma_size(K, N);
        int8_t *ha = calloc(abytes, 1), *hb = malloc(bbytes), *hp = malloc(pbytes);
        for (size_t i = 0; i < abytes; i++)
            ha[i] = (int8_t)(xr() >> 56);
        for (size_t i = 0; i < bbytes; i++)
            hb[i] = (int8_t)(xr() >> 56);
        ember__cl_pack_b_mma(hb, K, N, N, 1, hp);
        int nrot = 1;
        if (S.bench) {
            double need = 256e6 / (double)(abytes + pbytes);
            nrot = need > 16 ? 16 : (need < 1 ? 1 : (int)ceil(need));
        }
        static const int wbn[3] = {256, 128, 64};
        size_t wbytes[3];
        int8_t *hw[3];
        for (int i = 0; i < 3; i++) {
            int used = 0; /* pack only the layouts a loaded kernel reads */
            for (int w = 0; w < NWG; w++)
                used |= wgv[w].k && wgv[w].bn == wbn[i];
            wbytes[i] = ember__cl_pack_b_wgmma_size(K, N, wbn[i]);
            hw[i] = pw && used ? malloc(wbytes[i]) : NULL;
            if (hw[i])
                ember__cl_pack_b_wgmma(hb, K, N, N, 1, wbn[i], hw[i]);
        }
        cl_mem dA[16], dP[4][16];
        for (int r = 0; r < nrot; r++) {
            dA[r] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, abytes, ha, &e);
            CK(e);
            dP[0][r] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, pbytes, hp, &e);
            CK(e);
            for (int i = 0; i < 3; i++) {
                dP[1 + i][r] = NULL;
                if (!hw[i])
                    continue;
                dP[1 + i][r] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                              wbytes[i], hw[i], &e);
                CK(e);
            }
        }
        cl_mem dB = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bbytes, hb, &e);
        CK(e);
        size_t cbytes = (size_t)M * N * 4;
        cl_mem dR = clCreateBuffer(ctx, CL_MEM_READ_WRITE, cbytes, NULL, &e);
        CK(e);
        cl_mem dC = clCreateBuffer(ctx, CL_MEM_READ_WRITE, cbytes, NULL, &e);
        CK(e);
        {
            size_t tiles = (size_t)((M + 63) / 64) *
                           (size_t)((N + 63) / 64); /* the most tiles of any kernel */
            /* up to 16 splits of partial tiles: M and N padded to the largest tile of any kernel */
            size_t wsb = (size_t)((M + 127) / 128 * 128) * (size_t)((N + 255) / 256 * 256) * 16 * 4;
            if (wsb > ((size_t)1 << 31))
                wsb = (size_t)1 << 31;
            g_ws = clCreateBuffer(ctx, CL_MEM_READ_WRITE, wsb, NULL, &e);
            CK(e);
            g_cnt = clCreateBuffer(ctx, CL_MEM_READ_WRITE, tiles * 4 + 4, NULL, &e);
            CK(e);
            int zero = 0;
            CK(clEnqueueFillBuffer(q, g_cnt, &zero, 4, 0, tiles * 4 + 4, 0, NULL, NULL));
        }
        float *hsa = malloc((size_t)M * 4), *hsb = malloc((size_t)N * 4);
        for (int i = 0; i < M; i++)
            hsa[i] = (float)(1e-3 * (1 + (double)(xr() % 1000)));
        for (int i = 0; i < N; i++)
            hsb[i] = (float)(1e-3 * (1 + (double)(xr() % 1000)));
        cl_mem dsa =
            clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)M * 4, hsa, &e);
        CK(e);
        cl_mem dsb =
            clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)N * 4, hsb, &e);
        CK(e);
        /* reference on the GPU */
        CK(clSetKernelArg(kref, 0, sizeof(cl_mem), &dA[0]));
        CK(clSetKernelArg(kref, 1, sizeof(int), &lda));
        CK(clSetKernelArg(kref, 2, sizeof(cl_mem), &dB));
        CK(clSetKernelArg(kref, 3, sizeof(cl_mem), &dR));
        CK(clSetKernelArg(kref, 4, sizeof(int), &M));
        CK(clSetKernelArg(kref, 5, sizeof(int), &N));
        CK(clSetKernelArg(kref, 6, sizeof(int), &K));
        size_t rgs[2] = {(size_t)(N + 15) / 16 * 16, (size_t)(M + 15) / 16 * 16}, rls[2] = {16, 16};
        CK(clEnqueueNDRangeKernel(q, kref, 2, NULL, rgs, rls, 0, NULL, NULL));
        int32_t *href = malloc(cbytes), *hc = malloc(cbytes);
        CK(clEnqueueReadBuffer(q, dR, CL_TRUE, 0, cbytes, href, 0, NULL, NULL));
        /* CPU check of the reference */
        {
            long nchk = (long)M * N <= 65536 ? (long)M * N : 4096;
            int bad = 0;
            for (long c = 0; c < nchk; c++) {
                long idx = (long)M * N <= 65536 ? c : (long)(xr() % ((uint64_t)M * N));
                int m = (int)(idx / N), n = (int)(idx % N);
                int32_t s = 0;
                for (int k = 0; k < K; k++)
                    s += (int32_t)ha[(size_t)m * lda + k] * (int32_t)hb[(size_t)k * N + n];
                if (s != href[idx])
                    bad++;
            }
            if (bad) {
                printf("REFERENCE MISMATCH %d at %dx%dx%d\n", bad, M, N, K);
                fails++;
            }
        }
        char sname[64];
        snprintf(sname, sizeof sname, "%dx%dx%d", M, N, K);
        if (S.bench && M == 1 && !only_wg) {
            /* read-only streaming of the packed weights (rotating buffers): the bandwidth floor */
            cl_kernel ks = clCreateKernel(pref, "stream", &e);
            CK(e);
            int n16 = (int)(pbytes / 16);
            for (int gsz = 132 * 4; gsz <= 132 * 16; gsz *= 2) {
                double t3[30];
                cl_event c0[46];
                for (int r = 0; r < 46; r++) {
                    CK(clSetKernelArg(ks, 0, sizeof(cl_mem), &dP[0][r % nrot]));
                    CK(clSetKernelArg(ks, 1, sizeof(int), &n16));
                    CK(clSetKernelArg(ks, 2, sizeof(cl_mem), &dC));
                    size_t g1 = (size_t)gsz * 256, l1 = 256;
                    CK(clEnqueueNDRangeKernel(q, ks, 1, NULL, &g1, &l1, 0, NULL, &c0[r]));
                }
                CK(clFinish(q));
                for (int r = 0; r < 30; r++)
                    t3[r] = ev_ns(c0[16 + r], c0[16 + r]);
                for (int r = 0; r < 46; r++)
                    clReleaseEvent(c0[r]);
                qsort(t3, 30, sizeof t3[0], cmp_d);
                printf("stream %zu bytes, %d groups: %.2f us, %.0f GB/s\n", pbytes, gsz,
                       t3[15] / 1e3, (double)pbytes / t3[15]);
            }
            clReleaseKernel(ks);
            cl_kernel kn = clCreateKernel(pref, "nop", &e);
            CK(e);
            CK(clSetKernelArg(kn, 0, sizeof(cl_mem), &dC));
            double t4[30];
            cl_event c4[40];
            size_t g4 = 132 * 256, l4 = 256;
            for (int r = 0; r < 40; r++)
                CK(clEnqueueNDRangeKernel(q, kn, 1, NULL, &g4, &l4, 0, NULL, &c4[r]));
            CK(clFinish(q));
            for (int r = 0; r < 30; r++)
                t4[r] = ev_ns(c4[10 + r], c4[10 + r]);
            for (int r = 0; r < 40; r++)
                clReleaseEvent(c4[r]);
            qsort(t4, 30, sizeof t4[0], cmp_d);
            printf("empty kernel (132 groups): %.2f us by profiling events\n", t4[15] / 1e3);
            clReleaseKernel(kn);
        }
        /* candidate launches */
        launch Ls[64];
        const char *lname[64];
        int nl = 0;
        for (int v = 0; v < NVAR; v++) {
            variant *V = &variants[v];
            if (!V->k || only_wg)
                continue;
            if (V->max_m && M > V->max_m)
                continue;
            if (M < V->min_m && S.bench)
                continue;
            launch L = {V->kind, V->k, V->bm, V->bn, V->nthr, 1, 0};
            int as = auto_splits(&L, M, N, K);
            if (V->kind == V_SKINNY && as == 1 && S.bench == 0)
                as = 2; /* exercise split-K on edges */
            Ls[nl] = L;
            lname[nl++] = V->name;
            if (as > 1) {
                L.splits = as;
                Ls[nl] = L;
                lname[nl++] = V->name;
            }
            if (!S.bench && V->kind == V_TILE) {
                L.splits = 3;
                Ls[nl] = L;
                lname[nl++] = V->name;
            }
        }
        for (int w = 0; w < NWG; w++) {
            if (!wgv[w].k)
                continue;
            if (wgv[w].swap && S.bench)
                continue;
            launch L = {V_WGMMA, wgv[w].k, wgv[w].bm, wgv[w].bn, wgv[w].nthr, 1, 0};
            const char *sl =
                getenv("EMBER_SPLITS"); /* e.g. "2,3,4,6,8": these split counts on bench shapes */
            if (sl && S.bench) {
                if (M < 64)
                    continue;               /* M <= 16 runs the skinny mma kernel */
                if (M * 2 < N && M <= 1024) /* the split-K shapes only (small M) */
                    for (const char *p = sl; *p && nl < 60;) {
                        int sp = atoi(p);
                        if (sp > 1 && sp <= (K + 63) / 64) {
                            L.splits = sp;
                            Ls[nl] = L;
                            lname[nl++] = wgv[w].name;
                        }
                        const char *c = strchr(p, ',');
                        if (!c)
                            break;
                        p = c + 1;
                    }
                L.splits = 1;
                Ls[nl] = L;
                lname[nl++] = wgv[w].name;
                continue;
            }
            Ls[nl] = L;
            lname[nl++] = wgv[w].name;
            int as = auto_splits(&L, M, N, K);
            if (as > 1 || !S.bench) {
                L.splits = as > 1 ? as : 2;
                Ls[nl] = L;
                lname[nl++] = wgv[w].name;
            }
            if (as > 2) {
                L.splits = as / 2;
                Ls[nl] = L;
                lname[nl++] = wgv[w].name;
            }
            if (!S.bench) {
                L.splits = 3;
                Ls[nl] = L;
                lname[nl++] = wgv[w].name;
            }
        }
        for (int l = 0; l < nl; l++) {
            launch *L = &Ls[l];
            /* exact check, C poisoned */
            int poison = 0x7eadbeef;
            CK(clEnqueueFillBuffer(q, dC, &poison, 4, 0, cbytes, 0, NULL, NULL));
            if (enqueue(L, dA[0], lda, dP[pack_of(L)][0], dC, M, N, K, dsa, 1, dsb, 1, NULL,
                        NULL) != CL_SUCCESS) {
                fails++;
                continue;
            }
            e = clFinish(q);
            if (e == CL_SUCCESS)
                e = clEnqueueReadBuffer(q, dC, CL_TRUE, 0, cbytes, hc, 0, NULL, NULL);
            if (e != CL_SUCCESS) {
                printf("%-22s %-18s run failed %d\n", sname, lname[l], e);
                fails++;
                exit(2);
            }
            long bad = 0, first = -1;
            for (size_t i = 0; i < (size_t)M * N; i++)
                if (hc[i] != href[i]) {
                    if (first < 0)
                        first = (long)i;
                    bad++;
                }
            char chk[96];
            if (bad) {
                snprintf(chk, sizeof chk, "FAIL %ld bad, first (%ld,%ld) got %d want %d", bad,
                         first / N, first % N, hc[first], href[first]);
                fails++;
            } else
                snprintf(chk, sizeof chk, "exact");
            /* fused float epilogue (per-row x per-column scales), splits 1 only */
            if (!bad && L->splits == 1 && (l == 0 || !S.bench)) {
                launch L2 = *L;
                L2.mode = 2;
                CK(clEnqueueFillBuffer(q, dC, &poison, 4, 0, cbytes, 0, NULL, NULL));
                enqueue(&L2, dA[0], lda, dP[pack_of(L)][0], dC, M, N, K, dsa, 1, dsb, 1, NULL,
                        NULL);
                CK(clEnqueueReadBuffer(q, dC, CL_TRUE, 0, cbytes, hc, 0, NULL, NULL));
                long fb = 0;
                for (size_t i = 0; i < (size_t)M * N; i++) {
                    float want = 0.0f + (hsa[i / (size_t)N] * hsb[i % (size_t)N]) * (float)href[i];
                    float got;
                    memcpy(&got, &hc[i], 4);
                    if (memcmp(&got, &want, 4))
                        fb++;
                }
                if (fb) {
                    fails++;
                    snprintf(chk + strlen(chk), sizeof chk - strlen(chk), " F32 FAIL %ld", fb);
                } else
                    snprintf(chk + strlen(chk), sizeof chk - strlen(chk), " +f32");
            }
            double med = 0, tops = 0, batch = 0;
            if (S.bench && !bad) {
                enum { REP = 30 };
                const int WARM =
                    nrot > 5 ? nrot : 5; /* touch every rotation buffer before timing */
                double t[REP];
                cl_event a0[16 + REP], a1[16 + REP];
                /* back to back (no host sync between launches), per-launch profiling events */
                for (int r = 0; r < WARM + REP; r++)
                    enqueue(L, dA[r % nrot], lda, dP[pack_of(L)][r % nrot], dC, M, N, K, dsa, 1,
                            dsb, 1, &a0[r], &a1[r]);
                CK(clFinish(q));
                for (int r = 0; r < REP; r++)
                    t[r] = ev_ns(a0[WARM + r], a1[WARM + r]);
                batch = ev_ns(a0[WARM], a1[WARM + REP - 1]) / REP / 1e3;
                for (int r = 0; r < WARM + REP; r++) {
                    clReleaseEvent(a0[r]);
                    clReleaseEvent(a1[r]);
                }
                qsort(t, REP, sizeof t[0], cmp_d);
                med = t[REP / 2] / 1e3;
                tops = 2.0 * M * N * (double)K / (med * 1e-6) / 1e12;
            }
            printf("%-22s %-18s %7d %9.2f %9.2f %9.1f %s\n", sname, lname[l], L->splits, med, batch,
                   tops, chk);
            if (S.bench && !bad && L->kind == V_SKINNY && L->splits == 1) {
                /* the same launch with one B buffer (L2-resident): separates HBM streaming from the
                 * rest */
                double t2[20];
                cl_event b0[25], b1[25];
                for (int r = 0; r < 25; r++)
                    enqueue(L, dA[0], lda, dP[0][0], dC, M, N, K, dsa, 1, dsb, 1, &b0[r], &b1[r]);
                CK(clFinish(q));
                for (int r = 0; r < 20; r++)
                    t2[r] = ev_ns(b0[5 + r], b1[5 + r]);
                for (int r = 0; r < 25; r++) {
                    clReleaseEvent(b0[r]);
                    clReleaseEvent(b1[r]);
                }
                qsort(t2, 20, sizeof t2[0], cmp_d);
                printf("%-22s %-18s %7s %9.2f  (one B buffer, L2-resident)\n", sname, lname[l], "",
                       t2[10] / 1e3);
            }
            fflush(stdout);
            fprintf(jf,
                    "%s{\"M\":%d,\"N\":%d,\"K\":%d,\"variant\":\"%s\",\"splits\":%d,\"us\":%.3f,"
                    "\"us_batch\":%.3f,\"tops\":%.2f,\"ok\":%d}",
                    first_row ? "" : ",\n", M, N, K, lname[l], L->splits, med, batch, tops,
                    bad == 0);
            first_row = 0;
        }
        for (int r = 0; r < nrot; r++) {
            clReleaseMemObject(dA[r]);
            for (int i = 0; i < 4; i++)
                if (dP[i][r])
                    clReleaseMemObject(dP[i][r]);
        }
        free(hw[0]);
        free(hw[1]);
        free(hw[2]);
        clReleaseMemObject(dB);
        clReleaseMemObject(dR);
        clReleaseMemObject(dC);
        clReleaseMemObject(dsa);
        clReleaseMemObject(dsb);
        clReleaseMemObject(g_ws);
        clReleaseMemObject(g_cnt);
        free(ha);
        free(hb);
        free(hp);
        free(href);
        free(hc);
        free(hsa);
        free(hsb);
    }
    fprintf(jf, "\n],\"device\":\"%s\",\"driver\":\"%s\",\"fails\":%d}\n", dname, drv, fails);
    fclose(jf);
    printf("\nfails: %d\n", fails);
    return fails ? 1 : 0;
}
