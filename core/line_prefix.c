// core/line_prefix.c: see line_prefix.h.
#include "line_prefix.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int read_fd, out_fd;  // pipe's read end; the original descriptor (dup'd)
    pthread_t thread;
} Copier;

static char g_prefix[64];
static size_t g_prefix_len;
static Copier g_cp[2];
static int g_active;

static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;  // the reader went away: nothing sensible to do
        }
        p += w;
        n -= (size_t)w;
    }
}

// Whole lines only: the complete lines of one read, each with the prefix, in one write under a lock shared by both
// copiers, so that stdout and stderr going to the same place never cut into each other's lines, and the lines of one
// write(2) of the program (read whole: a pipe write of up to PIPE_BUF bytes is atomic) stay together.
static pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;
static void emit(Copier *c, const char *text, size_t len, char **tmp, size_t *cap) {
    size_t lines = 0;
    for (const char *p = text; (p = (const char *)memchr(p, '\n', len - (size_t)(p - text))) != NULL; p++) lines++;
    const size_t need = len + lines * g_prefix_len;
    if (*cap < need) {
        char *t = (char *)realloc(*tmp, 2 * need);
        if (!t) return;
        *tmp = t;
        *cap = 2 * need;
    }
    size_t o = 0, done = 0;
    while (done < len) {
        const char *nl = (const char *)memchr(text + done, '\n', len - done);
        const size_t l = (size_t)(nl - (text + done)) + 1;  // text ends with a newline: nl is never NULL here
        memcpy(*tmp + o, g_prefix, g_prefix_len);
        memcpy(*tmp + o + g_prefix_len, text + done, l);
        o += g_prefix_len + l;
        done += l;
    }
    pthread_mutex_lock(&g_write_mu);
    write_all(c->out_fd, *tmp, o);
    pthread_mutex_unlock(&g_write_mu);
}

static void *copier_main(void *arg) {
    Copier *c = (Copier *)arg;
    size_t cap = 1 << 14, len = 0, tcap = 0;
    char *buf = (char *)malloc(cap), *tmp = NULL;
    for (;;) {
        if (cap - len < 4096) {
            char *b = (char *)realloc(buf, cap * 2);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        ssize_t n = read(c->read_fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
        size_t done = 0;  // up to the last newline: the complete lines
        for (size_t i = len; i > 0; i--)
            if (buf[i - 1] == '\n') { done = i; break; }
        if (done) emit(c, buf, done, &tmp, &tcap);
        memmove(buf, buf + done, len - done);
        len -= done;
    }
    if (len && len < cap) {  // a last line without a newline: given one, so that the other stream's lines stay apart
        buf[len++] = '\n';
        emit(c, buf, len, &tmp, &tcap);
    }
    free(buf);
    free(tmp);
    close(c->read_fd);
    return NULL;
}

void line_prefix_finish(void) {
    if (!g_active) return;
    g_active = 0;
    fflush(stdout);
    fflush(stderr);
    // the pipes' write ends are fds 1 and 2: point them back at the originals, so the pipes see EOF
    for (int i = 0; i < 2; i++) {
        dup2(g_cp[i].out_fd, i + 1);
        pthread_join(g_cp[i].thread, NULL);
        close(g_cp[i].out_fd);
    }
}

int line_prefix_start(const char *prefix, char *err, size_t err_len) {
    if (g_active) { snprintf(err, err_len, "line_prefix_start: already started"); return -1; }
    if (strlen(prefix) >= sizeof g_prefix) { snprintf(err, err_len, "line_prefix_start: prefix too long"); return -1; }
    snprintf(g_prefix, sizeof g_prefix, "%s", prefix);
    g_prefix_len = strlen(g_prefix);
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; i++) {
        const int fd = i + 1;
        int p[2];
        if (pipe(p) != 0) { snprintf(err, err_len, "line_prefix_start: pipe: %s", strerror(errno)); return -1; }
        g_cp[i].out_fd = dup(fd);
        g_cp[i].read_fd = p[0];
        if (g_cp[i].out_fd < 0 || dup2(p[1], fd) < 0) {
            snprintf(err, err_len, "line_prefix_start: dup: %s", strerror(errno));
            return -1;
        }
        close(p[1]);
        if (pthread_create(&g_cp[i].thread, NULL, copier_main, &g_cp[i]) != 0) {
            dup2(g_cp[i].out_fd, fd);
            snprintf(err, err_len, "line_prefix_start: cannot start a thread");
            return -1;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);  // a pipe would make stdout fully buffered: keep progress lines timely
    g_active = 1;
    atexit(line_prefix_finish);
    return 0;
}
