// core/rendezvous.c: file and TCP rendezvous for the NCCL unique id (see rendezvous.h).
#include "rendezvous.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common.h"

#define RDV_MAGIC 0x56524c53u  // "SLRV"
#define RDV_VERSION 1u
#define RDV_POLL_S 0.02

typedef struct {
    uint32_t magic, version;
    int32_t world;
    uint32_t len;
} RdvHeader;

typedef struct {
    uint32_t magic;
    int32_t rank, world;
} RdvHello;

#define ERR(...) do { if (err && n) snprintf(err, n, __VA_ARGS__); } while (0)

static void sleep_s(double s) { usleep((useconds_t)(s * 1e6)); }

int dist_parse_init(const char *spec, DistInitSpec *out, char *err, size_t n) {
    memset(out, 0, sizeof *out);
    if (!spec || !*spec) { ERR("empty --dist-init (expected file:///path, tcp://host:port, env or mpi)"); return -1; }
    if (strcmp(spec, "mpi") == 0) { out->kind = DIST_INIT_MPI; return 0; }
    if (strcmp(spec, "env") == 0) {
        const char *a = getenv("MASTER_ADDR"), *p = getenv("MASTER_PORT");
        if (!a || !*a || !p || !*p) {
            ERR("--dist-init env needs MASTER_ADDR and MASTER_PORT in the environment (have %s, %s)",
                a && *a ? a : "(unset)", p && *p ? p : "(unset)");
            return -1;
        }
        char buf[512];
        if (snprintf(buf, sizeof buf, "tcp://%s:%s", a, p) >= (int)sizeof buf) { ERR("MASTER_ADDR too long"); return -1; }
        return dist_parse_init(buf, out, err, n);
    }
    if (strncmp(spec, "file://", 7) == 0) {
        const char *p = spec + 7;
        if (!*p) { ERR("--dist-init '%s': no path after file://", spec); return -1; }
        if (strlen(p) >= sizeof out->path - 32) { ERR("--dist-init '%s': path too long", spec); return -1; }
        if (p[strlen(p) - 1] == '/') { ERR("--dist-init '%s': the path names a directory, not a file", spec); return -1; }
        out->kind = DIST_INIT_FILE;
        strcpy(out->path, p);
        return 0;
    }
    if (strncmp(spec, "tcp://", 6) == 0) {
        const char *h = spec + 6, *colon = strrchr(h, ':');
        if (!colon || colon == h) { ERR("--dist-init '%s': expected tcp://host:port", spec); return -1; }
        size_t hl = (size_t)(colon - h);
        if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') { h++; hl -= 2; }  // [ipv6]:port
        if (hl == 0 || hl >= sizeof out->host) { ERR("--dist-init '%s': bad host", spec); return -1; }
        char *end = NULL;
        errno = 0;
        long port = strtol(colon + 1, &end, 10);
        if (errno || !colon[1] || *end || port < 1 || port > 65535) {
            ERR("--dist-init '%s': port must be a number in 1..65535", spec);
            return -1;
        }
        out->kind = DIST_INIT_TCP;
        memcpy(out->host, h, hl);
        out->host[hl] = 0;
        out->port = (int)port;
        return 0;
    }
    ERR("--dist-init '%s': unknown method (expected file:///path, tcp://host:port, env or mpi)", spec);
    return -1;
}

int dist_env_int(const char *name, int *out, char *err, size_t n) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > 1000000) {
        ERR("environment variable %s='%s' is not a non-negative integer", name, s);
        return -1;
    }
    *out = (int)v;
    return 1;
}

// ---- shared file ------------------------------------------------------------------------------------
int rdv_file_publish(const char *path, int world, const void *blob, size_t len, char *err, size_t n) {
    if (len > RDV_BLOB_MAX) { ERR("rendezvous blob of %zu bytes (max %d)", len, RDV_BLOB_MAX); return -1; }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { ERR("cannot create rendezvous file %s: %s", tmp, strerror(errno)); return -1; }
    RdvHeader h = {RDV_MAGIC, RDV_VERSION, world, (uint32_t)len};
    unsigned char buf[sizeof h + RDV_BLOB_MAX];
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, blob, len);
    ssize_t w = write(fd, buf, sizeof h + len);
    if (w != (ssize_t)(sizeof h + len) || fsync(fd) != 0) {
        ERR("cannot write rendezvous file %s: %s", tmp, w < 0 ? strerror(errno) : "short write");
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        ERR("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int rdv_file_fetch(const char *path, int world, void *blob, size_t len, double timeout_s, char *err, size_t n) {
    const double t0 = sllm_time_s();
    for (;;) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            RdvHeader h;
            unsigned char buf[sizeof h + RDV_BLOB_MAX + 1];
            ssize_t r = read(fd, buf, sizeof buf);
            close(fd);
            if (r < (ssize_t)sizeof h) { ERR("rendezvous file %s is truncated (%zd bytes)", path, r); return -1; }
            memcpy(&h, buf, sizeof h);
            if (h.magic != RDV_MAGIC || h.version != RDV_VERSION) {
                ERR("%s is not a rendezvous file (magic %08x version %u)", path, h.magic, h.version);
                return -1;
            }
            if (h.world != world) {
                ERR("rendezvous file %s was written for world size %d, this job has %d (a stale file from another "
                    "job? use a fresh path)", path, h.world, world);
                return -1;
            }
            if (h.len != len || r != (ssize_t)(sizeof h + len)) {
                ERR("rendezvous file %s holds %u bytes (file %zd bytes), expected %zu", path, h.len, r, len);
                return -1;
            }
            memcpy(blob, buf + sizeof h, len);
            return 0;
        }
        if (errno != ENOENT) { ERR("cannot open rendezvous file %s: %s", path, strerror(errno)); return -1; }
        if (sllm_time_s() - t0 > timeout_s) {
            ERR("rendezvous file %s did not appear within %.0f s (did rank 0 start, with the same path?)", path,
                timeout_s);
            return -1;
        }
        sleep_s(RDV_POLL_S);
    }
}

