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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where hold j's answer from deployment i is: target, command, element (-1: nowhere). */
typedef struct renew_at {
    int target, cmd, elem;
} renew_at;

struct rm_renew_plan {
    size_t k, n;         /* holds, deployments */
    renew_at *at;        /* k * n */
    rm_req *reqs;        /* per target */
    rm_cmd *cmds;        /* every command of every cluster target */
    const char **argv;   /* their arguments */
    char (*nums)[24];    /* their key counts */
    int *wait_of;        /* per target: its WAIT's command index, -1 without */
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
                p->at[keys[x].j * p->n + i] = (renew_at){(int)f->t, (int)(f->cmd - first_cmd), (int)(x - a)};
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
        p->at[x] = (renew_at){-1, -1, -1};
    return p;
}

rm_renew_plan *rm_renew_plan_make(redmutex_client *c, rm_hold **batch, size_t k, const rm_req *whole,
                                  const char *lease, rm_call *call)
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
            p->at[j * c->n + i] = (renew_at){(int)f.t, 0, (int)j};
        f.t++;
    }
    free(keys);
    return p;
}

/* Whether a target's WAIT (if any) confirmed enough replicas. */
static bool replicas_ok(const rm_renew_plan *p, const rm_call *call, int t)
{
    if (p->wait_of[t] < 0)
        return true;
    const rm_reply *w = call->slots[t].replies[p->wait_of[t]];
    return w && w->type == RM_REPLY_INTEGER && w->integer >= call->slots[t].wait_n;
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
        const rm_slot *s = &call->slots[at.target];
        const rm_reply *r = s->status == RM_SLOT_DONE && !s->err ? s->replies[at.cmd] : NULL;
        if (r && r->type == RM_REPLY_ERROR && strncmp(r->str, "MOVED ", 6) == 0) {
            *again = true; /* not a failure: the slot is elsewhere now (the map knows where) */
            continue;
        }
        if (!r || r->type != RM_REPLY_ARRAY || (size_t)at.elem >= r->elements ||
            r->element[at.elem]->type != RM_REPLY_INTEGER || !replicas_ok(p, call, at.target))
            continue;
        /* A cluster's answer is the key's own, wherever the slot lives now. */
        bool life = rm_deploy_is_cluster(call->c, i) || same_life(ud, i);
        if (r->element[at.elem]->integer == 1 && life)
            (*yes)++;
        else
            (*no)++;
    }
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
    free(p);
}
