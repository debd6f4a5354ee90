/*
 * redmutex for Ruby, Perl, Tcl and Lua: one SWIG interface (swig 4.1).
 *
 * The C core's opaque handles become three classes - Client, Lock and (for
 * the scoped forms of Perl, Tcl and Lua) Guard - through %extend over the
 * reference-counted objects of bindings/common/. Everything that decides
 * something lives in bindings/common/ and is shared; this file only
 *
 *   - classifies native values (typemaps: one value, one list, trailing
 *     keyword options) so that common/values.c can check them,
 *   - turns the pending error into the language's exception, in ONE
 *     %exception block, with the classes made from ONE table
 *     (rmb_error_classes in common/errors.c),
 *   - gives each interpreter its side of the one signal policy of
 *     common/objects.c and common/signals.c: how a wait is ended for the
 *     language (Ruby: its unblocking function; the others: the C handler of
 *     signals.c), whether the language has a handler waiting to run, and how
 *     to run it with nothing held,
 *   - checks every method's self against the live objects (common/live.c),
 *   - adds what only one language has: Ruby's synchronize and Lua's with
 *     (in C, so no interrupt can slip between acquiring and protecting the
 *     block), Lua's <close>, Tcl's event-loop watch of lost-lock news.
 *
 * The idioms written in the languages themselves are beside this file:
 * ruby/redmutex.rb, perl/Redmutex_idioms.pm, tcl/redmutex.tcl, lua/redmutex.lua.
 *
 * Order matters to SWIG: typemaps must precede the struct declarations
 * whose %extend methods use them.
 */

#if defined(SWIGPERL)
%module Redmutex
#elif defined(SWIGLUA)
%module redmutex_native
#else
%module redmutex
#endif

%{
#include "binding.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The Semaphore class: an rmb_lock whose holds are permits (common/binding.h). */
#define rmb_sem rmb_lock

/* Results that may be absent (ttl, fence): nil / undef / "" / nil. */
typedef struct rmb_opt_num { bool has; double v; } rmb_opt_num;
typedef struct rmb_opt_int { bool has; long long v; } rmb_opt_int;
/* Integers as integers (Lua 5.4 would otherwise see floats). */
typedef long long rmb_int;
/* A name from a fixed set: a Symbol in Ruby, a string elsewhere. */
typedef const char *rmb_symbol;

/* The keyword options of a varargs method: the (...) typemap passes them
   as the one variadic argument. */
static const rmb_kwargs *rmb_kwargs_arg(va_list ap)
{
    void *p = va_arg(ap, void *);
    return (const rmb_kwargs *)p;
}
#define RMB_KWARGS(last, var)                                                                      \
    const rmb_kwargs *var;                                                                         \
    do {                                                                                           \
        va_list ap_;                                                                               \
        va_start(ap_, last);                                                                       \
        var = rmb_kwargs_arg(ap_);                                                                 \
        va_end(ap_);                                                                               \
    } while (0)

static const char *rmb_state_name(redmutex_state s)
{
    switch (s) {
    case REDMUTEX_STATE_HELD: return "held";
    case REDMUTEX_STATE_RENEWAL_FAILING: return "renewal_failing";
    case REDMUTEX_STATE_LOST: return "lost";
    default: return "unlocked";
    }
}

static void rmb_classify_none(rmb_value *v)
{
    memset(v, 0, sizeof *v);
    v->kind = RMB_MISSING;
    v->truth = -1;
}
%}

/* ======================================================================== */
/* Ruby                                                                      */
/* ======================================================================== */
#if defined(SWIGRUBY)
%{
#include <ruby/thread.h>
#include <signal.h>

static VALUE rmb_module;

static void rmb_from_ruby(rmb_value *v, VALUE obj)
{
    rmb_classify_none(v);
    v->type = rb_obj_classname(obj);
    switch (TYPE(obj)) {
    case T_NIL: v->kind = RMB_NIL; v->type = "nil"; break;
    case T_TRUE: case T_FALSE:
        v->kind = RMB_BOOL;
        v->i = v->truth = obj == Qtrue;
        break;
    case T_FIXNUM: case T_BIGNUM:
        v->kind = RMB_INT;
        v->numeric = v->integral = true;
        v->d = NUM2DBL(obj);
        v->i = v->d >= 9.2e18 ? INT64_MAX : v->d <= -9.2e18 ? INT64_MIN : NUM2LL(obj);
        break;
    case T_FLOAT:
        v->kind = RMB_FLOAT;
        v->numeric = true;
        v->d = RFLOAT_VALUE(obj);
        break;
    case T_SYMBOL: obj = rb_sym2str(obj); /* fall through: names of options */
    case T_STRING:
        v->kind = RMB_STRING;
        v->len = (size_t)RSTRING_LEN(obj);
        /* A NUL inside is reported by the checks; otherwise make sure the
           buffer is terminated (shared substrings are not). */
        v->s = memchr(RSTRING_PTR(obj), '\0', v->len) ? RSTRING_PTR(obj) : StringValueCStr(obj);
        break;
    default: v->kind = RMB_OTHER;
    }
}

static int rmb_kwargs_add(VALUE key, VALUE value, VALUE arg)
{
    rmb_kwargs *kw = (rmb_kwargs *)arg;
    if (kw->n == RMB_KWARGS_MAX) {
        kw->too_many = true;
        return ST_STOP;
    }
    rmb_from_ruby(&kw->keys[kw->n], key);
    rmb_from_ruby(&kw->values[kw->n], value);
    kw->n++;
    return ST_CONTINUE;
}

static NORETURN(void rmb_raise(void));
static void rmb_raise(void)
{
    char message[sizeof rmb_error_pending()->message];
    int code = rmb_error_pending()->code;
    memcpy(message, rmb_error_pending()->message, sizeof message);
    rmb_error_clear();
    if (code == REDMUTEX_EINTR)
        rb_thread_check_ints(); /* the interrupt that ended the wait: Interrupt, Thread#raise... */
    VALUE cls = rb_const_get(rmb_module, rb_intern(rmb_error_class_for(code)->name));
    VALUE exc = rb_exc_new_str(cls, rb_utf8_str_new_cstr(message));
    rb_iv_set(exc, "@code", INT2NUM(code));
    rb_exc_raise(exc);
}

/* Waiting without the GVL: other Ruby threads run, and an interrupt for
   this thread (Ctrl-C's Interrupt, Thread#raise, Timeout) makes Ruby call
   the unblocking function, which ends the client's waits. */
static void *rmb_ruby_call(void *p)
{
    rmb_call *call = p;
    call->rc = call->fn(call);
    call->ran = true;
    return NULL;
}

static void rmb_ruby_unblock(void *client)
{
    redmutex_client_interrupt(((rmb_client *)client)->ptr);
}

static void rmb_ruby_run(rmb_call *call, rmb_client *client, bool interruptible)
{
    if (!interruptible) {
        rb_thread_call_without_gvl2(rmb_ruby_call, call, NULL, NULL);
        if (!call->ran) /* an interrupt is pending, but a release must still happen */
            rmb_ruby_call(call);
        return;
    }
    /* Ruby declines to start a blocking region while any interrupt is
       pending, also the timer's (thread switching): let Ruby handle it -
       raising Interrupt, Thread#raise... here, with nothing held - and try
       again. The signals are watched too (see signals.c), never across
       rb_thread_check_ints, which may unwind. */
    for (;;) {
        rmb_signal_watch w;
        rmb_signals_watch(&w, client);
        rb_thread_call_without_gvl2(rmb_ruby_call, call, rmb_ruby_unblock, client);
        rmb_signals_unwatch(&w, call);
        if (call->ran)
            return;
        rb_thread_check_ints();
    }
}

static bool rmb_ruby_pending(void)
{
    return rb_thread_interrupted(rb_thread_current()) != 0;
}

/* Runs the traps, raises Thread#raise's exception, Ctrl-C's Interrupt...;
   a trap that returns lets the wait go on. */
static bool rmb_ruby_deliver(void)
{
    rb_thread_check_ints();
    return true;
}

/* A blocking region with an unblocking function costs Ruby 3.1 some 20 us
   of work (its timer thread takes the function in and out of a list); one
   without costs 0.1 us. So an acquire is tried once without waiting - and
   without the function - before it waits. */
static const rmb_policy rmb_ruby_policy = {rmb_ruby_run, rmb_ruby_pending, rmb_ruby_deliver, true};
#define RMB_ENTER

static VALUE rmb_ruby_yield(VALUE unused)
{
    (void)unused;
    return rb_yield_values(0);
}

/* Log messages: Redmutex.deliver_log(level, message) (redmutex.rb: the
   Redmutex.logger, else Kernel#warn); never during garbage collection. */
static VALUE rmb_ruby_log1(VALUE args)
{
    return rb_funcallv(rmb_module, rb_intern("deliver_log"), 2, (const VALUE *)args);
}

static void rmb_ruby_deliver_logs(void)
{
    int level, state;
    char message[RMB_LOG_MESSAGE_MAX];
    while (!rb_during_gc() && rmb_log_next(&level, message, sizeof message)) {
        VALUE args[2] = {INT2NUM(level), rb_utf8_str_new_cstr(message)};
        rb_protect(rmb_ruby_log1, (VALUE)args, &state);
        if (state)
            rb_set_errinfo(Qnil); /* a failing logger must not fail the call */
    }
}

/* The statistics as a Hash of "path" => number (see bindings/common/observe.c). */
static VALUE rmb_ruby_stats(rmb_stats *s)
{
    VALUE h = rb_hash_new();
    for (size_t i = 0; i < s->n; i++)
        rb_hash_aset(h, rb_utf8_str_new_cstr(s->items[i].key), DBL2NUM(s->items[i].value));
    rmb_stats_free(s);
    return h;
}
%}

