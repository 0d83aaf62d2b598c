/*
 * wt_shim.c: a thin C layer over WiredTiger 3.2 (Debian libwiredtiger-dev)
 * for flashtree-peers. WiredTiger's API is a table of function pointers in
 * structs, awkward from Rust; this shim exposes plain functions.
 *
 * Contract: one wts_session per thread (WiredTiger sessions are not thread
 * safe). Each session holds one cached cursor per table ("table:tN", raw
 * byte keys and values, format "u"). Pointers returned by wts_current and
 * wts_get stay valid until the next call on the same table's cursor.
 * Return values are WiredTiger's: 0, WT_NOTFOUND, or an error code.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <wiredtiger.h>

#define WTS_TABLES_MAX 64
#define WTS_ROLLBACK_RETRIES_MAX 100000

typedef struct wts_session {
    WT_SESSION *session;
    int table_count;
    WT_CURSOR *cursors[WTS_TABLES_MAX];
} wts_session;

int wts_notfound(void) { return WT_NOTFOUND; }

const char *wts_strerror(int code) { return wiredtiger_strerror(code); }

const char *wts_version(void) { return WIREDTIGER_VERSION_STRING; }

int wts_open(const char *home, const char *config, WT_CONNECTION **out) {
    return wiredtiger_open(home, NULL, config, out);
}

int wts_close(WT_CONNECTION *conn) { return conn->close(conn, NULL); }

int wts_create_tables(WT_CONNECTION *conn, int table_count, const char *table_config) {
    WT_SESSION *session;
    char uri[32];
    int ret, table;
    if (table_count < 0 || table_count > WTS_TABLES_MAX) return EINVAL;
    if ((ret = conn->open_session(conn, NULL, NULL, &session)) != 0) return ret;
    for (table = 0; table < table_count; table++) {
        snprintf(uri, sizeof(uri), "table:t%d", table);
        if ((ret = session->create(session, uri, table_config)) != 0) break;
    }
    session->close(session, NULL);
    return ret;
}

int wts_session_open(WT_CONNECTION *conn, int table_count, wts_session **out) {
    wts_session *s;
    char uri[32];
    int ret, table;
    if (table_count < 0 || table_count > WTS_TABLES_MAX) return EINVAL;
    s = calloc(1, sizeof(*s));
    if (s == NULL) return ENOMEM;
    s->table_count = table_count;
    ret = conn->open_session(conn, NULL, "isolation=read-uncommitted", &s->session);
    if (ret != 0) { free(s); return ret; }
    for (table = 0; table < table_count; table++) {
        snprintf(uri, sizeof(uri), "table:t%d", table);
        ret = s->session->open_cursor(s->session, uri, NULL, "overwrite=true", &s->cursors[table]);
        if (ret != 0) { s->session->close(s->session, NULL); free(s); return ret; }
    }
    *out = s;
    return 0;
}

void wts_session_close(wts_session *s) {
    if (s == NULL) return;
    s->session->close(s->session, NULL); /* closes its cursors too */
    free(s);
}

static void set_key(WT_CURSOR *c, const void *key, size_t key_len) {
    WT_ITEM item;
    memset(&item, 0, sizeof(item));
    item.data = key;
    item.size = key_len;
    c->set_key(c, &item);
}

int wts_reset(wts_session *s, int table) {
    WT_CURSOR *c = s->cursors[table];
    return c->reset(c);
}

int wts_get(wts_session *s, int table, const void *key, size_t key_len,
            const void **value, size_t *value_len) {
    WT_CURSOR *c = s->cursors[table];
    WT_ITEM item;
    int ret;
    set_key(c, key, key_len);
    if ((ret = c->search(c)) != 0) return ret;
    if ((ret = c->get_value(c, &item)) != 0) return ret;
    *value = item.data;
    *value_len = item.size;
    return 0;
}

int wts_put(wts_session *s, int table, const void *key, size_t key_len,
            const void *value, size_t value_len) {
    WT_CURSOR *c = s->cursors[table];
    WT_ITEM item;
    int ret, tries;
    for (tries = 0; tries < WTS_ROLLBACK_RETRIES_MAX; tries++) {
        set_key(c, key, key_len);
        memset(&item, 0, sizeof(item));
        item.data = value;
        item.size = value_len;
        c->set_value(c, &item);
        ret = c->insert(c);
        if (ret != WT_ROLLBACK) break;
    }
    c->reset(c);
    return ret;
}

