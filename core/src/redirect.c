/*
 * A cluster's answers that are no answer: MOVED and ASK (the request goes
 * to another node) and TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING (it goes
 * again after a pause). The fan-out (fanout.c) acts on what this file
 * reads; none of these errors reaches a user as it is.
 *
 * Layering: with the fan-out, above the deployments (deploy.c).
 */
#define _GNU_SOURCE
#include "client.h"
#include "deploy.h"
#include "fanout.h"
#include "internal.h"
#include "slots.h"
#include "topology.h"

#include <stdio.h>
#include <string.h>

/* The longest pause before a retry. */
#define RM_RETRY_PAUSE_MAX_MS 200

int rm_redirect_route(rm_err *err, rm_call *call, rm_slot *s, const rm_req *req)
{
    redmutex_client *c = call->c;
    const char *name = req->order_name ? req->order_name : req->route_name;
    s->keyslot = -1;
    if (!name) { /* no keys (PING): any node will do */
        s->node = rm_deploy_route(err, c, s->dep, -1);
        return 0;
    }
    /* A node failed since the map was read: it may have failed over. */
    rm_deploy_refresh_if_wanted(c, s->dep, s->deadline_ns);
    size_t len = strlen(name);
    if (!rm_name_fits_one_slot(name, len))
        return rm_fail(err, REDMUTEX_EINVAL,
                       "lock name '%.200s': its keys would land in different hash slots of a cluster (a name "
                       "with no '{' may not hold '}', one with '{' needs a non-empty {hash tag}); nothing was sent",
                       name);
    s->keyslot = rm_keyslot(name, len);
    s->node = rm_deploy_route(err, c, s->dep, s->keyslot);
    if (s->node)
        return 0;
    /* No master owns the slot in the map: ask the cluster once more. */
    rm_deploy_refresh(NULL, c, s->dep, s->deadline_ns);
    rm_err_reset(err);
    s->node = rm_deploy_route(err, c, s->dep, s->keyslot);
    return s->node ? 0 : err->code;
}

/* Errors after which the same request may succeed a little later: the command did not run. */
static bool retry_error(const char *m)
{
    return strncmp(m, "TRYAGAIN", 8) == 0 || strncmp(m, "CLUSTERDOWN", 11) == 0 || strncmp(m, "MASTERDOWN", 10) == 0 ||
           strncmp(m, "LOADING", 7) == 0;
}

/* The first reply of s that is a redirect or asks for a retry: its text, or NULL. */
static const char *first_redirect(const rm_slot *s, const rm_req *req, int *kind, int *slot, char host[256], int *port)
{
    for (size_t k = 0; k < req->ncmds; k++) {
        const rm_reply *r = s->replies[k];
        if (!r || r->type != RM_REPLY_ERROR)
            continue;
        *kind = rm_topo_read_redirect(r->str, slot, host, port);
        if (*kind || retry_error(r->str))
            return r->str;
    }
    return NULL;
}

/* A node's batch (renewals of many slots): MOVED corrects the map for the
   next batch, and the caller reads each command's answer itself. */
static void note_moves(rm_call *call, rm_slot *s, const rm_req *req)
{
    for (size_t k = 0; k < req->ncmds; k++) {
        const rm_reply *r = s->replies[k];
        char host[256];
        int slot, port;
        if (r && r->type == RM_REPLY_ERROR && rm_topo_read_redirect(r->str, &slot, host, &port) == 1)
            rm_deploy_moved(call->c, s->dep, slot, host[0] ? host : s->conn->srv->ep.host, port);
    }
}

/* A redirect that cannot be followed: `why` says why, after the node's name. */
static int redirect_fail(rm_slot *s, const char *why, int slot, const char *to)
{
    s->err = REDMUTEX_ECONN;
    snprintf(s->msg, sizeof s->msg, "%s: %s (hash slot %d, last sent to %.100s)", s->conn->srv->ep.display, why, slot,
             to);
    return RM_REDIRECT_FAIL;
}

int rm_redirect_read(rm_call *call, rm_slot *s, const rm_req *req)
{
    if (s->fixed_node) {
        note_moves(call, s, req);
        return RM_REDIRECT_NONE;
    }
    char host[256];
    int kind = 0, slot = s->keyslot, port = 0;
    const char *m = first_redirect(s, req, &kind, &slot, host, &port);
    if (!m)
        return RM_REDIRECT_NONE;
    if (kind) {
        if (++s->redirects > RM_REDIRECTS_MAX)
            return redirect_fail(s, "redirect loop: the cluster redirected this request more than 5 times", slot,
                                 m + (kind == 1 ? 6 : 4));
        const char *h = host[0] ? host : s->conn->srv->ep.host; /* a node that does not know its own address */
        rm_server *node =
            kind == 1 ? rm_deploy_moved(call->c, s->dep, slot, h, port) : rm_deploy_asked(call->c, s->dep, h, port);
        if (!node)
            return redirect_fail(s, "out of memory while following a redirect", slot, m);
        s->node = node;
        s->asking = kind == 2;
        return RM_REDIRECT_NOW;
    }
    int64_t pause_ms = (int64_t)5 << (s->retries < 6 ? s->retries : 6);
    if (pause_ms > RM_RETRY_PAUSE_MAX_MS)
        pause_ms = RM_RETRY_PAUSE_MAX_MS;
    int64_t now = rm_now_ns();
    snprintf(s->msg, sizeof s->msg, "%s: hash slot %d is not available: %.150s (retried until the deadline)",
             s->conn->srv->ep.display, s->keyslot, m);
    if (now + pause_ms * RM_NS_PER_MS >= s->deadline_ns) {
        s->err = REDMUTEX_ECONN;
        return RM_REDIRECT_FAIL;
    }
    if (strncmp(m, "CLUSTERDOWN", 11) == 0 || strncmp(m, "MASTERDOWN", 10) == 0) {
        /* The slot's master is gone or not yet replaced: route again from a fresh map. */
        rm_deploy_refresh(NULL, call->c, s->dep, s->deadline_ns);
        s->node = NULL;
        s->asking = false;
    }
    s->retries++;
    s->retry_at = now + pause_ms * RM_NS_PER_MS;
    return RM_REDIRECT_LATER;
}
