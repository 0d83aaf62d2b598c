/*
 * kv.c: the flashtree C library at work, checking everything it does.
 *
 * Opens a store in a fresh temporary directory, writes 1,000 records in
 * durable batches, reads them back (one by one, with ft_multi_get and
 * from 4 threads at once), deletes one, iterates both ways, provokes
 * errors (a second open of the store, bad tree names, a key too long),
 * closes, reopens and checks that the data survived. Exits non-zero at
 * the first mismatch.
 *
 * Build (see scripts/c.sh, which does this against the shared and the
 * static library and runs both):
 *   export PKG_CONFIG_PATH=target/release/pkgconfig
 *   cc -std=c11 -pthread examples/c/kv.c $(pkg-config --cflags --libs flashtree) -o kv
 */
#define _GNU_SOURCE
#include <flashtree.h>

#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RECORDS 1000
#define BATCH 250 /* at most a quarter of a worker's pool frames */
#define THREADS 4

static char root[4096];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void cleanup(void) {
    if (root[0] != '\0') {
        nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

static void fail(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "kv: FAILED: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    cleanup();
    exit(1);
}

/* Stops unless `code` is `want`, naming the call and the library's message. */
static void expect(int code, int want, const char *what) {
    if (code != want) {
        fail("%s returned %s, expected %s: %s", what, ft_status_name(code), ft_status_name(want),
             ft_last_error());
    }
}

static size_t key_of(int i, char *buf) { return (size_t)sprintf(buf, "key%05d", i); }

static size_t value_of(int i, char *buf) {
    return (size_t)sprintf(buf, "value %d: %0*d", i, i % 50, 0);
}

/* Checks that `key` holds record i's value. */
static void check_record(ft_db *db, ft_tree_id tree, int i) {
    char key[32], want[128];
    size_t key_len = key_of(i, key), want_len = value_of(i, want);
    uint8_t *value = NULL;
    size_t value_len = 0;
    expect(ft_get(db, tree, (const uint8_t *)key, key_len, &value, &value_len), FT_OK, "ft_get");
    if (value_len != want_len || memcmp(value, want, want_len) != 0) {
        fail("record %d: got %.*s, expected %s", i, (int)value_len, (const char *)value, want);
    }
    ft_free(value);
}

struct reader {
    ft_db *db;
    ft_tree_id tree;
    int first;
};

/* Reads every record from `first` on, wrapping around. */
static void *read_all(void *arg) {
    const struct reader *r = arg;
    for (int n = 0; n < RECORDS; n++) {
        int i = (r->first + n) % RECORDS;
        if (i != 42) {
            check_record(r->db, r->tree, i);
        }
    }
    return NULL;
}

/* Iterates `tree` from `start` (NULL: the first or last key); checks that
 * keys are strictly ordered and values match; returns the record count. */
static int iterate(ft_db *db, ft_tree_id tree, const char *start, int reverse, int *first_key) {
    ft_iter *iter = NULL;
    expect(ft_iter_new(db, tree, (const uint8_t *)start, start ? strlen(start) : 0, reverse, &iter),
           FT_OK, "ft_iter_new");
    char prev[FT_MAX_KEY_BYTES];
    size_t prev_len = 0;
    int count = 0, code;
    const uint8_t *key, *value;
    size_t key_len, value_len;
    while ((code = ft_iter_next(iter, &key, &key_len, &value, &value_len)) == FT_OK) {
        int i;
        char want[128], text[16];
        /* Keys are not NUL-terminated: copy one before parsing it. */
        if (key_len != 8) {
            fail("unexpected key %.*s", (int)key_len, (const char *)key);
        }
        memcpy(text, key, key_len);
        text[key_len] = '\0';
        if (sscanf(text, "key%5d", &i) != 1) {
            fail("unexpected key %s", text);
        }
        size_t want_len = value_of(i, want);
        if (value_len != want_len || memcmp(value, want, want_len) != 0) {
            fail("iterating: wrong value for %.*s", (int)key_len, (const char *)key);
        }
        if (count > 0) {
            size_t n = key_len < prev_len ? key_len : prev_len;
            int cmp = memcmp(prev, key, n);
            if (cmp == 0) {
                cmp = (prev_len > key_len) - (prev_len < key_len);
            }
            if (reverse ? cmp <= 0 : cmp >= 0) {
                fail("keys out of order: %.*s after %.*s", (int)key_len, (const char *)key,
                     (int)prev_len, prev);
            }
        } else if (first_key) {
            *first_key = i;
        }
        memcpy(prev, key, key_len);
        prev_len = key_len;
        count++;
    }
    expect(code, FT_NOT_FOUND, "ft_iter_next at the end");
    ft_iter_free(iter);
    return count;
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/flashtree-kv-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        root[0] = '\0';
        fail("mkdtemp: cannot make a temporary directory");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/store", root);
    printf("kv: flashtree %s, store in %s\n", ft_version(), path);

    ft_options options = ft_options_default();
    options.workers = 2;
    options.pool_bytes = 16u << 20; /* 4,096 frames, 2,048 per worker */
    options.wal_bytes_per_worker = 4u << 20;
    options.durability = FT_DURABILITY_SYNC;

    ft_db *db = NULL;
    expect(ft_open(path, &options, &db), FT_OK, "ft_open");
    ft_tree_id users;
    expect(ft_tree(db, "users", &users), FT_OK, "ft_tree");

    /* 1,000 records in 4 batches, each durable when ft_write returns. */
    ft_batch *batch = NULL;
    expect(ft_batch_new(db, &batch), FT_OK, "ft_batch_new");
    int batches = 0;
    for (int i = 0; i < RECORDS; i++) {
        char key[32], value[128];
        size_t key_len = key_of(i, key), value_len = value_of(i, value);
        expect(ft_batch_put(batch, users, (const uint8_t *)key, key_len, (const uint8_t *)value,
                            value_len),
               FT_OK, "ft_batch_put");
        if (ft_batch_len(batch) == BATCH) {
            expect(ft_write(db, batch, FT_WRITE_SYNC), FT_OK, "ft_write");
            expect(ft_batch_clear(batch), FT_OK, "ft_batch_clear");
            batches++;
        }
    }
    ft_batch_free(batch);

    for (int i = 0; i < RECORDS; i++) {
        check_record(db, users, i);
    }

    /* Delete one: it is gone, and deleting it again finds nothing. */
    char key42[32];
    size_t key42_len = key_of(42, key42);
    expect(ft_delete(db, users, (const uint8_t *)key42, key42_len), FT_OK, "ft_delete");
    uint8_t *value = NULL;
    size_t value_len = 0;
    expect(ft_get(db, users, (const uint8_t *)key42, key42_len, &value, &value_len), FT_NOT_FOUND,
           "ft_get of a deleted key");
    if (value != NULL) {
        fail("ft_get of a deleted key left a value");
    }
    expect(ft_delete(db, users, (const uint8_t *)key42, key42_len), FT_NOT_FOUND,
           "ft_delete of a deleted key");

    /* Several lookups at once: two present, one missing. */
    const char *want[3] = {"key00007", "absent", "key00999"};
    const uint8_t *keys[3];
    size_t key_lens[3], value_lens[3];
    uint8_t *values[3];
    for (int i = 0; i < 3; i++) {
        keys[i] = (const uint8_t *)want[i];
        key_lens[i] = strlen(want[i]);
    }
    expect(ft_multi_get(db, users, 3, keys, key_lens, values, value_lens), FT_OK, "ft_multi_get");
    if (values[0] == NULL || values[1] != NULL || values[2] == NULL) {
        fail("ft_multi_get: wrong found/missing pattern");
    }
    char expect7[128];
    if (value_lens[0] != value_of(7, expect7) || memcmp(values[0], expect7, value_lens[0]) != 0) {
        fail("ft_multi_get: wrong value for key00007");
    }
    for (int i = 0; i < 3; i++) {
        ft_free(values[i]);
    }

    /* One store, several threads. */
    pthread_t threads[THREADS];
    struct reader readers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        readers[t] = (struct reader){db, users, t * (RECORDS / THREADS)};
        if (pthread_create(&threads[t], NULL, read_all, &readers[t]) != 0) {
            fail("pthread_create");
        }
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
    }

    /* In order, both ways. */
    int first = -1;
    int forward = iterate(db, users, NULL, 0, &first);
    if (forward != RECORDS - 1 || first != 0) {
        fail("forward iteration saw %d records from %d, expected %d from 0", forward, first,
             RECORDS - 1);
    }
    int backward = iterate(db, users, "key00500", 1, &first);
    if (backward != 500 || first != 500) {
        fail("backward iteration from key00500 saw %d records from %d, expected 500 from 500",
             backward, first);
    }

    /* Errors: each has a status and a message. */
    ft_db *second = NULL;
    int code = ft_open(path, &options, &second);
    expect(code, FT_STORE_IN_USE, "a second ft_open of the store");
    printf("kv: second open: %s: %s\n", ft_status_name(code), ft_last_error());
    ft_tree_id bad;
    code = ft_tree(db, "\xff\xfe not UTF-8", &bad);
    expect(code, FT_INVALID_ARGUMENT, "ft_tree with a name that is not UTF-8");
    printf("kv: bad tree name: %s: %s\n", ft_status_name(code), ft_last_error());
    expect(ft_tree(db, "", &bad), FT_INVALID_ARGUMENT, "ft_tree with an empty name");
    uint8_t long_key[FT_MAX_KEY_BYTES + 1];
    memset(long_key, 'k', sizeof long_key);
    code = ft_put(db, users, long_key, sizeof long_key, (const uint8_t *)"v", 1);
    expect(code, FT_INVALID_ARGUMENT, "ft_put of a key too long");
    printf("kv: long key: %s: %s\n", ft_status_name(code), ft_last_error());
    expect(ft_get(NULL, users, (const uint8_t *)"k", 1, &value, &value_len), FT_INVALID_ARGUMENT,
           "ft_get on a NULL store");

    expect(ft_close(db), FT_OK, "ft_close");

    /* Reopen (without creating): everything is still there. */
    options.create_if_missing = 0;
    expect(ft_open(path, &options, &db), FT_OK, "ft_open again");
    expect(ft_tree(db, "users", &users), FT_OK, "ft_tree again");
    int after = iterate(db, users, NULL, 0, NULL);
    if (after != RECORDS - 1) {
        fail("after reopening: %d records, expected %d", after, RECORDS - 1);
    }
    for (int i = 0; i < RECORDS; i++) {
        if (i != 42) {
            check_record(db, users, i);
        }
    }
    expect(ft_get(db, users, (const uint8_t *)key42, key42_len, &value, &value_len), FT_NOT_FOUND,
           "ft_get of the deleted key after reopening");
    expect(ft_close(db), FT_OK, "ft_close again");

    cleanup();
    printf("kv: ok: %d records in %d sync batches, %d read back, 1 deleted, %d forward and %d "
           "backward in order, %d threads reading, 3 errors reported, %d records after reopening\n",
           RECORDS, batches, RECORDS, forward, backward, THREADS, after);
    return 0;
}
