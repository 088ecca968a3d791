// dataloader/shard.c: llm.c-compatible .bin token shards: streaming writer and validating mmap reader.
#include "shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(char *err, size_t errn, const char *fmt, ...) {
    if (err && errn) { va_list ap; va_start(ap, fmt); vsnprintf(err, errn, fmt, ap); va_end(ap); }
    return -1;
}

int shard_token_bytes_for_vocab(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

struct ShardWriter {
    FILE *f;
    char path[1024], tmp[1100];
    int token_bytes;
    uint64_t count;
    uint8_t buf[1 << 16];
};

ShardWriter *shard_writer_open(const char *path, int token_bytes, char *err, size_t errn) {
    if (token_bytes != 2 && token_bytes != 4) { fail(err, errn, "shard %s: token width %d bytes, expected 2 or 4", path, token_bytes); return NULL; }
    if (strlen(path) >= 1024) { fail(err, errn, "shard path too long: %s", path); return NULL; }
    ShardWriter *w = calloc(1, sizeof *w);
    if (!w) { fail(err, errn, "out of memory opening shard %s", path); return NULL; }
    strcpy(w->path, path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    w->token_bytes = token_bytes;
    w->f = fopen(w->tmp, "wb");
    if (!w->f) { fail(err, errn, "cannot create shard %s: %s", w->tmp, strerror(errno)); free(w); return NULL; }
    int32_t header[SHARD_HEADER_INTS] = {0};  // count patched on close
    header[0] = token_bytes == 2 ? SHARD_MAGIC_U16 : SHARD_MAGIC_U32;
    header[1] = token_bytes == 2 ? SHARD_VERSION_U16 : SHARD_VERSION_U32;
    if (fwrite(header, 4, SHARD_HEADER_INTS, w->f) != SHARD_HEADER_INTS) {
        fail(err, errn, "cannot write header of %s: %s", w->tmp, strerror(errno));
        fclose(w->f); unlink(w->tmp); free(w); return NULL;
    }
    return w;
}

int shard_writer_write(ShardWriter *w, const int32_t *tokens, size_t n, char *err, size_t errn) {
    uint32_t maxv = w->token_bytes == 2 ? 65535u : 0x7fffffffu;
    size_t per = sizeof w->buf / (size_t)w->token_bytes;
    for (size_t i = 0; i < n; i += per) {
        size_t m = n - i < per ? n - i : per;
        for (size_t j = 0; j < m; j++) {
            int32_t t = tokens[i + j];
            if (t < 0 || (uint32_t)t > maxv)
                return fail(err, errn, "shard %s: token %d at index %llu does not fit a %d-byte token (0..%u)",
                            w->path, t, (unsigned long long)(w->count + i + j), w->token_bytes, maxv);
            if (w->token_bytes == 2) { uint16_t v = (uint16_t)t; memcpy(w->buf + 2 * j, &v, 2); }
            else { uint32_t v = (uint32_t)t; memcpy(w->buf + 4 * j, &v, 4); }
        }
        if (fwrite(w->buf, (size_t)w->token_bytes, m, w->f) != m)
            return fail(err, errn, "write error on %s: %s", w->tmp, strerror(errno));
    }
    w->count += n;
    return 0;
}

uint64_t shard_writer_count(const ShardWriter *w) { return w->count; }

void shard_writer_abort(ShardWriter *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    unlink(w->tmp);
    free(w);
}

int shard_writer_close(ShardWriter *w, char *err, size_t errn) {
    int rc = 0;
    if (w->count > 0x7fffffffull) {
        rc = fail(err, errn, "shard %s: %llu tokens, at most 2^31-1 allowed", w->path, (unsigned long long)w->count);
    } else {
        int32_t cnt = (int32_t)w->count;
        if (fseek(w->f, 8, SEEK_SET) != 0 || fwrite(&cnt, 4, 1, w->f) != 1 || fflush(w->f) != 0 ||
            fsync(fileno(w->f)) != 0)
            rc = fail(err, errn, "cannot finish shard %s: %s", w->tmp, strerror(errno));
    }
    if (fclose(w->f) != 0 && rc == 0) rc = fail(err, errn, "cannot close %s: %s", w->tmp, strerror(errno));
    w->f = NULL;
    if (rc == 0 && rename(w->tmp, w->path) != 0) rc = fail(err, errn, "cannot rename %s to %s: %s", w->tmp, w->path, strerror(errno));
    if (rc != 0) unlink(w->tmp);
    free(w);
    return rc;
}

int shard_write(const char *path, const int32_t *tokens, size_t n, int token_bytes, char *err, size_t errn) {
    ShardWriter *w = shard_writer_open(path, token_bytes, err, errn);
    if (!w) return -1;
    if (shard_writer_write(w, tokens, n, err, errn) != 0) { shard_writer_abort(w); return -1; }
    return shard_writer_close(w, err, errn);
}

// ---- reader

int shard_open(Shard *s, const char *path, int vocab_size, char *err, size_t errn) {
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fail(err, errn, "cannot open shard %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return fail(err, errn, "cannot stat shard %s: %s", path, strerror(errno)); }
    size_t size = (size_t)st.st_size;
    if (size < SHARD_HEADER_BYTES) {
        close(fd);
        return fail(err, errn, "shard %s is truncated: %zu bytes, shorter than the %d-byte header", path, size, SHARD_HEADER_BYTES);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return fail(err, errn, "cannot mmap shard %s: %s", path, strerror(errno));
    int32_t h[3];
    memcpy(h, map, sizeof h);
    int tb;
    if (h[0] == SHARD_MAGIC_U16) {
        tb = 2;
        if (h[1] != SHARD_VERSION_U16) { munmap(map, size); return fail(err, errn, "shard %s: bad version %d at byte offset 4 (magic %d expects version %d)", path, h[1], h[0], SHARD_VERSION_U16); }
    } else if (h[0] == SHARD_MAGIC_U32) {
        tb = 4;
        if (h[1] != SHARD_VERSION_U32) { munmap(map, size); return fail(err, errn, "shard %s: bad version %d at byte offset 4 (magic %d expects version %d)", path, h[1], h[0], SHARD_VERSION_U32); }
    } else {
        munmap(map, size);
        return fail(err, errn, "shard %s: bad magic %d at byte offset 0 (expected %d for uint16 tokens or %d for uint32 tokens); not an llm.c token shard",
                    path, h[0], SHARD_MAGIC_U16, SHARD_MAGIC_U32);
    }
    if (h[2] < 0) { munmap(map, size); return fail(err, errn, "shard %s: negative token count %d at byte offset 8", path, h[2]); }
    uint64_t ntok = (uint64_t)h[2];
    uint64_t want = SHARD_HEADER_BYTES + ntok * (uint64_t)tb;
    if ((uint64_t)size != want) {
        munmap(map, size);
        return fail(err, errn, "shard %s is %s: file has %zu bytes but the header says %llu tokens x %d bytes + %d header = %llu bytes",
                    path, (uint64_t)size < want ? "truncated" : "too long (trailing bytes)", size,
                    (unsigned long long)ntok, tb, SHARD_HEADER_BYTES, (unsigned long long)want);
    }
    snprintf(s->path, sizeof s->path, "%s", path);
    s->token_bytes = tb; s->num_tokens = ntok; s->map = map; s->map_len = size;
    s->tokens = (const uint8_t *)map + SHARD_HEADER_BYTES;
    if (vocab_size > 0) {
        for (uint64_t i = 0; i < ntok; i++) {
            uint32_t t = shard_token(s, i);
            if (t >= (uint32_t)vocab_size) {
                shard_close(s);
                return fail(err, errn, "shard %s: token %u at index %llu (byte offset %llu) is out of range: vocab size is %d",
                            path, t, (unsigned long long)i, (unsigned long long)(SHARD_HEADER_BYTES + i * tb), vocab_size);
            }
        }
    }
    if (ntok * (uint64_t)tb > (1u << 20)) madvise(map, size, MADV_RANDOM);
    return 0;
}

void shard_close(Shard *s) {
    if (s->map) munmap(s->map, s->map_len);
    memset(s, 0, sizeof *s);
}

void shard_read_tokens(const Shard *s, uint64_t start, size_t n, int32_t *out) {
    if (s->token_bytes == 2) {
        const uint8_t *p = s->tokens + 2 * start;
        for (size_t i = 0; i < n; i++) { uint16_t v; memcpy(&v, p + 2 * i, 2); out[i] = v; }
    } else {
        const uint8_t *p = s->tokens + 4 * start;
        for (size_t i = 0; i < n; i++) { uint32_t v; memcpy(&v, p + 4 * i, 4); out[i] = (int32_t)v; }
    }
}

uint32_t shard_max_token(const Shard *s) {
    uint32_t m = 0;
    for (uint64_t i = 0; i < s->num_tokens; i++) { uint32_t t = shard_token(s, i); if (t > m) m = t; }
    return m;
}