%{
#define RMB_THROW rmb_raise()
#define RMB_DELIVER_LOGS() rmb_ruby_deliver_logs()
%}
%typemap(out) rmb_stats { $result = rmb_stats_get_failed(&$1) ? Qnil : rmb_ruby_stats(&$1); }

%typemap(in) rmb_value { rmb_from_ruby(&$1, $input); }
%typemap(default) rmb_value { rmb_classify_none(&$1); }

%typemap(in) const rmb_list * (rmb_list list) {
    VALUE obj = $input;
    list.n = 0;
    list.too_long = false;
    if (RB_TYPE_P(obj, T_ARRAY)) {
        long n = RARRAY_LEN(obj);
        list.too_long = n > RMB_LIST_MAX;
        for (long i = 0; i < n && i < RMB_LIST_MAX; i++)
            rmb_from_ruby(&list.items[list.n++], rb_ary_entry(obj, i));
    } else {
        rmb_from_ruby(&list.items[list.n++], obj);
    }
    $1 = &list;
}

/* Keyword arguments arrive as a trailing Hash. */
%typemap(default) (...) (rmb_kwargs kwargs) { kwargs.n = 0; kwargs.too_many = kwargs.odd = false; $1 = &kwargs; }
%typemap(in) (...) {
    rmb_kwargs *kw = (rmb_kwargs *)$1;
    int rest = argc - (int)(&$input - argv);
    if (rest != 1 || !RB_TYPE_P($input, T_HASH)) {
        rmb_fail(REDMUTEX_EINVAL, "options are keyword arguments (name: value), not %d more positional arguments",
                 rest);
        RMB_THROW;
    }
    rb_hash_foreach($input, rmb_kwargs_add, (VALUE)kw);
}

%typemap(out) rmb_opt_num { $result = $1.has ? DBL2NUM($1.v) : Qnil; }
%typemap(out) rmb_opt_int { $result = $1.has ? LL2NUM($1.v) : Qnil; }
%typemap(out) rmb_int { $result = LL2NUM($1); }
%typemap(out) rmb_symbol { $result = ID2SYM(rb_intern($1)); }
%typemap(out) VALUE { $result = $1; }
/* [lock_id, state, owner] (owner nil for a plain lock's own hold), or nil. */
%typemap(out) rmb_event {
    $result = !$1.has ? Qnil : rb_ary_new_from_args(3, ULL2NUM($1.lock_id), ID2SYM(rb_intern(rmb_state_name($1.state))),
                                                    $1.owner[0] ? rb_utf8_str_new_cstr($1.owner) : Qnil);
}

%rename("locked?") rmb_lock::locked;
%rename("owned?") rmb_lock::owned;
%rename("lost?") rmb_lock::lost;
%rename("closed?") rmb_client::closed;
%rename("extend_lease") rmb_lock::extend;  /* Object#extend is taken */

%init %{
    rmb_module = mRedmutex;
    rmb_set_policy(&rmb_ruby_policy);
    /* Ruby's timer kicks blocked threads with SIGVTALRM and reaps children
       on SIGCHLD; a trap set on them still reaches the wait through the
       unblocking function. */
    rmb_signals_leave(SIGVTALRM);
    rmb_signals_leave(SIGCHLD);
    {
        VALUE base = rb_define_class_under(mRedmutex, rmb_error_classes[0].name, rb_eStandardError);
        rb_define_attr(base, "code", 1, 0);
        rb_define_const(mRedmutex, "RedMutexError", base);
        for (const rmb_error_class *c = rmb_error_classes + 1; c->name; c++)
            rb_define_class_under(mRedmutex, c->name, c->parent ? rb_const_get(mRedmutex, rb_intern(c->parent)) : base);
    }
%}
#endif

/* ======================================================================== */
/* Perl                                                                      */
/* ======================================================================== */
#if defined(SWIGPERL)
%{
static void rmb_from_perl(pTHX_ rmb_value *v, SV *sv)
{
    rmb_classify_none(v);
    SvGETMAGIC(sv);
    v->truth = SvTRUE_nomg(sv) ? 1 : 0;
    if (!SvOK(sv)) {
        v->kind = RMB_NIL;
        v->type = "undef";
        return;
    }
    if (SvROK(sv)) {
        v->kind = RMB_OTHER;
        v->type = SvOBJECT(SvRV(sv)) ? "an object" : SvTYPE(SvRV(sv)) == SVt_PVHV ? "a HASH reference"
                  : SvTYPE(SvRV(sv)) == SVt_PVAV ? "an ARRAY reference" : "a reference";
        return;
    }
    STRLEN len;
    v->s = SvPV_nomg(sv, len);
    v->len = len;
    v->kind = RMB_STRING;
    v->type = "a string";
    /* Perl's numbers are strings and its strings may be numbers. */
    if (SvIOK(sv) && !SvIsUV(sv)) {
        v->numeric = v->integral = true;
        v->i = SvIV_nomg(sv);
        v->d = (double)v->i;
        v->kind = RMB_INT;
        v->type = "a number";
    } else if (SvNIOK(sv) || looks_like_number(sv)) {
        v->numeric = true;
        v->d = SvNV_nomg(sv);
        v->integral = v->d == (double)(int64_t)v->d && v->d > -9.2e18 && v->d < 9.2e18 && !strpbrk(v->s, ".eE");
        v->i = v->integral ? (int64_t)v->d : 0;
        v->kind = RMB_FLOAT;
        v->type = "a number";
    }
}

static void rmb_kwargs_from_perl(pTHX_ rmb_kwargs *kw, SV **args, int n)
{
    /* One hash reference, or a flat list of name => value pairs. */
    if (n == 1 && SvROK(args[0]) && SvTYPE(SvRV(args[0])) == SVt_PVHV) {
        HV *hv = (HV *)SvRV(args[0]);
        HE *he;
        hv_iterinit(hv);
        while ((he = hv_iternext(hv))) {
            if (kw->n == RMB_KWARGS_MAX) {
                kw->too_many = true;
                return;
            }
            rmb_from_perl(aTHX_ &kw->keys[kw->n], hv_iterkeysv(he));
            rmb_from_perl(aTHX_ &kw->values[kw->n], hv_iterval(hv, he));
            kw->n++;
        }
        return;
    }
    kw->odd = n % 2 != 0;
    for (int i = 0; i + 1 < n; i += 2) {
        if (kw->n == RMB_KWARGS_MAX) {
            kw->too_many = true;
            return;
        }
        rmb_from_perl(aTHX_ &kw->keys[kw->n], args[i]);
        rmb_from_perl(aTHX_ &kw->values[kw->n], args[i + 1]);
        kw->n++;
    }
}

/* Errors are objects: die with a hash blessed into Redmutex::<Class>. */
static void rmb_perl_error(pTHX)
{
    rmb_error *e = rmb_error_pending();
    const rmb_error_class *cls = rmb_error_class_for(e->code);
    HV *hv = newHV();
    hv_stores(hv, "code", newSViv(e->code));
    hv_stores(hv, "name", newSVpv(cls->name, 0));
    hv_stores(hv, "message", newSVpv(e->message, 0));
    SV *pkg = sv_2mortal(newSVpvf("Redmutex::%s", cls->name));
    SV *obj = sv_bless(newRV_noinc((SV *)hv), gv_stashsv(pkg, GV_ADD));
    sv_setsv(get_sv("@", GV_ADD), obj);
    SvREFCNT_dec(obj);
    rmb_error_clear();
}

/* Perl runs %SIG handlers between ops ("safe signals"): its C handler only
   notes the signal. A handler noted while waiting runs here, with nothing
   held; a die in it unwinds from here, as from any op. */
static bool rmb_perl_pending(void)
{
    dTHX;
    return PL_sig_pending != 0;
}

static bool rmb_perl_deliver(void)
{
    dTHX;
    PERL_ASYNC_CHECK();
    return true;
}

static const rmb_policy rmb_perl_policy = {rmb_signal_run, rmb_perl_pending, rmb_perl_deliver, true};
#define RMB_ENTER
%}

