/* Renewal batches routed by hash slot (renew.h). */
#define _GNU_SOURCE
#include "client.h"
#include "deploy.h"
#include "fanout.h"
#include "handle.h"
#include "holds.h"
#include "internal.h"
#include "kind.h"
#include "renew.h"
#include "scripts.h"
#include "slots.h"
#include "topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where hold j's answer from deployment i is: target, command, element (-1:
   nowhere); in the follow-up call when followed (an ASK followed). */
typedef struct renew_at {
    int target, cmd, elem;
    bool followed;
} renew_at;

/* ASK answers followed at once (rm_renew_plan_follow): a second call to the
   nodes they named, each command behind ASKING. */
typedef struct renew_follow {
    rm_call call;
    bool begun;
    rm_req *reqs; /* per follow-up target */
    rm_cmd *cmds; /* their commands */
    int *wait_of; /* per follow-up target: its WAIT's command index, -1 without */
} renew_follow;

/* One command answered ASK: where it went (target t, command m), and where it goes again. */
typedef struct renew_asked {
    int t, m;
    size_t dep;
    rm_server *node;
    int x, pos; /* follow-up target and command */
} renew_asked;

struct rm_renew_plan {
    size_t k, n;          /* holds, deployments */
    renew_at *at;         /* k * n */
    rm_req *reqs;         /* per target */
    rm_cmd *cmds;         /* every command of every cluster target */
    const char **argv;    /* their arguments */
    char (*nums)[24];     /* their key counts */
    int *wait_of;         /* per target: its WAIT's command index, -1 without */
    renew_follow *follow; /* the ASK follow-up, or NULL */
};

/* Hold order for one cluster deployment: by node, then slot. */
typedef struct renew_key {
    rm_server *node;
    int slot;
    size_t j;
} renew_key;

static int key_cmp(const void *a, const void *b)
{
    const renew_key *x = a, *y = b;
    if (x->node != y->node)
        return x->node < y->node ? -1 : 1;
    return x->slot != y->slot ? (x->slot < y->slot ? -1 : 1) : (x->j < y->j ? -1 : x->j > y->j);
}

/* Targets and commands a cluster deployment's keys make (keys sorted). */
static void count_groups(const renew_key *keys, size_t k, size_t *targets, size_t *cmds)
{
    for (size_t a = 0; a < k; a++) {
        if (!keys[a].node)
            continue;
        bool new_node = a == 0 || keys[a].node != keys[a - 1].node;
        *targets += new_node;
        *cmds += new_node || keys[a].slot != keys[a - 1].slot;
    }
}

/* One RENEW call for the holds keys[a..b) (one slot): its arguments at argv. */
static rm_cmd renew_cmd(rm_hold **batch, const renew_key *keys, size_t a, size_t b, const char *lease,
                        const char **argv, char *num, const char *const *tagged)
{
    size_t m = b - a;
    snprintf(num, 24, "%zu", m);
    argv[0] = num;
    for (size_t x = 0; x < m; x++) {
        argv[1 + x] = batch[keys[a + x].j]->lock->name;
        argv[2 + m + x] = tagged[keys[a + x].j];
    }
    argv[1 + m] = lease;
    return (rm_cmd){RM_SCRIPT_RENEW, (int)(2 + 2 * m), argv, NULL};
}

/* Sorts deployment i's holds by node and slot. */
static void cluster_keys(redmutex_client *c, size_t i, rm_hold **batch, size_t k, renew_key *keys)
{
    for (size_t j = 0; j < k; j++) {
        const char *name = batch[j]->lock->name;
        keys[j].slot = rm_keyslot(name, strlen(name));
        keys[j].node = rm_deploy_route(NULL, c, i, keys[j].slot); /* NULL: no master, no answer */
        keys[j].j = j;
    }
    qsort(keys, k, sizeof *keys, key_cmp);
}

typedef struct plan_fill {
    size_t t, cmd, argv; /* next free target, command, argument */
} plan_fill;