// ---- TCP --------------------------------------------------------------------------------------------
// Reads/writes exactly len bytes before the deadline; 0 or -1.
static int io_full(int fd, void *buf, size_t len, int writing, double deadline) {
    unsigned char *p = (unsigned char *)buf;
    while (len) {
        double left = deadline - sllm_time_s();
        if (left <= 0) { errno = ETIMEDOUT; return -1; }
        struct pollfd pf = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        int pr = poll(&pf, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) { if (pr == 0) errno = ETIMEDOUT; return -1; }
        ssize_t r = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) { if (r == 0) errno = ECONNRESET; return -1; }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

int rdv_tcp_publish(int port, int world, const void *blob, size_t len, double timeout_s, char *err, size_t n) {
    if (len > RDV_BLOB_MAX) { ERR("rendezvous blob of %zu bytes (max %d)", len, RDV_BLOB_MAX); return -1; }
    const double deadline = sllm_time_s() + timeout_s;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) { ERR("socket: %s", strerror(errno)); return -1; }
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, world > 64 ? world : 64) != 0) {
        ERR("cannot listen on TCP port %d: %s (port in use? pick another MASTER_PORT / tcp:// port)", port,
            strerror(errno));
        close(ls);
        return -1;
    }
    unsigned char *served = (unsigned char *)calloc((size_t)world, 1);
    if (!served) { close(ls); ERR("out of memory"); return -1; }
    int left = world - 1, rc = 0;
    RdvHeader h = {RDV_MAGIC, RDV_VERSION, world, (uint32_t)len};
    while (left > 0) {
        double rem = deadline - sllm_time_s();
        struct pollfd pf = {ls, POLLIN, 0};
        int pr = rem > 0 ? poll(&pf, 1, (int)(rem * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) {
            char missing[256] = "";
            size_t used = 0;
            for (int r = 1; r < world && used + 16 < sizeof missing; r++)
                if (!served[r]) used += (size_t)snprintf(missing + used, sizeof missing - used, " %d", r);
            ERR("TCP rendezvous on port %d: %d of %d ranks did not connect within %.0f s (missing:%s)", port, left,
                world - 1, timeout_s, missing);
            rc = -1;
            break;
        }
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) continue;
        RdvHello hi;
        if (io_full(fd, &hi, sizeof hi, 0, deadline) != 0 || hi.magic != RDV_MAGIC) { close(fd); continue; }
        if (hi.world != world || hi.rank < 1 || hi.rank >= world || served[hi.rank]) {
            RdvHeader bad = {RDV_MAGIC, RDV_VERSION, world, 0};
            io_full(fd, &bad, sizeof bad, 1, deadline);  // the peer reports the mismatch
            fprintf(stderr, "warning: TCP rendezvous: refused a peer claiming rank %d of world %d (%s)\n", hi.rank,
                    hi.world, hi.world != world ? "other world size" : "rank out of range or already served");
            close(fd);
            continue;
        }
        if (io_full(fd, &h, sizeof h, 1, deadline) == 0 && io_full(fd, (void *)blob, len, 1, deadline) == 0) {
            served[hi.rank] = 1;
            left--;
        }
        close(fd);
    }
    free(served);
    close(ls);
    return rc;
}

int rdv_tcp_fetch(const char *host, int port, int rank, int world, void *blob, size_t len, double timeout_s,
                  char *err, size_t n) {
    const double deadline = sllm_time_s() + timeout_s;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    const char *last = "no attempt";
    char lastbuf[256];
    while (sllm_time_s() < deadline) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(host, ps, &hints, &res);
        if (g != 0) {
            snprintf(lastbuf, sizeof lastbuf, "cannot resolve %s: %s", host, gai_strerror(g));
            last = lastbuf;
            sleep_s(0.2);
            continue;
        }
        int fd = -1;
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
            if (fd < 0) continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
                snprintf(lastbuf, sizeof lastbuf, "connect to %s:%d: %s", host, port, strerror(errno));
                last = lastbuf;
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(res);
        if (fd < 0) { sleep_s(0.1); continue; }
        RdvHello hi = {RDV_MAGIC, rank, world};
        RdvHeader h;
        if (io_full(fd, &hi, sizeof hi, 1, deadline) != 0 || io_full(fd, &h, sizeof h, 0, deadline) != 0) {
            snprintf(lastbuf, sizeof lastbuf, "exchange with %s:%d: %s", host, port, strerror(errno));
            last = lastbuf;
            close(fd);
            sleep_s(0.1);
            continue;
        }
        if (h.magic != RDV_MAGIC || h.version != RDV_VERSION || h.world != world || h.len != len) {
            close(fd);
            ERR("TCP rendezvous %s:%d: rank 0 serves world size %d and %u bytes, this rank expects world %d and %zu "
                "bytes (another job on this port, or a rank given twice?)", host, port, h.world, h.len, world, len);
            return -1;
        }
        int r = io_full(fd, blob, len, 0, deadline);
        close(fd);
        if (r == 0) return 0;
        snprintf(lastbuf, sizeof lastbuf, "reading the id from %s:%d: %s", host, port, strerror(errno));
        last = lastbuf;
    }
    ERR("TCP rendezvous with %s:%d failed within %.0f s (last: %s; did rank 0 start?)", host, port, timeout_s, last);
    return -1;
}