%{
/* Log messages go to Perl's warn (and so to $SIG{__WARN__}). */
static void rmb_perl_deliver_logs(pTHX)
{
    int level;
    char message[RMB_LOG_MESSAGE_MAX];
    while (rmb_log_next(&level, message, sizeof message))
        Perl_warn(aTHX_ "redmutex: %s: %s\n", rmb_log_level_name(level), message);
}

#define RMB_THROW rmb_perl_error(aTHX); SWIG_fail
#define RMB_DELIVER_LOGS() rmb_perl_deliver_logs(aTHX)
%}
/* A hash reference of "path" => number (see bindings/common/observe.c). */
%typemap(out) rmb_stats {
    if (rmb_stats_get_failed(&$1)) {
        $result = &PL_sv_undef;
    } else {
        HV *hv = newHV();
        for (size_t i = 0; i < $1.n; i++)
            (void)hv_store(hv, $1.items[i].key, (I32)strlen($1.items[i].key), newSVnv($1.items[i].value), 0);
        rmb_stats_free(&$1);
        $result = sv_2mortal(newRV_noinc((SV *)hv));
    }
    argvi++;
}

%typemap(in) rmb_value { rmb_from_perl(aTHX_ &$1, $input); }
%typemap(default) rmb_value { rmb_classify_none(&$1); }

%typemap(in) const rmb_list * (rmb_list list) {
    SV *sv = $input;
    list.n = 0;
    list.too_long = false;
    if (SvROK(sv) && SvTYPE(SvRV(sv)) == SVt_PVAV) {
        AV *av = (AV *)SvRV(sv);
        SSize_t n = av_len(av) + 1;
        list.too_long = n > RMB_LIST_MAX;
        for (SSize_t i = 0; i < n && i < RMB_LIST_MAX; i++) {
            SV **item = av_fetch(av, i, 0);
            rmb_from_perl(aTHX_ &list.items[list.n++], item ? *item : &PL_sv_undef);
        }
    } else {
        rmb_from_perl(aTHX_ &list.items[list.n++], sv);
    }
    $1 = &list;
}

%typemap(default) (...) (rmb_kwargs kwargs) { kwargs.n = 0; kwargs.too_many = kwargs.odd = false; $1 = &kwargs; }
%typemap(in) (...) {
    int first = (int)(&$input - &ST(0));
    rmb_kwargs_from_perl(aTHX_ (rmb_kwargs *)$1, &$input, items - first);
}

%typemap(out) rmb_opt_num { $result = $1.has ? sv_2mortal(newSVnv($1.v)) : &PL_sv_undef; argvi++; }
%typemap(out) rmb_opt_int { $result = $1.has ? sv_2mortal(newSViv((IV)$1.v)) : &PL_sv_undef; argvi++; }
%typemap(out) rmb_int { $result = sv_2mortal(newSViv((IV)$1)); argvi++; }
%typemap(out) rmb_symbol { $result = sv_2mortal(newSVpv($1, 0)); argvi++; }
/* A list (lock_id, state, owner) - owner undef for a plain lock's own hold -
   or the empty list: while (my ($id, $state) = $client->next_event) { ... } */
%typemap(out) rmb_event {
    if ($1.has) {
        EXTEND(sp, argvi + 3);
        ST(argvi++) = sv_2mortal(newSVuv((UV)$1.lock_id));
        ST(argvi++) = sv_2mortal(newSVpv(rmb_state_name($1.state), 0));
        ST(argvi++) = $1.owner[0] ? sv_2mortal(newSVpv($1.owner, 0)) : &PL_sv_undef;
    }
}

/* The scopes of with_lock: a guard held by a plain blessed reference
   (Redmutex::_Scope), with DESTROY in C - a fraction of the cost of a SWIG
   proxy object. The block itself is called by Perl code, so die, return,
   last and next behave as in any Perl block. */
%wrapper %{
static rmb_guard *rmb_perl_scope(pTHX_ SV *sv)
{
    if (!SvROK(sv) || !sv_derived_from(sv, "Redmutex::_Scope"))
        return NULL;
    rmb_guard *g = INT2PTR(rmb_guard *, SvIV(SvRV(sv)));
    return rmb_live_is(g, RMB_TYPE_GUARD) ? g : NULL; /* 0 once destroyed; anything if made up */
}

/* _scope_enter($lock, options...): acquires; a Redmutex::_Scope holding it. */
XS(rmb_perl_scope_enter);
XS(rmb_perl_scope_enter)
{
    dXSARGS;
    rmb_lock *l = NULL;
    rmb_kwargs kw = {0};
    int saved_errno = errno;
    rmb_error_clear();
    bool sem = items >= 1 && SWIG_IsOK(SWIG_ConvertPtr(ST(0), (void **)&l, SWIGTYPE_p_rmb_sem, 0)) && l;
    if (!sem && (items < 1 || !SWIG_IsOK(SWIG_ConvertPtr(ST(0), (void **)&l, SWIGTYPE_p_rmb_lock, 0)) || !l))
        rmb_fail(REDMUTEX_EINVAL, "with_lock: the second argument is not a Redmutex::Lock or Redmutex::Semaphore");
    else if (rmb_self(l, sem ? RMB_TYPE_SEMAPHORE : RMB_TYPE_LOCK) == 0)
        rmb_kwargs_from_perl(aTHX_ &kw, &ST(1), items - 1);
    rmb_guard *g = rmb_error_pending()->code ? NULL : rmb_guard_new(l, &kw);
    errno = saved_errno;
    if (!g) {
        rmb_perl_error(aTHX);
        croak(NULL);
    }
    ST(0) = sv_2mortal(sv_bless(newRV_noinc(newSViv(PTR2IV(g))), gv_stashpvs("Redmutex::_Scope", GV_ADD)));
    XSRETURN(1);
}

/* _scope_leave($scope): releases now; dies with LockLostError if the lease was lost. */
XS(rmb_perl_scope_leave);
XS(rmb_perl_scope_leave)
{
    dXSARGS;
    rmb_guard *g = items == 1 ? rmb_perl_scope(aTHX_ ST(0)) : NULL;
    int saved_errno = errno;
    rmb_error_clear();
    if (!g)
        rmb_fail(REDMUTEX_EINVAL, "_scope_leave: not a live scope of with_lock");
    else
        rmb_guard_end(g);
    errno = saved_errno;
    if (rmb_error_pending()->code) {
        rmb_perl_error(aTHX);
        croak(NULL);
    }
    XSRETURN_EMPTY;
}

/* Redmutex::_Scope::DESTROY: releases if the block unwound, frees the guard. */
XS(rmb_perl_scope_destroy);
XS(rmb_perl_scope_destroy)
{
    dXSARGS;
    rmb_guard *g = items == 1 ? rmb_perl_scope(aTHX_ ST(0)) : NULL;
    if (g) {
        int saved_errno = errno;
        sv_setiv(SvRV(ST(0)), 0);
        rmb_guard_free(g);
        errno = saved_errno;
    }
    XSRETURN_EMPTY;
}
%}
%native(_scope_enter) rmb_perl_scope_enter;
%native(_scope_leave) rmb_perl_scope_leave;

%init %{
    rmb_set_policy(&rmb_perl_policy);
    newXS("Redmutex::_Scope::DESTROY", rmb_perl_scope_destroy, __FILE__);
    for (const rmb_error_class *c = rmb_error_classes + 1; c->name; c++) {
        AV *isa = get_av(Perl_form(aTHX_ "Redmutex::%s::ISA", c->name), GV_ADD);
        av_push(isa, newSVpvf("Redmutex::%s", c->parent ? c->parent : rmb_error_classes[0].name));
    }
%}

%insert("perl") "perl/Redmutex_idioms.pm"
#endif