/* Deployment i's cluster targets, from its sorted keys. */
static void fill_cluster(rm_renew_plan *p, rm_call *call, size_t i, rm_hold **batch, const renew_key *keys,
                         const rm_req *whole, const char *lease, const char *const *tagged, plan_fill *f)
{
    size_t k = p->k;
    for (size_t a = 0; a < k;) {
        if (!keys[a].node) {
            a++;
            continue;
        }
        rm_slot *s = &call->slots[f->t];
        rm_req *req = &p->reqs[f->t];
        s->dep = i;
        s->fixed_node = keys[a].node;
        s->req = req;
        req->many = &p->cmds[f->cmd];
        size_t first_cmd = f->cmd;
        while (a < k && keys[a].node == s->fixed_node) {
            size_t b = a;
            while (b < k && keys[b].node == keys[a].node && keys[b].slot == keys[a].slot)
                b++;
            for (size_t x = a; x < b; x++)
                p->at[keys[x].j * p->n + i] = (renew_at){(int)f->t, (int)(f->cmd - first_cmd), (int)(x - a), false};
            p->cmds[f->cmd] = renew_cmd(batch, keys, a, b, lease, &p->argv[f->argv], p->nums[f->cmd], tagged);
            f->argv += 2 + 2 * (b - a);
            f->cmd++;
            a = b;
        }
        p->wait_of[f->t] = -1;
        if (whole->ncmds > 1) { /* the replicas' WAIT, once per node */
            p->wait_of[f->t] = (int)(f->cmd - first_cmd);
            p->cmds[f->cmd++] = whole->cmds[1];
        }
        req->ncmds = f->cmd - first_cmd;
        f->t++;
    }
}

/* Sizes the plan: targets, commands and arguments. */
static rm_renew_plan *plan_alloc(redmutex_client *c, size_t k, size_t targets, size_t cmds)
{
    rm_renew_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->k = k;
    p->n = c->n;
    p->at = malloc(k * c->n * sizeof *p->at);
    p->reqs = calloc(targets, sizeof *p->reqs);
    p->cmds = calloc(cmds + targets, sizeof *p->cmds);
    p->argv = calloc(2 * k * c->n + 2 * cmds + 1, sizeof *p->argv);
    p->nums = calloc(cmds + targets + 1, sizeof *p->nums);
    p->wait_of = calloc(targets, sizeof *p->wait_of);
    if (!p->at || !p->reqs || !p->cmds || !p->argv || !p->nums || !p->wait_of) {
        rm_renew_plan_free(p);
        return NULL;
    }
    for (size_t x = 0; x < k * c->n; x++)
        p->at[x] = (renew_at){-1, -1, -1, false};
    return p;
}

rm_renew_plan *rm_renew_plan_make(redmutex_client *c, rm_hold **batch, size_t k, const rm_req *whole, const char *lease,
                                  rm_call *call)
{
    /* whole's RENEW carries each hold's tagged value as its ARGV. */
    const char *const *tagged = whole->cmds[0].argv + 2 + k;
    renew_key *keys = malloc(c->n * k * sizeof *keys);
    if (!keys)
        return NULL;
    size_t targets = 0, cmds = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (!rm_deploy_is_cluster(c, i)) {
            targets++;
            continue;
        }
        cluster_keys(c, i, batch, k, keys + i * k);
        count_groups(keys + i * k, k, &targets, &cmds);
    }
    rm_renew_plan *p = plan_alloc(c, k, targets, cmds);
    if (!p || rm_call_begin_targets(NULL, call, c, targets) != 0) {
        free(keys);
        rm_renew_plan_free(p);
        return NULL;
    }
    plan_fill f = {0, 0, 0};
    for (size_t i = 0; i < c->n; i++) {
        if (rm_deploy_is_cluster(c, i)) {
            fill_cluster(p, call, i, batch, keys + i * k, whole, lease, tagged, &f);
            continue;
        }
        call->slots[f.t].dep = i;
        call->slots[f.t].req = whole;
        p->wait_of[f.t] = whole->ncmds > 1 ? 1 : -1;
        for (size_t j = 0; j < k; j++)
            p->at[j * c->n + i] = (renew_at){(int)f.t, 0, (int)j, false};
        f.t++;
    }
    free(keys);
    return p;
}

/* Whether slot s's WAIT (its command wait_of; -1: none) confirmed the replicas it asked its node for. */
static bool replicas_ok(const rm_slot *s, int wait_of)
{
    if (wait_of < 0)
        return true;
    const rm_reply *w = s->replies[wait_of];
    return w && w->type == RM_REPLY_INTEGER && w->integer >= s->wait_need;
}

