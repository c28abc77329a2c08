/* fuzz/standalone.c: a main() for the fuzz harnesses where libFuzzer is not available (gcc, the
 * plain and ASan CTest builds). It is not coverage-guided: it replays every file given (or every
 * file of every directory given), then, for the seconds of -max_total_time=N (default 0: replay
 * only), feeds random mutations of them (bit flips, byte sets, inserts, erases, splices with
 * another input, random lengths) to the harness. Deterministic for a given -seed=S.
 *
 *   fuzz_qbytes [-max_total_time=N] [-seed=S] [-runs=R] DIR_OR_FILE...
 *
 * Prints the number of executions at the end, as libFuzzer does ("Done N runs"). A crash is the
 * harness trapping (or a sanitizer report), exactly as under libFuzzer; on a trap or a fault the
 * input is written to ./standalone-crash-input so that it can be replayed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct input {
    unsigned char *p;
    size_t n;
} input;

static input *inputs;
static size_t ninputs, capinputs;

static void add_input(const unsigned char *p, size_t n) {
    if (ninputs == capinputs) {
        capinputs = capinputs ? 2 * capinputs : 64;
        inputs = realloc(inputs, capinputs * sizeof *inputs);
        if (!inputs)
            abort();
    }
    inputs[ninputs].p = malloc(n ? n : 1);
    if (!inputs[ninputs].p)
        abort();
    if (n)
        memcpy(inputs[ninputs].p, p, n);
    inputs[ninputs].n = n;
    ninputs++;
}

static void load_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    add_input(buf, n);
}

static void load(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        load_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        load_file(full);
    }
    closedir(d);
}

static uint64_t rng;
static uint64_t next(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
}

static const unsigned char *cur_p;
static size_t cur_n;

/* On a trap or a fault: write the input being run to ./standalone-crash-input (open/write only:
 * async-signal-safe), then die of the same signal. */
static void on_crash(int sig) {
    int fd = open("standalone-crash-input", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < cur_n) {
            ssize_t w = write(fd, cur_p + off, cur_n - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        close(fd);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run(const unsigned char *p, size_t n) {
    cur_p = p;
    cur_n = n;
    LLVMFuzzerTestOneInput(p, n);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    double seconds = 0;
    long runs = -1;
    rng = 0x9E3779B97F4A7C15ULL;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "-max_total_time=", 16) == 0)
            seconds = atof(argv[i] + 16);
        else if (strncmp(argv[i], "-seed=", 6) == 0)
            rng = strtoull(argv[i] + 6, NULL, 10) | 1;
        else if (strncmp(argv[i], "-runs=", 6) == 0)
            runs = atol(argv[i] + 6);
        else if (argv[i][0] != '-')
            load(argv[i]);
    }
    signal(SIGILL, on_crash);
    signal(SIGSEGV, on_crash);
    signal(SIGABRT, on_crash);
    signal(SIGFPE, on_crash);
    if (ninputs == 0)
        add_input((const unsigned char *)"", 0);
    long execs = 0;
    for (size_t i = 0; i < ninputs; i++, execs++)
        run(inputs[i].p, inputs[i].n);
    double end = now() + seconds;
    unsigned char buf[4096];
    while ((seconds > 0 && now() < end) || (runs >= 0 && execs < runs)) {
        for (int burst = 0; burst < 64; burst++, execs++) {
            const input *in = &inputs[next() % ninputs];
            size_t n = in->n < sizeof buf ? in->n : sizeof buf;
            memcpy(buf, in->p, n);
            int k = 1 + (int)(next() % 8);
            for (int m = 0; m < k; m++) {
                switch (next() % 7) {
                case 0: /* flip a bit */
                    if (n)
                        buf[next() % n] ^= (unsigned char)(1u << (next() % 8));
                    break;
                case 1: /* set a byte to an interesting value */
                    if (n) {
                        static const unsigned char v[] = {0, 1, 0x7f, 0x80, 0xff, 0xf0, 0xe0, 2};
                        buf[next() % n] = v[next() % sizeof v];
                    }
                    break;
                case 2: /* random byte */
                    if (n)
                        buf[next() % n] = (unsigned char)next();
                    break;
                case 3: /* insert a byte */
                    if (n < sizeof buf) {
                        size_t at = n ? next() % (n + 1) : 0;
                        memmove(buf + at + 1, buf + at, n - at);
                        buf[at] = (unsigned char)next();
                        n++;
                    }
                    break;
                case 4: /* erase a byte */
                    if (n) {
                        size_t at = next() % n;
                        memmove(buf + at, buf + at + 1, n - at - 1);
                        n--;
                    }
                    break;
                case 5: /* cut */
                    if (n)
                        n = next() % (n + 1);
                    break;
                default: { /* splice the tail of another input */
                    const input *o = &inputs[next() % ninputs];
                    size_t at = n ? next() % (n + 1) : 0;
                    size_t take = o->n < sizeof buf - at ? o->n : sizeof buf - at;
                    size_t from = o->n > take ? next() % (o->n - take + 1) : 0;
                    memcpy(buf + at, o->p + from, take);
                    n = at + take;
                    break;
                }
                }
            }
            run(buf, n);
            if (runs >= 0 && execs + 1 >= runs)
                break;
        }
    }
    printf("Done %ld runs\n", execs);
    for (size_t i = 0; i < ninputs; i++)
        free(inputs[i].p);
    free(inputs);
    return 0;
}