/* ======================================================================== */
/* Tcl                                                                       */
/* ======================================================================== */
#if defined(SWIGTCL)
%{
static void rmb_from_tcl(rmb_value *v, Tcl_Obj *obj)
{
    int len, b;
    Tcl_WideInt w;
    rmb_classify_none(v);
    /* Everything is a string in Tcl; some strings are numbers or booleans. */
    v->s = Tcl_GetStringFromObj(obj, &len);
    v->len = (size_t)len;
    for (int i = 0; i + 1 < len; i++) /* Tcl stores NUL as C0 80 */
        if ((unsigned char)v->s[i] == 0xC0 && (unsigned char)v->s[i + 1] == 0x80)
            v->has_nul = true;
    v->kind = RMB_STRING;
    v->type = "a string";
    if (Tcl_GetWideIntFromObj(NULL, obj, &w) == TCL_OK) {
        v->numeric = v->integral = true;
        v->i = (int64_t)w;
        v->d = (double)w;
        v->type = "a number";
    } else if (Tcl_GetDoubleFromObj(NULL, obj, &v->d) == TCL_OK) {
        v->numeric = true;
        v->type = "a number";
    }
    if (Tcl_GetBooleanFromObj(NULL, obj, &b) == TCL_OK)
        v->truth = b;
}

/* Errors: the message as result, -errorcode {REDMUTEX TIMEOUT {<what it means>}};
   an error of a signal handler's (RMB_EFOREIGN) is in the result already. */
static void rmb_tcl_error(Tcl_Interp *interp)
{
    rmb_error *e = rmb_error_pending();
    if (e->code != RMB_EFOREIGN) {
        Tcl_SetObjResult(interp, Tcl_NewStringObj(e->message, -1));
        Tcl_SetErrorCode(interp, "REDMUTEX", rmb_error_class_for(e->code)->tag, redmutex_strerror(e->code), NULL);
    }
    rmb_error_clear();
}

/* Tcl has no signal handlers of its own; extensions that give it some
   (Tclx's `signal trap`, Expect's `trap`) mark a Tcl asynchronous handler
   from their C handler. Those run here, in the interpreter of the call, with
   nothing held: an error from them ends the acquire with that error. */
static _Thread_local Tcl_Interp *rmb_tcl_interp; /* of the command running on this thread */

static bool rmb_tcl_pending(void)
{
    return Tcl_AsyncReady() != 0;
}

static bool rmb_tcl_deliver(void)
{
    if (!rmb_tcl_interp || !Tcl_AsyncReady() || Tcl_AsyncInvoke(rmb_tcl_interp, TCL_OK) == TCL_OK)
        return true;
    rmb_fail(RMB_EFOREIGN, "a signal handler raised an error");
    return false;
}

static const rmb_policy rmb_tcl_policy = {rmb_signal_run, rmb_tcl_pending, rmb_tcl_deliver, true};
#define RMB_ENTER rmb_tcl_interp = interp

/* Lost-lock news in the event loop: a file handler on the client's event
   fd drains the events and calls ::redmutex::_lost_event id state owner for
   each, at global level, on the interpreter's own thread. */
typedef struct rmb_tcl_watch {
    Tcl_Interp *interp;
    rmb_client *client;
    int fd;
} rmb_tcl_watch;

static void rmb_tcl_events_ready(ClientData data, int mask)
{
    rmb_tcl_watch *w = data;
    rmb_event ev;
    (void)mask;
    rmb_tcl_interp = w->interp;
    Tcl_Preserve(w->interp);
    while (rmb_next_event(w->client, &ev) == 0 && ev.has) {
        Tcl_Obj *cmd[4] = {Tcl_NewStringObj("::redmutex::_lost_event", -1), Tcl_NewWideIntObj((Tcl_WideInt)ev.lock_id),
                           Tcl_NewStringObj(rmb_state_name(ev.state), -1), Tcl_NewStringObj(ev.owner, -1)};
        for (int i = 0; i < 4; i++)
            Tcl_IncrRefCount(cmd[i]);
        if (Tcl_EvalObjv(w->interp, 4, cmd, TCL_EVAL_GLOBAL) != TCL_OK)
            Tcl_BackgroundException(w->interp, TCL_ERROR);
        for (int i = 0; i < 4; i++)
            Tcl_DecrRefCount(cmd[i]);
    }
    rmb_error_clear();
    Tcl_Release(w->interp);
}

static void rmb_tcl_unwatch(rmb_client *c)
{
    rmb_tcl_watch *w = c->lang;
    Tcl_DeleteFileHandler(w->fd);
    Tcl_Release(w->interp);
    ckfree((char *)w);
    c->lang = NULL;
}

static int rmb_tcl_watch_events(Tcl_Interp *interp, rmb_client *c)
{
    if (c->lang)
        return 0;
    int fd = redmutex_client_event_fd(c->ptr);
    if (fd < 0)
        return rmb_check(fd);
    rmb_tcl_watch *w = (rmb_tcl_watch *)ckalloc(sizeof *w);
    w->interp = interp;
    w->client = c;
    w->fd = fd;
    Tcl_Preserve(interp);
    c->lang = w;
    c->lang_free = rmb_tcl_unwatch;
    Tcl_CreateFileHandler(fd, TCL_READABLE, rmb_tcl_events_ready, w);
    return 0;
}
%}

%{
/* Log messages: the proc ::redmutex::log {level message} if there is one
   (errors in it are ignored, never raised as background errors), else a
   line on stderr. The call's own result is kept. */
static void rmb_tcl_deliver_logs(Tcl_Interp *interp)
{
    int level;
    char message[RMB_LOG_MESSAGE_MAX];
    Tcl_InterpState saved = Tcl_SaveInterpState(interp, TCL_OK);
    while (rmb_log_next(&level, message, sizeof message)) {
        if (Tcl_FindCommand(interp, "::redmutex::log", NULL, TCL_GLOBAL_ONLY)) {
            Tcl_Obj *cmd[3] = {Tcl_NewStringObj("::redmutex::log", -1), Tcl_NewStringObj(rmb_log_level_name(level), -1),
                               Tcl_NewStringObj(message, -1)};
            for (int i = 0; i < 3; i++)
                Tcl_IncrRefCount(cmd[i]);
            (void)Tcl_EvalObjv(interp, 3, cmd, TCL_EVAL_GLOBAL);
            for (int i = 0; i < 3; i++)
                Tcl_DecrRefCount(cmd[i]);
        } else {
            Tcl_Channel err = Tcl_GetStdChannel(TCL_STDERR);
            if (err) {
                char line[RMB_LOG_MESSAGE_MAX + 32];
                snprintf(line, sizeof line, "redmutex: %s: %s\n", rmb_log_level_name(level), message);
                Tcl_WriteChars(err, line, -1);
                Tcl_Flush(err);
            }
        }
    }
    Tcl_RestoreInterpState(interp, saved);
}

#define RMB_THROW rmb_tcl_error(interp); SWIG_fail
#define RMB_DELIVER_LOGS() rmb_tcl_deliver_logs(interp)
%}
/* A dict of path -> number (see bindings/common/observe.c). */
%typemap(out) rmb_stats {
    if (!rmb_stats_get_failed(&$1)) {
        Tcl_Obj *d = Tcl_NewDictObj();
        for (size_t i = 0; i < $1.n; i++)
            Tcl_DictObjPut(interp, d, Tcl_NewStringObj($1.items[i].key, -1), Tcl_NewDoubleObj($1.items[i].value));
        rmb_stats_free(&$1);
        Tcl_SetObjResult(interp, d);
    }
}

%typemap(in) rmb_value { rmb_from_tcl(&$1, $input); }
%typemap(default) rmb_value { rmb_classify_none(&$1); }

%typemap(in) const rmb_list * (rmb_list list) {
    Tcl_Size_compat n = 0;
    Tcl_Obj **items = NULL;
    list.n = 0;
    list.too_long = false;
    if (Tcl_ListObjGetElements(NULL, $input, &n, &items) == TCL_OK && n > 1) {
        list.too_long = n > RMB_LIST_MAX;
        for (int i = 0; i < n && i < RMB_LIST_MAX; i++)
            rmb_from_tcl(&list.items[list.n++], items[i]);
    } else {
        rmb_from_tcl(&list.items[list.n++], $input);
    }
    $1 = &list;
}

/* Options are -name value pairs after the other arguments. */
%typemap(default) (...) (rmb_kwargs kwargs) { kwargs.n = 0; kwargs.too_many = kwargs.odd = false; $1 = &kwargs; }
%typemap(in) (...) {
    rmb_kwargs *kw = (rmb_kwargs *)$1;
    int first = (int)(&$input - objv);
    kw->odd = (objc - first) % 2 != 0;
    for (int i = first; i + 1 < objc; i += 2) {
        if (kw->n == RMB_KWARGS_MAX) {
            kw->too_many = true;
            break;
        }
        rmb_from_tcl(&kw->keys[kw->n], objv[i]);
        rmb_from_tcl(&kw->values[kw->n], objv[i + 1]);
        kw->n++;
    }
}