void rm_renew_plan_count(const rm_renew_plan *p, const rm_call *call, size_t j, size_t *yes, size_t *no, bool *again,
                         bool (*same_life)(void *ud, size_t i), void *ud)
{
    *yes = *no = 0;
    *again = false;
    for (size_t i = 0; i < p->n; i++) {
        renew_at at = p->at[j * p->n + i];
        if (at.target < 0)
            continue;
        const rm_slot *s = at.followed ? &p->follow->call.slots[at.target] : &call->slots[at.target];
        int wait_of = at.followed ? p->follow->wait_of[at.target] : p->wait_of[at.target];
        const rm_reply *r = s->status == RM_SLOT_DONE && !s->err ? s->replies[at.cmd] : NULL;
        if (r && r->type == RM_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0) {
            *again = true; /* not a failure: the slot is elsewhere now (the map knows where) */
            continue;
        }
        if (!r || r->type != RM_REPLY_ARRAY || (size_t)at.elem >= r->elements ||
            r->element[at.elem]->type != RM_REPLY_INTEGER || !replicas_ok(s, wait_of))
            continue;
        /* A cluster's answer is the key's own, wherever the slot lives now. */
        bool life = rm_deploy_is_cluster(call->c, i) || same_life(ud, i);
        if (r->element[at.elem]->integer == 1 && life)
            (*yes)++;
        else
            (*no)++;
    }
}

/* The commands of call answered ASK, each with the node to ask (NULL, *n 0: none, or no memory). */
static renew_asked *collect_asks(rm_call *call, size_t *n)
{
    renew_asked *asked = NULL;
    size_t cap = 0;
    *n = 0;
    for (size_t t = 0; t < call->n; t++) {
        rm_slot *s = &call->slots[t];
        if (!s->fixed_node || s->status != RM_SLOT_DONE || s->err)
            continue;
        for (size_t m = 0; m < s->req->ncmds; m++) {
            const rm_reply *r = s->replies[m];
            char host[256];
            int slot, port;
            if (!r || r->type != RM_REPLY_ERROR || rm_topo_read_redirect(r->str, &slot, host, &port) != 2)
                continue;
            rm_server *node = rm_deploy_asked(call->c, s->dep, host[0] ? host : s->fixed_node->ep.host, port);
            if (*n == cap) {
                cap = cap ? 2 * cap : 8;
                renew_asked *more = node ? realloc(asked, cap * sizeof *asked) : NULL;
                if (!more) {
                    free(asked);
                    *n = 0;
                    return NULL; /* not followed: those holds retry later */
                }
                asked = more;
            }
            asked[(*n)++] = (renew_asked){(int)t, (int)m, s->dep, node, -1, -1};
        }
    }
    return asked;
}

/* Groups the asked commands by node into follow-up targets (asked[].x, .pos); returns how many targets. */
static size_t group_asks(renew_asked *asked, size_t n, size_t *count)
{
    size_t nx = 0;
    for (size_t a = 0; a < n; a++) {
        for (size_t b = 0; b < a && asked[a].x < 0; b++)
            if (asked[b].dep == asked[a].dep && asked[b].node == asked[a].node)
                asked[a].x = asked[b].x;
        if (asked[a].x < 0)
            asked[a].x = (int)nx++;
        asked[a].pos = (int)count[asked[a].x]++;
    }
    return nx;
}

/* Builds the follow-up's requests: each target's commands, then the WAIT its first target carried. */
static bool follow_build(rm_renew_plan *p, renew_follow *f, const rm_call *call, const renew_asked *asked, size_t n,
                         size_t nx, const size_t *count)
{
    f->reqs = calloc(nx, sizeof *f->reqs);
    f->cmds = calloc(n + nx, sizeof *f->cmds);
    f->wait_of = malloc(nx * sizeof *f->wait_of);
    size_t *off = calloc(nx, sizeof *off);
    bool ok = f->reqs && f->cmds && f->wait_of && off;
    for (size_t x = 0, next = 0; ok && x < nx; x++) {
        off[x] = next;
        f->reqs[x].many = &f->cmds[next];
        f->reqs[x].ncmds = count[x];
        f->wait_of[x] = -1;
        next += count[x] + 1;
    }
    for (size_t a = 0; ok && a < n; a++) {
        const rm_slot *s = &call->slots[asked[a].t];
        f->cmds[off[asked[a].x] + (size_t)asked[a].pos] = *rm_req_cmd(s->req, (size_t)asked[a].m);
        rm_req *req = &f->reqs[asked[a].x];
        int w = p->wait_of[asked[a].t];
        if (w >= 0 && f->wait_of[asked[a].x] < 0) { /* the replicas' WAIT, once per node */
            f->wait_of[asked[a].x] = (int)req->ncmds;
            f->cmds[off[asked[a].x] + req->ncmds++] = *rm_req_cmd(s->req, (size_t)w);
        }
    }
    free(off);
    return ok;
}

