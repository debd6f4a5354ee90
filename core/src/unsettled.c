/* Releases whose outcome is unknown on some server, sent again by the next
   acquisition of the name (see unsettled.h). */
#define _GNU_SOURCE
#include "client.h"
#include "conn.h"
#include "fanout.h"
#include "internal.h"
#include "quorum.h"
#include "resp.h"
#include "unsettled.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A client remembers this many; the oldest is forgotten first. */
#define RM_UNSETTLED_MAX 16

typedef struct rm_unsettled {
    uint64_t serial; /* 0: free */
    uint64_t order_key;
    uint64_t value_key; /* the owner's value, hashed */
    int64_t latch_ms;
    int64_t expires_ns; /* its latches may be gone from then on */
    bool servers[REDMUTEX_SERVERS_MAX];
    rm_unsettled_copy cmd;
} rm_unsettled;

struct rm_unsettled_list {
    uint64_t next_serial;
    rm_unsettled e[RM_UNSETTLED_MAX];
};

static void entry_clear(redmutex_client *c, rm_unsettled *e)
{
    if (!e->serial)
        return;
    free(e->cmd.data);
    e->cmd.data = NULL;
    e->serial = 0;
    atomic_fetch_sub(&c->unsettled.n, 1);
}

/* A deep copy of cmd's arguments and the latch key into out (out->data
   owns them), with the latch write that follows it. */
static bool copy_cmd(rm_unsettled_copy *out, const rm_cmd *cmd, const char *latch_key, int64_t latch_ms)
{
    if (cmd->argc > RM_UNSETTLED_ARGS)
        return false;
    size_t total = strlen(latch_key) + 1;
    for (int k = 0; k < cmd->argc; k++)
        total += cmd->argv[k] == RM_ARG_PUBLISH ? 0 : (cmd->lens ? cmd->lens[k] : strlen(cmd->argv[k])) + 1;
    char *data = malloc(total);
    if (!data)
        return false;
    out->script = cmd->script;
    out->argc = cmd->argc;
    out->data = data;
    for (int k = 0; k < cmd->argc; k++) {
        if (cmd->argv[k] == RM_ARG_PUBLISH) { /* stays the marker: each deployment's own command */
            out->argv[k] = RM_ARG_PUBLISH;
            out->lens[k] = strlen(RM_ARG_PUBLISH);
            continue;
        }
        size_t len = cmd->lens ? cmd->lens[k] : strlen(cmd->argv[k]);
        memcpy(data, cmd->argv[k], len);
        data[len] = '\0';
        out->argv[k] = data;
        out->lens[k] = len;
        data += len + 1;
    }
    memcpy(data, latch_key, strlen(latch_key) + 1);
    out->latch = data;
    snprintf(out->ms, sizeof out->ms, "%lld", (long long)latch_ms);
    const char *set[6] = {"SET", data, "0", "NX", "PX", out->ms};
    memcpy(out->set_argv, set, sizeof set);
    return true;
}

/* The latch key of a stored copy. */
static const char *latch_of(const rm_unsettled_copy *u) { return u->latch; }

static rm_unsettled *free_slot(redmutex_client *c, struct rm_unsettled_list *u)
{
    rm_unsettled *slot = &u->e[0];
    for (size_t k = 0; k < RM_UNSETTLED_MAX; k++) {
        if (!u->e[k].serial)
            return &u->e[k];
        if (u->e[k].serial < slot->serial)
            slot = &u->e[k];
    }
    entry_clear(c, slot); /* the oldest */
    return slot;
}

bool rm_unsettled_note(redmutex_client *c, const char *name, const char *value, const rm_cmd *release,
                       const char *latch_key, int64_t started_ns, int64_t latch_ms, const bool *unknown)
{
    bool any = false;
    for (size_t i = 0; i < c->n; i++)
        any = any || unknown[i];
    if (!any)
        return false;
    bool noted = false;
    rm_client_lock(c);
    if (!c->unsettled.list)
        c->unsettled.list = calloc(1, sizeof *c->unsettled.list);
    if (c->unsettled.list) {
        struct rm_unsettled_list *u = c->unsettled.list;
        rm_unsettled *slot = free_slot(c, u);
        if (copy_cmd(&slot->cmd, release, latch_key, latch_ms)) {
            slot->latch_ms = latch_ms;
            slot->serial = ++u->next_serial;
            atomic_fetch_add(&c->unsettled.n, 1);
            slot->order_key = rm_order_key(name);
            slot->value_key = rm_order_key(value);
            /* The release ran no earlier than its call started, so its latch
               lives at least until then + latch_ms (less the drift allowance). */
            slot->expires_ns = started_ns + latch_ms * RM_NS_PER_MS - rm_drift_ns(latch_ms);
            memcpy(slot->servers, unknown, c->n * sizeof *unknown);
            slot->cmd.serial = slot->serial;
            noted = true;
        }
    }
    rm_client_unlock(c);
    return noted;
}

void rm_unsettled_take(redmutex_client *c, const char *name, const char *value, rm_unsettled_cmds *out)
{
    out->n = 0;
    if (atomic_load(&c->unsettled.n) == 0)
        return;
    rm_client_lock(c);
    struct rm_unsettled_list *u = c->unsettled.list;
    uint64_t key = rm_order_key(name), vkey = rm_order_key(value);
    int64_t now = rm_now_ns();
    for (size_t k = 0; u && k < RM_UNSETTLED_MAX && out->n < RM_UNSETTLED_PER_REQ; k++) {
        rm_unsettled *e = &u->e[k];
        if (e->serial && now >= e->expires_ns)
            entry_clear(c, e);
        if (!e->serial || e->order_key != key || e->value_key != vkey)
            continue;
        rm_cmd cmd = {e->cmd.script, e->cmd.argc, e->cmd.argv, e->cmd.lens};
        if (copy_cmd(&out->copy[out->n], &cmd, latch_of(&e->cmd), e->latch_ms))
            out->copy[out->n++].serial = e->serial;
    }
    rm_client_unlock(c);
}

void rm_unsettled_cmds_free(rm_unsettled_cmds *cmds)
{
    for (size_t k = 0; k < cmds->n; k++)
        free(cmds->copy[k].data);
    cmds->n = 0;
}

void rm_unsettled_done(redmutex_client *c, const rm_unsettled_cmds *cmds, const rm_call *call, size_t first)
{
    if (cmds->n == 0)
        return;
    rm_client_lock(c);
    struct rm_unsettled_list *u = c->unsettled.list;
    for (size_t j = 0; u && j < cmds->n; j++) {
        rm_unsettled *e = NULL;
        for (size_t k = 0; k < RM_UNSETTLED_MAX && !e; k++)
            if (u->e[k].serial == cmds->copy[j].serial)
                e = &u->e[k];
        if (!e)
            continue;
        bool left = false;
        for (size_t i = 0; i < call->n; i++) {
            const rm_slot *s = &call->slots[i];
            const rm_reply *r = s->err ? NULL : s->replies[first + 2 * j + 1];
            /* OK or nil: the latch exists now, a late copy will change nothing. */
            if (r && (r->type == RM_REPLY_STATUS || r->type == RM_REPLY_NIL))
                e->servers[i] = false;
            left = left || e->servers[i];
        }
        if (!left)
            entry_clear(c, e);
    }
    rm_client_unlock(c);
}

void rm_unsettled_free(redmutex_client *c)
{
    if (!c->unsettled.list)
        return;
    for (size_t k = 0; k < RM_UNSETTLED_MAX; k++)
        entry_clear(c, &c->unsettled.list->e[k]);
    free(c->unsettled.list);
    c->unsettled.list = NULL;
}