%typemap(out) rmb_opt_num { Tcl_SetObjResult(interp, $1.has ? Tcl_NewDoubleObj($1.v) : Tcl_NewObj()); }
%typemap(out) rmb_opt_int { Tcl_SetObjResult(interp, $1.has ? Tcl_NewWideIntObj((Tcl_WideInt)$1.v) : Tcl_NewObj()); }
%typemap(out) rmb_int { Tcl_SetObjResult(interp, Tcl_NewWideIntObj((Tcl_WideInt)$1)); }
%typemap(out) rmb_symbol { Tcl_SetObjResult(interp, Tcl_NewStringObj($1, -1)); }
/* {lock_id state owner} (owner "" for a plain lock's own hold), or "". */
%typemap(out) rmb_event {
    Tcl_Obj *list = Tcl_NewListObj(0, NULL);
    if ($1.has) {
        Tcl_ListObjAppendElement(NULL, list, Tcl_NewWideIntObj((Tcl_WideInt)$1.lock_id));
        Tcl_ListObjAppendElement(NULL, list, Tcl_NewStringObj(rmb_state_name($1.state), -1));
        Tcl_ListObjAppendElement(NULL, list, Tcl_NewStringObj($1.owner, -1));
    }
    Tcl_SetObjResult(interp, list);
}
%typemap(in, numinputs=0) Tcl_Interp *interp { $1 = interp; }
/* Tcl's stock pointer typemap ignores %newobject: these objects are new
   references, owned by the command that represents them. */
%typemap(out) rmb_lock *, rmb_guard * {
    Tcl_SetObjResult(interp, SWIG_NewInstanceObj(SWIG_as_voidptr($1), $1_descriptor, $owner));
}

%{
#if TCL_MAJOR_VERSION > 8
typedef Tcl_Size Tcl_Size_compat;
#else
typedef int Tcl_Size_compat;
#endif
%}

/* redmutex::with_lock lock ?-timeout seconds? script: a C command, like
   `if`, so the script runs in the caller's frame, return, break and continue
   pass through, and nothing can slip in between acquiring and evaluating. */
%wrapper %{
static int rmb_tcl_with_lock(ClientData unused, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    rmb_lock *l = NULL;
    rmb_kwargs kw = {0};
    bool sem = false;
    (void)unused;
    int saved_errno = errno;
    rmb_error_clear();
    rmb_tcl_interp = interp;
    if (objc < 3 || objc % 2 == 0) {
        rmb_fail(REDMUTEX_EINVAL, "wrong # args: should be \"redmutex::with_lock lock ?-timeout seconds? script\"");
    } else if (!(sem = SWIG_IsOK(SWIG_ConvertPtr(objv[1], (void **)&l, SWIGTYPE_p_rmb_sem, 0)) && l) &&
               (!SWIG_IsOK(SWIG_ConvertPtr(objv[1], (void **)&l, SWIGTYPE_p_rmb_lock, 0)) || !l)) {
        rmb_fail(REDMUTEX_EINVAL, "redmutex::with_lock: \"%s\" is not a redmutex lock or semaphore",
                 Tcl_GetString(objv[1]));
    } else if (rmb_self(l, sem ? RMB_TYPE_SEMAPHORE : RMB_TYPE_LOCK) == 0) {
        for (int i = 2; i + 1 < objc - 1 && kw.n < RMB_KWARGS_MAX; i += 2, kw.n++) {
            rmb_from_tcl(&kw.keys[kw.n], objv[i]);
            rmb_from_tcl(&kw.values[kw.n], objv[i + 1]);
        }
        kw.too_many = objc - 3 > 2 * RMB_KWARGS_MAX;
    }
    rmb_guard *g = rmb_error_pending()->code ? NULL : rmb_guard_new(l, &kw);
    errno = saved_errno;
    if (!g) {
        rmb_tcl_error(interp);
        return TCL_ERROR;
    }
    int code = Tcl_EvalObjEx(interp, objv[objc - 1], 0);
    saved_errno = errno;
    if (code == TCL_ERROR) {
        rmb_guard_free(g); /* releases; the script's error is what the caller sees */
        errno = saved_errno;
        Tcl_AppendObjToErrorInfo(interp, Tcl_ObjPrintf("\n    (\"redmutex::with_lock\" body line %d)",
                                                       Tcl_GetErrorLine(interp)));
        return TCL_ERROR;
    }
    rmb_error_clear();
    int rc = rmb_guard_end(g);
    rmb_guard_free(g);
    errno = saved_errno;
    if (rc != 0) {
        rmb_tcl_error(interp);
        return TCL_ERROR;
    }
    return code;
}
%}

%init %{
    rmb_set_policy(&rmb_tcl_policy);
    Tcl_CreateObjCommand(interp, "::redmutex::with_lock", rmb_tcl_with_lock, NULL, NULL);
%}
#endif

/* ======================================================================== */
/* Lua                                                                       */
/* ======================================================================== */
#if defined(SWIGLUA)
%{
static void rmb_from_lua(lua_State *L, rmb_value *v, int index)
{
    size_t len;
    rmb_classify_none(v);
    v->type = luaL_typename(L, index);
    switch (lua_type(L, index)) {
    case LUA_TNONE: case LUA_TNIL: v->kind = RMB_NIL; break;
    case LUA_TBOOLEAN:
        v->kind = RMB_BOOL;
        v->i = v->truth = lua_toboolean(L, index);
        break;
    case LUA_TNUMBER:
        v->numeric = true;
        v->d = lua_tonumber(L, index);
        v->integral = lua_isinteger(L, index);
        v->kind = v->integral ? RMB_INT : RMB_FLOAT;
        v->i = v->integral ? (int64_t)lua_tointeger(L, index) : 0;
        break;
    case LUA_TSTRING:
        v->kind = RMB_STRING;
        v->s = lua_tolstring(L, index, &len);
        v->len = len;
        break;
    default: v->kind = RMB_OTHER;
    }
}

/* Errors are tables {code=, name=, message=} whose metatable prints them. */
static int rmb_lua_error_tostring(lua_State *L)
{
    lua_getfield(L, 1, "name");
    lua_getfield(L, 1, "message");
    lua_pushfstring(L, "redmutex.%s: %s", lua_tostring(L, -2), lua_tostring(L, -1));
    return 1;
}

static void rmb_lua_push_error(lua_State *L)
{
    rmb_error *e = rmb_error_pending();
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, e->code);
    lua_setfield(L, -2, "code");
    lua_pushstring(L, rmb_error_class_for(e->code)->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, e->message);
    lua_setfield(L, -2, "message");
    luaL_setmetatable(L, "redmutex.Error");
    rmb_error_clear();
}

typedef int rmb_results;  /* values a method left on the stack */
typedef int rmb_lua_fn;   /* stack index of a function argument */

/* Lua has no signal handlers of its own; lua.c's Ctrl-C handler (and those
   of hosts and libraries written the same way) set a hook that raises an
   error at the next Lua instruction. A hook cannot run inside C, so a signal
   that set one ends the wait with InterruptedWait, holding nothing, and the
   hook runs as soon as Lua does (lua.c's raises "interrupted!"). A signal
   that set no hook was not Lua's: the wait goes on. */
static _Thread_local struct rmb_lua_hooks {
    lua_State *L, *main; /* of the method running on this thread, and its main thread */
    lua_Hook hook, main_hook;
    int mask, main_mask;
} rmb_lua_at_entry;

static void rmb_lua_enter(lua_State *L)
{
    struct rmb_lua_hooks *h = &rmb_lua_at_entry;
    h->L = L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    h->main = lua_tothread(L, -1);
    lua_pop(L, 1);
    h->hook = lua_gethook(L);
    h->mask = lua_gethookmask(L);
    h->main_hook = h->main ? lua_gethook(h->main) : NULL;
    h->main_mask = h->main ? lua_gethookmask(h->main) : 0;
}

static bool rmb_lua_pending(void)
{
    const struct rmb_lua_hooks *h = &rmb_lua_at_entry;
    return h->L && (lua_gethook(h->L) != h->hook || lua_gethookmask(h->L) != h->mask ||
                    (h->main && (lua_gethook(h->main) != h->main_hook || lua_gethookmask(h->main) != h->main_mask)));
}

static bool rmb_lua_deliver(void)
{
    return !rmb_lua_pending();
}

