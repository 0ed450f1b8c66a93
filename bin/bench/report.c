/*  report.c: figures (min, median, max over repetitions), and each
    suite's report: rows for --json FILE, points for --plot FILE.svg
    (gnuplot, when installed).  */
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <rdma/fabric.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static int
s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

double
pkb_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, s_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double
pkb_quantile(double *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, s_cmp_double);
    size_t i = (size_t) (q * (double) n);
    return v[i < n ? i : n - 1];
}

pkb_fig_t
pkb_fig(double *v, size_t n)
{
    pkb_fig_t f = { 0, 0, 0, n > 0 };
    for (size_t i = 0; i < n; i++)
        f.valid &= !isnan(v[i]);
    if (f.valid) {
        f.med = pkb_median(v, n);
        f.min = v[0];
        f.max = v[n - 1];
    }
    return f;
}

const char *
pkb_fig_str(pkb_fig_t f, const char *fmt, char *buf, size_t size)
{
    if (!f.valid) {
        snprintf(buf, size, "n/a");
        return buf;
    }
    char a[32], b[32], c[32];
    if (!fmt)
        fmt = "%g";     //  a caller's NULL; and says so to gcc -O1 -fsanitize
    snprintf(a, sizeof a, fmt, f.med);
    snprintf(b, sizeof b, fmt, f.min);
    snprintf(c, sizeof c, fmt, f.max);
    snprintf(buf, size, "%s [%s..%s]", a, b, c);
    return buf;
}

json_t *
pkb_fig_json(pkb_fig_t f)
{
    if (!f.valid)
        return json_null();
    return json_pack("{s:f, s:f, s:f}", "min", f.min, "median", f.med, "max", f.max);
}

const char *
pkb_fabric_version(void)
{
    static char v[32];
    uint32_t ver = fi_version();
    snprintf(v, sizeof v, "%u.%u", FI_MAJOR(ver), FI_MINOR(ver));
    return v;
}

//  --------------------------------------------------------------------------

typedef struct {
    char series[64];
    uint64_t block;
    double gbps;
} s_point_t;

struct pkb_report {
    const pkb_opts_t *opts;
    json_t *root, *rows;
    s_point_t *points;
    size_t npoints;
};

static json_t *
s_num_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

static json_t *
s_machine(const char *provider)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    if (f)
        fclose(f);
    struct utsname u;
    uname(&u);
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    json_t *m = json_pack("{s:I, s:s, s:s, s:s, s:s, s:s, s:I}", "cpus",
                          (json_int_t) sysconf(_SC_NPROCESSORS_ONLN), "model", model, "kernel",
                          u.release, "libfabric", pkb_fabric_version(), "provider",
                          provider ? provider : "none", "date", date, "mem_available",
                          (json_int_t) pkb_mem_available());
    //  The suites that move bytes or requests between processes: what a
    //  wake costs bounds their figures (wake.c), and it moves between
    //  days on one VM (a ZeroMQ echo took 36 µs one day, 100 another).
    double same, cross;
    int rc = m && provider ? pkb_wake_us(&same, &cross) : 0;
    if (rc < 0)
        fprintf(stderr, "p2pkv-bench: what a wake costs was not measured: %s\n", strerror(-rc));
    else if (m && provider) {
        json_object_set_new(m, "wake_us", json_pack("{s:o, s:o}", "same_cpu", s_num_or_null(same),
                                                     "cross_cpu", s_num_or_null(cross)));
        printf("machine: waking a sleeping process takes %.1f us on its core", same);
        if (!isnan(cross))
            printf(", %.1f us across two", cross);
        printf(" (pipe ping-pong; a ZeroMQ round trip crosses five or six wakes)\n");
    }
    return m;
}

pkb_report_t *
pkb_report_new(const pkb_opts_t *opts, const char *provider)
{
    pkb_report_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->opts = opts;
    self->rows = json_array();
    self->root = json_pack("{s:s, s:b, s:o, s:o}", "suite", opts->suite, "quick", opts->quick,
                           "machine", s_machine(provider), "rows", self->rows);
    return self;
}

json_t *
pkb_report_row(pkb_report_t *self)
{
    json_t *row = json_object();
    json_array_append_new(self->rows, row);
    return row;
}

void
pkb_report_note(pkb_report_t *self, const char *key, json_t *value)
{
    json_object_set_new(self->root, key, value);
}