/* Hold answers that were ASK are read from the follow-up from now on. */
static void follow_remap(rm_renew_plan *p, const renew_asked *asked, size_t n)
{
    for (size_t e = 0; e < p->k * p->n; e++)
        for (size_t a = 0; a < n && !p->at[e].followed; a++)
            if (p->at[e].target == asked[a].t && p->at[e].cmd == asked[a].m)
                p->at[e] = (renew_at){asked[a].x, asked[a].pos, p->at[e].elem, true};
}

/* A node that did not answer, or answered WAIT short: the cluster may have
   failed over (a master died, a promoted one has no replica yet). Its map
   and the nodes' replica counts are looked at again, so the next try goes
   to the right master and asks it for the replicas it has. */
static void heal(rm_renew_plan *p, rm_call *call)
{
    bool refreshed[REDMUTEX_SERVERS_MAX] = {false};
    for (size_t t = 0; t < call->n; t++) {
        rm_slot *s = &call->slots[t];
        bool trouble = s->err || (s->status == RM_SLOT_DONE && !replicas_ok(s, p->wait_of[t]));
        if (!s->fixed_node || !trouble || s->dep >= REDMUTEX_SERVERS_MAX || refreshed[s->dep])
            continue;
        refreshed[s->dep] = true;
        rm_deploy_refresh(NULL, call->c, s->dep, rm_deadline_after_ms(call->c->opts.command_timeout_ms));
    }
}

void rm_renew_plan_follow(rm_renew_plan *p, rm_call *call, int64_t deadline_ns)
{
    size_t n = 0;
    renew_asked *asked = collect_asks(call, &n);
    size_t *count = n ? calloc(n, sizeof *count) : NULL;
    renew_follow *f = count ? calloc(1, sizeof *f) : NULL;
    size_t nx = f ? group_asks(asked, n, count) : 0;
    if (f && follow_build(p, f, call, asked, n, nx, count) && rm_call_begin_targets(NULL, &f->call, call->c, nx) == 0) {
        f->begun = true;
        for (size_t x = 0; x < nx; x++) {
            f->call.slots[x].fixed_node = NULL;
            f->call.slots[x].req = &f->reqs[x];
            f->call.slots[x].ask_fixed = true;
        }
        for (size_t a = 0; a < n; a++) {
            f->call.slots[asked[a].x].dep = asked[a].dep;
            f->call.slots[asked[a].x].fixed_node = asked[a].node;
        }
        /* Ordered like the first run: a later release of these locks runs behind it. */
        f->call.strict_deadline = true;
        f->call.order_keys = call->order_keys;
        f->call.n_order_keys = call->n_order_keys;
        rm_req none = {0};
        rm_call_run(&f->call, &none, deadline_ns, NULL, NULL);
        f->call.order_keys = NULL;
        f->call.n_order_keys = 0;
        p->follow = f;
        follow_remap(p, asked, n);
        f = NULL;
    }
    if (f) {
        free(f->reqs);
        free(f->cmds);
        free(f->wait_of);
        free(f);
    }
    free(count);
    free(asked);
    heal(p, call);
}

void rm_renew_plan_free(rm_renew_plan *p)
{
    if (!p)
        return;
    free(p->at);
    free(p->reqs);
    free(p->cmds);
    free(p->argv);
    free(p->nums);
    free(p->wait_of);
    if (p->follow) {
        if (p->follow->begun)
            rm_call_end(&p->follow->call);
        free(p->follow->reqs);
        free(p->follow->cmds);
        free(p->follow->wait_of);
        free(p->follow);
    }
    free(p);
}