static const rmb_policy rmb_lua_policy = {rmb_signal_run, rmb_lua_pending, rmb_lua_deliver, true};
#define RMB_ENTER rmb_lua_enter(L)

/* __gc of every class: SWIG's destroys an object each time it is called, and
   a script may call it by hand; this one destroys it once. */
static int rmb_lua_gc(lua_State *L)
{
    swig_lua_userdata *usr = (swig_lua_userdata *)lua_touserdata(L, 1);
    if (usr && usr->own) {
        swig_lua_class *cls = (swig_lua_class *)usr->type->clientdata;
        usr->own = 0;
        if (cls && cls->destructor)
            cls->destructor(usr->ptr);
    }
    return 0;
}
%}

%{
/* Log messages: redmutex.on_log(level, message) if the module has such a
   function (its errors are ignored), else a line on stderr. */
static void rmb_lua_deliver_logs(lua_State *L)
{
    int level;
    char message[RMB_LOG_MESSAGE_MAX];
    int top = lua_gettop(L);
    while (rmb_log_next(&level, message, sizeof message)) {
        lua_getglobal(L, "package");
        bool handled = false;
        if (lua_istable(L, -1) && lua_getfield(L, -1, "loaded") == LUA_TTABLE &&
            lua_getfield(L, -1, "redmutex") == LUA_TTABLE && lua_getfield(L, -1, "on_log") == LUA_TFUNCTION) {
            lua_pushstring(L, rmb_log_level_name(level));
            lua_pushstring(L, message);
            handled = true;
            (void)lua_pcall(L, 2, 0, 0);
        }
        lua_settop(L, top);
        if (!handled)
            fprintf(stderr, "redmutex: %s: %s\n", rmb_log_level_name(level), message);
    }
}

#define RMB_THROW rmb_lua_push_error(L); SWIG_fail
#define RMB_DELIVER_LOGS() rmb_lua_deliver_logs(L)
%}
/* A table of path -> number (see bindings/common/observe.c). */
%typemap(out) rmb_stats {
    if (rmb_stats_get_failed(&$1)) {
        lua_pushnil(L);
    } else {
        lua_createtable(L, 0, (int)$1.n);
        for (size_t i = 0; i < $1.n; i++) {
            lua_pushnumber(L, $1.items[i].value);
            lua_setfield(L, -2, $1.items[i].key);
        }
        rmb_stats_free(&$1);
    }
    SWIG_arg++;
}

%typemap(in) rmb_value { rmb_from_lua(L, &$1, $input); }
%typemap(default) rmb_value { rmb_classify_none(&$1); }
%typemap(in, numinputs=0) lua_State *L { $1 = L; }
%typemap(in, checkfn="lua_isfunction") rmb_lua_fn { $1 = $input; }
%typemap(out) rmb_results { SWIG_arg += $1; }

%typemap(in) const rmb_list * (rmb_list list) {
    list.n = 0;
    list.too_long = false;
    if (lua_istable(L, $input)) {
        lua_Integer n = luaL_len(L, $input);
        list.too_long = n > RMB_LIST_MAX;
        for (lua_Integer i = 1; i <= n && i <= RMB_LIST_MAX; i++) {
            lua_geti(L, $input, i); /* the table keeps the string alive */
            rmb_from_lua(L, &list.items[list.n++], -1);
            lua_pop(L, 1);
        }
    } else {
        rmb_from_lua(L, &list.items[list.n++], $input);
    }
    $1 = &list;
}

/* Options are one trailing table: client:lock("name", {lease = 5}). */
%typemap(default) (...) (rmb_kwargs kwargs) { kwargs.n = 0; kwargs.too_many = kwargs.odd = false; $1 = &kwargs; }
%typemap(in) (...) {
    rmb_kwargs *kw = (rmb_kwargs *)$1;
    if (!lua_isnoneornil(L, $input)) {
        if (!lua_istable(L, $input)) {
            rmb_fail(REDMUTEX_EINVAL, "options must be a table, not %s", luaL_typename(L, $input));
            RMB_THROW;
        }
        lua_pushnil(L);
        while (lua_next(L, $input) != 0) {
            if (kw->n == RMB_KWARGS_MAX) {
                kw->too_many = true;
                lua_pop(L, 2);
                break;
            }
            /* lua_next needs the key as it is: classify without converting. */
            rmb_from_lua(L, &kw->keys[kw->n], -2);
            rmb_from_lua(L, &kw->values[kw->n], -1);
            kw->n++;
            lua_pop(L, 1);
        }
    }
}

%typemap(out) rmb_opt_num { if ($1.has) lua_pushnumber(L, $1.v); else lua_pushnil(L); SWIG_arg++; }
%typemap(out) rmb_opt_int { if ($1.has) lua_pushinteger(L, $1.v); else lua_pushnil(L); SWIG_arg++; }
%typemap(out) rmb_int { lua_pushinteger(L, $1); SWIG_arg++; }
%typemap(out) rmb_symbol { lua_pushstring(L, $1); SWIG_arg++; }
/* lock_id, state, owner (nil for a plain lock's own hold), or nil. */
%typemap(out) rmb_event {
    if ($1.has) {
        lua_pushinteger(L, (lua_Integer)$1.lock_id);
        lua_pushstring(L, rmb_state_name($1.state));
        if ($1.owner[0]) lua_pushstring(L, $1.owner); else lua_pushnil(L);
        SWIG_arg += 3;
    } else {
        lua_pushnil(L);
        SWIG_arg++;
    }
}