/* Removes key; WT_NOTFOUND if it did not exist. */
int wts_delete(wts_session *s, int table, const void *key, size_t key_len) {
    WT_CURSOR *c = s->cursors[table];
    int ret, tries;
    for (tries = 0; tries < WTS_ROLLBACK_RETRIES_MAX; tries++) {
        set_key(c, key, key_len);
        if ((ret = c->search(c)) != 0) break;
        ret = c->remove(c);
        if (ret != WT_ROLLBACK) break;
    }
    c->reset(c);
    return ret;
}

int wts_write_batch_with(wts_session *s, size_t count, const int *tables,
                         const void *const *keys, const size_t *key_lens,
                         const void *const *values, const size_t *value_lens,
                         const char *commit_config);

/*
 * Applies count puts and deletes (values[i] == NULL: delete keys[i]) in one
 * transaction and commits it: all or none. The commit is as durable as the
 * connection's transaction_sync setting. A conflict (WT_ROLLBACK) rolls the
 * transaction back and runs it again, as wts_put does for one write.
 */
int wts_write_batch(wts_session *s, size_t count, const int *tables,
                    const void *const *keys, const size_t *key_lens,
                    const void *const *values, const size_t *value_lens) {
    return wts_write_batch_with(s, count, tables, keys, key_lens, values, value_lens, NULL);
}

/* Makes every log record written so far durable (WT_SESSION::log_flush). */
int wts_log_sync(wts_session *s) { return s->session->log_flush(s->session, "sync=on"); }

/*
 * wts_write_batch with the commit's configuration (NULL: the connection's
 * transaction_sync; "sync=off": logged, not synced, for an early lock
 * release followed by wts_log_sync).
 */
int wts_write_batch_with(wts_session *s, size_t count, const int *tables,
                         const void *const *keys, const size_t *key_lens,
                         const void *const *values, const size_t *value_lens,
                         const char *commit_config) {
    WT_SESSION *session = s->session;
    WT_CURSOR *c;
    WT_ITEM item;
    size_t i;
    int ret, tries;
    for (i = 0; i < count; i++)
        if (tables[i] < 0 || tables[i] >= s->table_count) return EINVAL;
    for (tries = 0; tries < WTS_ROLLBACK_RETRIES_MAX; tries++) {
        if ((ret = session->begin_transaction(session, "isolation=snapshot")) != 0) return ret;
        for (i = 0; i < count && ret == 0; i++) {
            c = s->cursors[tables[i]];
            set_key(c, keys[i], key_lens[i]);
            if (values[i] != NULL) {
                memset(&item, 0, sizeof(item));
                item.data = values[i];
                item.size = value_lens[i];
                c->set_value(c, &item);
                ret = c->insert(c);
            } else {
                /* overwrite=true: removing an absent key succeeds. */
                ret = c->remove(c);
                if (ret == WT_NOTFOUND) ret = 0;
            }
            c->reset(c);
        }
        if (ret == 0) return session->commit_transaction(session, commit_config);
        session->rollback_transaction(session, NULL);
        if (ret != WT_ROLLBACK) return ret;
    }
    return ret;
}

/* Positions the cursor at the first key >= key (reverse: last key <= key). */
int wts_seek(wts_session *s, int table, const void *key, size_t key_len, int reverse) {
    WT_CURSOR *c = s->cursors[table];
    int exact = 0, ret;
    set_key(c, key, key_len);
    if ((ret = c->search_near(c, &exact)) != 0) return ret;
    if (!reverse && exact < 0) return c->next(c);
    if (reverse && exact > 0) return c->prev(c);
    return 0;
}

int wts_step(wts_session *s, int table, int reverse) {
    WT_CURSOR *c = s->cursors[table];
    return reverse ? c->prev(c) : c->next(c);
}

int wts_current(wts_session *s, int table, const void **key, size_t *key_len,
                const void **value, size_t *value_len) {
    WT_CURSOR *c = s->cursors[table];
    WT_ITEM k, v;
    int ret;
    if ((ret = c->get_key(c, &k)) != 0) return ret;
    if ((ret = c->get_value(c, &v)) != 0) return ret;
    *key = k.data;
    *key_len = k.size;
    *value = v.data;
    *value_len = v.size;
    return 0;
}
