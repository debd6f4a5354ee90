/* The driver's history: one JSON object per line on stdout, CLOCK_MONOTONIC stamps. */
#define _GNU_SOURCE
#include "driver.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_id[64] = "driver";

int64_t drv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void drv_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void drv_log_init(const char *id) { snprintf(log_id, sizeof log_id, "%s", id); }

void drv_json_escape(char *out, size_t size, const char *s)
{
    size_t j = 0;
    for (; s && *s && j + 7 < size; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            out[j++] = '\\';
            out[j++] = (char)ch;
        } else if (ch < 0x20) {
            j += (size_t)snprintf(out + j, size - j, "\\u%04x", ch);
        } else {
            out[j++] = (char)ch;
        }
    }
    out[j] = '\0';
}

static void log_line(int64_t t, int w, int64_t h, const char *ev, const char *fields, va_list ap)
    __attribute__((format(printf, 5, 0)));
static void log_line(int64_t t, int w, int64_t h, const char *ev, const char *fields, va_list ap)
{
    char body[1536];
    vsnprintf(body, sizeof body, fields, ap);
    char line[2048];
    int n = snprintf(line, sizeof line, "{\"t\":%lld,\"p\":\"%s\",\"w\":%d,\"h\":%lld,\"ev\":\"%s\"%s%s}\n",
                     (long long)t, log_id, w, (long long)h, ev, body[0] ? "," : "", body);
    if (n < 0 || (size_t)n >= sizeof line)
        n = snprintf(line, sizeof line, "{\"t\":%lld,\"p\":\"%s\",\"w\":%d,\"ev\":\"log_overflow\"}\n",
                     (long long)t, log_id, w);
    pthread_mutex_lock(&log_mu);
    fwrite(line, 1, (size_t)n, stdout);
    fflush(stdout);
    pthread_mutex_unlock(&log_mu);
}

void drv_log(int w, int64_t h, const char *ev, const char *fields, ...)
{
    int64_t t = drv_now_ns();
    va_list ap;
    va_start(ap, fields);
    log_line(t, w, h, ev, fields, ap);
    va_end(ap);
}

void drv_log_at(int64_t t, int w, int64_t h, const char *ev, const char *fields, ...)
{
    va_list ap;
    va_start(ap, fields);
    log_line(t, w, h, ev, fields, ap);
    va_end(ap);
}

const char *drv_code_name(int rc)
{
    static const char *names[] = {"OK", "EINVAL", "ENOMEM", "ETIMEDOUT", "ENOTOWNER", "ELOST",
                                  "ECONN", "EPROTOCOL", "ESERVER", "EWRONGTYPE", "EAUTH", "EFORKED",
                                  "EDUPLICATE", "EREPLICAS", "ECLOSED", "EINTR", "ELIMIT", "EUNSUPPORTED"};
    if (rc <= 0 && -rc < (int)(sizeof names / sizeof names[0]))
        return names[-rc];
    return "EUNKNOWN";
}

void drv_log_error(int w, int64_t h, const char *ev, int rc, int64_t started_ns)
{
    char msg[600];
    drv_json_escape(msg, sizeof msg, redmutex_last_error());
    drv_log(w, h, ev, "\"rc\":%d,\"err\":\"%s\",\"msg\":\"%s\",\"dur_ms\":%.3f", rc, drv_code_name(rc), msg,
            (double)(drv_now_ns() - started_ns) / 1e6);
}

void drv_log_stats(void)
{
    long fds = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.')
                fds++;
        closedir(d);
        fds--; /* the directory stream itself */
    }
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    drv_log(-1, 0, "stats", "\"fds\":%ld,\"rss_kb\":%ld", fds, resident * (sysconf(_SC_PAGESIZE) / 1024));
}

uint64_t drv_rand(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

int64_t drv_rand_between(uint64_t *s, int64_t lo, int64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + (int64_t)(drv_rand(s) % (uint64_t)(hi - lo + 1));
}