%init %{
    rmb_set_policy(&rmb_lua_policy);
    {
        static const char *const classes[] = {"Client", "Lock", "Guard", "Semaphore"};
        for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
            SWIG_Lua_get_class_metatable(L, classes[i]);
            if (lua_istable(L, -1)) {
                lua_pushcfunction(L, rmb_lua_gc);
                lua_setfield(L, -2, "__gc");
            }
            lua_pop(L, 1);
        }
    }
    if (luaL_newmetatable(L, "redmutex.Error")) {
        lua_pushcfunction(L, rmb_lua_error_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    /* module.error_parents: class name -> the class it derives from (redmutex.is walks it). */
    lua_newtable(L);
    for (const rmb_error_class *c = rmb_error_classes + 1; c->name; c++) {
        lua_pushstring(L, c->parent ? c->parent : rmb_error_classes[0].name);
        lua_setfield(L, -2, c->name);
    }
    lua_setfield(L, -2, "error_parents");
%}
#endif

/* ======================================================================== */
/* One exception block for every language                                    */
/* ======================================================================== */

/* errno is the caller's: Perl's die, for one, exits with $!. */
%exception {
    int rmb_saved_errno = errno;
    RMB_ENTER;
    rmb_error_clear();
    $action
    if (rmb_log_pending()) /* the library's log messages, on this language's thread */
        RMB_DELIVER_LOGS();
    errno = rmb_saved_errno;
    if (rmb_error_pending()->code) {
        RMB_THROW;
    }
}

/* ======================================================================== */
/* The classes                                                               */
/* ======================================================================== */

%rename(Client) rmb_client;
%rename(Lock) rmb_lock;
%rename(Guard) rmb_guard;
%rename(Semaphore) rmb_sem;
%newobject rmb_client::semaphore;
%newobject rmb_sem::guard;
%newobject rmb_client::lock;
%newobject rmb_client::rlock;
%newobject rmb_client::fair_lock;
%newobject rmb_client::read_lock;
%newobject rmb_client::write_lock;
%newobject rmb_lock::guard;

/* Every method checks its self first: a language hands over whatever it was
   given - nil, undef, an object it freed, a pointer string made up by a
   script - and only a live object of the class may be used. (Declared
   before the typedefs below: SWIG names self's type `struct rmb_lock *`.) */
%typemap(check) struct rmb_client *self {
    if (rmb_self($1, RMB_TYPE_CLIENT) != 0) {
        RMB_THROW;
    }
}
%typemap(check) struct rmb_lock *self {
    if (rmb_self($1, RMB_TYPE_LOCK) != 0) {
        RMB_THROW;
    }
}
%typemap(check) struct rmb_guard *self {
    if (rmb_self($1, RMB_TYPE_GUARD) != 0) {
        RMB_THROW;
    }
}
%typemap(check) struct rmb_sem *self {
    if (rmb_self($1, RMB_TYPE_SEMAPHORE) != 0) {
        RMB_THROW;
    }
}

#if defined(SWIGRUBY)
/* An object allocated without its constructor (Lock.allocate, or the copy
   that dup makes before initialize_copy refuses it) has no C object: the
   self check says so, rather than SWIG's message, which inspects it. */
%typemap(in) struct rmb_client *self (void *argp = 0, int res = 0), struct rmb_lock *self (void *argp = 0, int res = 0),
             struct rmb_sem *self (void *argp = 0, int res = 0) {
    res = SWIG_ConvertPtr($input, &argp, $descriptor, 0);
    if (!SWIG_IsOK(res) && res != SWIG_ObjectPreviouslyDeletedError) {
        SWIG_exception_fail(SWIG_ArgError(res), Ruby_Format_TypeError("", "$type", "$symname", 1, $input));
    }
    $1 = ($ltype)argp;
}
#endif

typedef struct rmb_client {} rmb_client;
typedef struct rmb_lock {} rmb_lock;
typedef struct rmb_sem {} rmb_sem;
#if !defined(SWIGRUBY)
typedef struct rmb_guard {} rmb_guard;
#endif


%extend rmb_client {
    /* Client(url_or_urls, options...): one URL or a list of them (Redlock). */
    rmb_client(const rmb_list *urls, ...) {
        RMB_KWARGS(urls, kwargs);
        return rmb_client_new(urls, kwargs);
    }

    /* Destroyed once per object of the language; a second destruction (a
       destructor called by hand) finds it gone and does nothing. */
    ~rmb_client() {
        if (rmb_live_is($self, RMB_TYPE_CLIENT))
            rmb_client_unref($self);
    }

    /* A plain, non-reentrant lock (redis-py Lock wire format). */
    rmb_lock *lock(rmb_value name, ...) {
        RMB_KWARGS(name, kwargs);
        return rmb_lock_new($self, &name, REDMUTEX_KIND_LOCK, kwargs);
    }

    /* A reentrant lock (Redisson RLock wire format), owned by the calling thread. */
    rmb_lock *rlock(rmb_value name, ...) {
        RMB_KWARGS(name, kwargs);
        return rmb_lock_new($self, &name, REDMUTEX_KIND_RLOCK, kwargs);
    }

    /* A reentrant, first-come-first-served lock (Redisson RFairLock wire format), owned by the calling thread. */
    rmb_lock *fair_lock(rmb_value name, ...) {
        RMB_KWARGS(name, kwargs);
        return rmb_lock_new($self, &name, REDMUTEX_KIND_FAIR, kwargs);
    }

    /* The read side of a read-write lock (Redisson RReadWriteLock): shared, reentrant per thread. */
    rmb_lock *read_lock(rmb_value name, ...) {
        RMB_KWARGS(name, kwargs);
        return rmb_lock_new($self, &name, REDMUTEX_KIND_READ, kwargs);
    }

    /* The write side of the same read-write lock: exclusive, reentrant per thread. */
    rmb_lock *write_lock(rmb_value name, ...) {
        RMB_KWARGS(name, kwargs);
        return rmb_lock_new($self, &name, REDMUTEX_KIND_WRITE, kwargs);
    }

    /* A semaphore with `permits` permits (Redisson RPermitExpirableSemaphore
       wire format): at most that many holders at once, across processes. */
    rmb_sem *semaphore(rmb_value name, rmb_value permits, ...) {
        RMB_KWARGS(permits, kwargs);
        return rmb_semaphore_new($self, &name, &permits, kwargs);
    }

    /* Releases held locks (unless leave_locks_on_close) and stops background work. */
    void close() {
        rmb_close($self);
    }

    bool closed() {
        return atomic_load(&$self->closed);
    }

    const char *id() {
        return redmutex_client_id($self->ptr);
    }

    rmb_int server_count() {
        return (rmb_int)redmutex_client_server_count($self->ptr);
    }

    /* A file descriptor readable while lost-lock news is queued: watch it in
       an event loop, then call next_event until there is none. Do not read
       or close it. */
    rmb_int event_fd() {
        return (rmb_int)rmb_check(redmutex_client_event_fd($self->ptr));
    }

    /* The oldest lost-lock news: lock id, state (lost, renewal_failing, held
       again) and owner; none when the queue is empty. Never blocks. */
    rmb_event next_event() {
        rmb_event ev;
        rmb_next_event($self, &ev);
        return ev;
    }

    /* What the client has counted (no I/O): a map of "path" => number, e.g.
       "acquire_wait_seconds.lock.acquired.count", "hold_seconds.rlock.sum",
       "locks_held", "renewals.lost", "servers[URL].errors.timeout"; see
       docs/observability.md. */
    rmb_stats stats() {
        rmb_stats s;
        if (rmb_stats_get($self, &s) != 0)
            s.items = NULL;
        return s;
    }

    /* News dropped because nobody read the queue (it holds 1024). */
    rmb_int events_dropped() {
        return (rmb_int)redmutex_client_events_dropped($self->ptr);
    }

    /* "<client id>:<thread id>": the calling thread's owner id of reentrant locks. */
    const char *thread_owner() {
        static _Thread_local char buf[REDMUTEX_CLIENT_ID_LEN + 32];
        return rmb_check(redmutex_client_thread_owner(buf, sizeof buf, $self->ptr)) == 0 ? buf : NULL;
    }
}

%extend rmb_lock {
    /* Locks are made by a client; the class's own constructor only says so. */
    rmb_lock() {
        rmb_fail(REDMUTEX_EINVAL, "a Lock is made by a client: client.lock(name), rlock, fair_lock, read_lock "
                                  "or write_lock");
        return NULL;
    }

    ~rmb_lock() {
        if (rmb_live_is($self, RMB_TYPE_LOCK))
            rmb_lock_unref($self);
    }

    /* True when held; false when the wait (nil/-1: forever, 0: try once) ran out. */
    bool acquire(rmb_value timeout) {
        int64_t ms;
        if (timeout.kind == RMB_MISSING)
            ms = REDMUTEX_WAIT_FOREVER;
        else if (rmb_seconds(&ms, &timeout, "timeout", true, true) != 0)
            return false;
        int rc = rmb_acquire($self, ms);
        if (rc == REDMUTEX_ETIMEDOUT)
            rmb_error_clear();
        return rc == 0;
    }

    /* Releases one hold: NotOwnedError if not held, LockLostError if lost meanwhile. */
    void release() {
        rmb_release($self);
    }

    /* Anyone holds it, as the servers see it now. */
    bool locked() {
        int64_t out = 0;
        rmb_query_lock($self, RMB_QUERY_LOCKED, 0, &out);
        return out != 0;
    }

    /* This owner holds it, as the servers see it now. */
    bool owned() {
        int64_t out = 0;
        rmb_query_lock($self, RMB_QUERY_OWNED, 0, &out);
        return out != 0;
    }

    /* This owner's hold is known to be lost (no I/O). */
    bool lost() {
        redmutex_state s = REDMUTEX_STATE_UNLOCKED;
        rmb_check(redmutex_lock_state(&s, $self->ptr, $self->owner));
        return s == REDMUTEX_STATE_LOST;
    }

    /* unlocked, held, renewal_failing or lost (no I/O). */
    rmb_symbol state() {
        redmutex_state s = REDMUTEX_STATE_UNLOCKED;
        rmb_check(redmutex_lock_state(&s, $self->ptr, $self->owner));
        return rmb_state_name(s);
    }

    /* Seconds the servers keep the lock; nil when nobody holds it or it has no TTL. */
    rmb_opt_num ttl() {
        int64_t ms = -2;
        rmb_opt_num r = {false, 0};
        if (rmb_query_lock($self, RMB_QUERY_TTL, 0, &ms) == 0 && ms >= 0)
            r.has = true, r.v = ms / 1000.0;
        return r;
    }

    /* This owner's hold count on the servers (reentrancy depth; 1 or 0 for a plain lock). */
    rmb_int hold_count() {
        int64_t n = 0;
        rmb_query_lock($self, RMB_QUERY_HOLD_COUNT, 0, &n);
        return (rmb_int)n;
    }

    /* Seconds this owner's hold is still known to be valid (0 when not held). */
    double validity() {
        int64_t ms = 0;
        rmb_check(redmutex_lock_validity(&ms, $self->ptr, $self->owner));
        return ms > 0 ? ms / 1000.0 : 0.0;
    }

    /* The fencing token of the current hold; nil when fencing is off or not held. */
    rmb_opt_int fence() {
        int64_t token = 0;
        rmb_opt_int r = {false, 0};
        if (!$self->fencing)
            return r;
        int rc = redmutex_lock_fence(&token, $self->ptr, $self->owner);
        if (rc == 0)
            r.has = true, r.v = token;
        else if (rc != REDMUTEX_ENOTOWNER)
            rmb_check(rc);
        return r;
    }

    /* Adds seconds to the lease (replace: sets it) if this owner still holds it. */
    void extend(rmb_value seconds, rmb_value replace) {
        int64_t ms;
        bool set = false;
        if (rmb_seconds(&ms, &seconds, "seconds", false, false) == 0 && rmb_flag(&set, &replace, "replace") == 0)
            rmb_query_lock($self, set ? RMB_QUERY_EXTEND_REPLACE : RMB_QUERY_EXTEND, ms, NULL);
    }

    /* Deletes the lock whoever holds it and wakes waiters; true if one was deleted. */
    bool force_release() {
        int64_t out = 0;
        rmb_query_lock($self, RMB_QUERY_FORCE_RELEASE, 0, &out);
        return out != 0;
    }

    const char *name() {
        return redmutex_lock_name($self->ptr);
    }

    rmb_symbol kind() {
        switch (redmutex_lock_kind($self->ptr)) {
        case REDMUTEX_KIND_RLOCK:
            return "rlock";
        case REDMUTEX_KIND_FAIR:
            return "fair";
        case REDMUTEX_KIND_READ:
            return "read";
        case REDMUTEX_KIND_WRITE:
            return "write";
        default:
            return "lock";
        }
    }

    /* The explicit owner id given at creation, or nil for the default owner. */
    const char *owner() {
        return $self->owner;
    }

    /* The handle's process-unique id: lost-lock news names the lock by it. */
    rmb_int id() {
        return (rmb_int)redmutex_lock_id($self->ptr);
    }

#if defined(SWIGTCL)
    /* Lets the event loop report this lock's client's lost-lock news to
       ::redmutex::_lost_event (once per client; see redmutex::on_lost). */
    void watch_events(Tcl_Interp *interp) {
        rmb_tcl_watch_events(interp, $self->client);
    }
#endif

#if defined(SWIGRUBY)
    /* lock.synchronize(timeout: s) { ... }: the block's value; LockTimeout
       when the wait runs out; LockLostError after a block that finished
       while the lease was lost. The block's own exception always wins. */
    VALUE synchronize(...) {
        RMB_KWARGS(self, kwargs);
        rb_need_block();
        rmb_guard *g = rmb_guard_new($self, kwargs);
        if (!g)
            return Qnil;
        int state = 0;
        VALUE result = rb_protect(rmb_ruby_yield, Qnil, &state);
        rmb_guard_end(g);
        rmb_guard_free(g);
        if (state) {
            rmb_error_clear();
            rb_jump_tag(state);
        }
        return result;
    }
#else
    /* A hold released by guard.release() or when the guard is destroyed. */
    rmb_guard *guard(...) {
        RMB_KWARGS(self, kwargs);
        return rmb_guard_new($self, kwargs);
    }
#endif

#if defined(SWIGLUA)
    /* lock:with(fn, {timeout = s}): fn's results; the lock is released
       whether fn returns or raises; fn's error always wins. */
    rmb_results with(lua_State *L, rmb_lua_fn fn, ...) {
        RMB_KWARGS(fn, kwargs);
        int base = lua_gettop(L);
        rmb_guard *g = rmb_guard_new($self, kwargs);
        if (!g)
            return 0;
        lua_pushvalue(L, fn);
        if (lua_pcall(L, 0, LUA_MULTRET, 0) != LUA_OK) {
            rmb_guard_free(g);
            lua_error(L); /* fn's error, as it was */
        }
        rmb_guard_end(g);
        rmb_guard_free(g);
        return lua_gettop(L) - base;
    }
#endif
}

%extend rmb_sem {
    rmb_sem() {
        rmb_fail(REDMUTEX_EINVAL, "a Semaphore is made by a client: client.semaphore(name, permits)");
        return NULL;
    }

    ~rmb_sem() {
        if (rmb_live_is($self, RMB_TYPE_SEMAPHORE))
            rmb_lock_unref($self);
    }

    /* Takes `permits` permits (default 1) as one hold within `timeout`
       seconds (nil/-1: forever, 0: try once): its permit id, or nil when
       the wait ran out. */
    const char *acquire(rmb_value timeout, rmb_value permits) {
        static _Thread_local char permit[REDMUTEX_PERMIT_ID_SIZE];
        int64_t ms, n = 1;
        if (timeout.kind == RMB_MISSING)
            ms = REDMUTEX_WAIT_FOREVER;
        else if (rmb_seconds(&ms, &timeout, "timeout", true, true) != 0)
            return NULL;
        if (permits.kind != RMB_MISSING && permits.kind != RMB_NIL) {
            if (!permits.numeric || !permits.integral || permits.kind == RMB_BOOL || permits.i < 1) {
                rmb_fail(REDMUTEX_EINVAL, "permits must be a whole number >= 1, not %s", permits.type);
                return NULL;
            }
            n = permits.i;
        }
        int rc = rmb_acquire_permit($self, ms, n, permit);
        if (rc == REDMUTEX_ETIMEDOUT)
            rmb_error_clear();
        return rc == 0 ? permit : NULL;
    }

    /* Gives back a permit: NotOwnedError if it is not held, LockLostError if it was lost meanwhile. */
    void release(const char *permit_id) {
        if (!permit_id)
            rmb_fail(REDMUTEX_EINVAL, "release needs the permit id that acquire returned");
        else
            rmb_release_permit($self, permit_id);
    }

    /* Permits an acquisition could take now, as the servers see it. */
    rmb_int available() {
        int64_t out = 0;
        rmb_query_lock($self, RMB_QUERY_AVAILABLE, 0, &out);
        return (rmb_int)out;
    }

    /* The capacity the semaphore was made with. */
    rmb_int permits() {
        return (rmb_int)redmutex_semaphore_permits($self->sem);
    }

    const char *name() {
        return redmutex_semaphore_name($self->sem);
    }

    /* The handle's process-unique id: lost-permit news names the semaphore by it (the owner is the permit id). */
    rmb_int id() {
        return (rmb_int)redmutex_semaphore_id($self->sem);
    }

#if defined(SWIGRUBY)
    /* sem.synchronize(timeout: s) { ... }: the block runs holding one permit,
       given back however it ends; the block's value. LockTimeout when the
       wait runs out; LockLostError after a block that finished while the
       permit was lost. The block's own exception always wins. */
    VALUE synchronize(...) {
        RMB_KWARGS(self, kwargs);
        rb_need_block();
        rmb_guard *g = rmb_guard_new($self, kwargs);
        if (!g)
            return Qnil;
        int state = 0;
        VALUE result = rb_protect(rmb_ruby_yield, Qnil, &state);
        rmb_guard_end(g);
        rmb_guard_free(g);
        if (state) {
            rmb_error_clear();
            rb_jump_tag(state);
        }
        return result;
    }
#else
    /* One permit held until guard.release() or the guard is destroyed. */
    rmb_guard *guard(...) {
        RMB_KWARGS(self, kwargs);
        return rmb_guard_new($self, kwargs);
    }
#endif

#if defined(SWIGLUA)
    /* sem:with(fn, {timeout = s}): fn's results, run holding one permit,
       given back whether fn returns or raises; fn's error always wins. */
    rmb_results with(lua_State *L, rmb_lua_fn fn, ...) {
        RMB_KWARGS(fn, kwargs);
        int base = lua_gettop(L);
        rmb_guard *g = rmb_guard_new($self, kwargs);
        if (!g)
            return 0;
        lua_pushvalue(L, fn);
        if (lua_pcall(L, 0, LUA_MULTRET, 0) != LUA_OK) {
            rmb_guard_free(g);
            lua_error(L); /* fn's error, as it was */
        }
        rmb_guard_end(g);
        rmb_guard_free(g);
        return lua_gettop(L) - base;
    }
#endif
}

#if !defined(SWIGRUBY)
%extend rmb_guard {
    rmb_guard() {
        rmb_fail(REDMUTEX_EINVAL, "a Guard is made by a lock: lock.guard(timeout)");
        return NULL;
    }

    ~rmb_guard() {
        if (rmb_live_is($self, RMB_TYPE_GUARD))
            rmb_guard_free($self);
    }

    /* Releases the hold now (once; later calls do nothing). */
    void release() {
        rmb_guard_end($self);
    }

    bool held() {
        return atomic_load(&$self->held);
    }

#if defined(SWIGLUA)
    /* local g <close> = lock:guard(): released when g goes out of scope.
       Leaving by an error keeps that error; otherwise a release error
       (LockLostError) is raised. */
    void __close(rmb_value error) {
        rmb_guard_end($self);
        if (error.kind != RMB_NIL && error.kind != RMB_MISSING)
            rmb_error_clear();
    }
#endif
}
#endif