void
pkb_report_point(pkb_report_t *self, const char *series, uint64_t block, double gbps)
{
    s_point_t *p = realloc(self->points, (self->npoints + 1) * sizeof *p);
    if (!p)
        return;
    self->points = p;
    p = &self->points[self->npoints++];
    snprintf(p->series, sizeof p->series, "%s", series);
    p->block = block;
    p->gbps = gbps;
}

//  gnuplot: one line per series, GB/s against block size (KiB, log 2).
static int
s_plot(pkb_report_t *self, const char *path)
{
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "p2pkv-bench: --plot: gnuplot is not installed (Debian package "
                "gnuplot-nox); no plot written\n");
        return 0;
    }
    if (self->npoints == 0) {
        fprintf(stderr, "p2pkv-bench: --plot: suite %s has no GB/s figures to plot\n",
                self->opts->suite);
        return 0;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gnuplot");
    FILE *g = popen(cmd, "w");
    if (!g)
        return -errno;
    fprintf(g, "set terminal svg size 800,500 dynamic\nset output '%s'\n"
            "set title 'p2pkv-bench %s: GB/s against block size'\n"
            "set xlabel 'block size (KiB)'\nset ylabel 'GB/s'\nset logscale x 2\n"
            "set key left top\nset grid\n", path, self->opts->suite);
    //  series in order of first appearance
    const char *names[64];
    size_t nn = 0;
    for (size_t i = 0; i < self->npoints && nn < 64; i++) {
        bool seen = false;
        for (size_t j = 0; j < nn; j++)
            seen |= strcmp(names[j], self->points[i].series) == 0;
        if (!seen)
            names[nn++] = self->points[i].series;
    }
    for (size_t j = 0; j < nn; j++) {
        fprintf(g, "$d%zu << EOD\n", j);
        for (size_t i = 0; i < self->npoints; i++)
            if (strcmp(names[j], self->points[i].series) == 0)
                fprintf(g, "%llu %.4f\n", (unsigned long long) (self->points[i].block >> 10),
                        self->points[i].gbps);
        fprintf(g, "EOD\n");
    }
    fprintf(g, "plot ");
    for (size_t j = 0; j < nn; j++)
        fprintf(g, "%s$d%zu using 1:2 with linespoints title '%s'", j ? ", " : "", j,
                names[j]);
    fprintf(g, "\n");
    int rc = pclose(g);
    if (rc != 0) {
        fprintf(stderr, "p2pkv-bench: --plot: gnuplot failed (status %d)\n", rc);
        return -EIO;
    }
    printf("plot: %s\n", path);
    return 0;
}

int
pkb_report_finish(pkb_report_t *self)
{
    int rc = 0;
    if (self->opts->json) {
        if (json_dump_file(self->root, self->opts->json, JSON_INDENT(1)) != 0) {
            fprintf(stderr, "p2pkv-bench: --json: cannot write %s\n", self->opts->json);
            rc = -EIO;
        }
        else
            printf("json: %s\n", self->opts->json);
    }
    if (self->opts->plot && rc == 0)
        rc = s_plot(self, self->opts->plot);
    return rc;
}

void
pkb_report_destroy(pkb_report_t **self_p)
{
    if (!*self_p)
        return;
    json_decref((*self_p)->root);
    free((*self_p)->points);
    free(*self_p);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Tables: medians on one line, [min..max] under them.

void
pkb_table_head(const char *const *names, const int *w, size_t n)
{
    printf(" ");
    for (size_t i = 0; i < n; i++)
        printf(" %*s", w[i], names[i]);
    printf("\n");
}

void
pkb_table_row(const char *const *params, const int *pw, size_t np, const pkb_fig_t *figs,
              const char *const *fmts, const int *fw, size_t nf)
{
    char a[160], b[64], c[64];
    printf(" ");
    for (size_t i = 0; i < np; i++)
        printf(" %*s", pw[i], params[i]);
    for (size_t i = 0; i < nf; i++) {
        if (figs[i].valid)
            snprintf(a, sizeof a, fmts[i], figs[i].med);
        printf(" %*s", fw[i], figs[i].valid ? a : "n/a");
    }
    printf("\n ");
    for (size_t i = 0; i < np; i++)
        printf(" %*s", pw[i], "");
    for (size_t i = 0; i < nf; i++) {
        a[0] = '\0';
        if (figs[i].valid) {
            snprintf(b, sizeof b, fmts[i], figs[i].min);
            snprintf(c, sizeof c, fmts[i], figs[i].max);
            snprintf(a, sizeof a, "[%s..%s]", b, c);
        }
        printf(" %*s", fw[i], a);
    }
    printf("\n");
    fflush(stdout);
}
