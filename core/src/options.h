/*
 * Versioned options structs (options.c): defaults by version, and reading
 * only the bytes a caller's version has.
 */
#ifndef REDMUTEX_OPTIONS_H
#define REDMUTEX_OPTIONS_H

#include "internal.h"

/* ---- versioned options (options.c) --------------------------------- */

/** The byte size of an options struct up to and including `field`. */
#define RM_OPTIONS_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

typedef struct rm_options_layout {
    const char *what;     /* "client options" */
    const char *init_fn;  /* "redmutex_client_options_init" */
    const void *defaults; /* a struct of the current version with the defaults */
    const size_t *sizes;  /* sizes[v]: the struct's size in version v; sizes[0] unused */
    size_t n_sizes;       /* current version + 1 */
} rm_options_layout;

/** *_options_init(): writes the defaults of `version` (only its bytes) and the version. */
int rm_options_init(rm_err *err, void *opts, unsigned int version, const rm_options_layout *layout);
/**
 * Copies caller options of any known version into `out` (a struct of the
 * current version): defaults first, then the caller's bytes of its version.
 * opts NULL gives the defaults. REDMUTEX_EINVAL for an unknown version.
 */
int rm_options_load(rm_err *err, void *out, const void *opts, const rm_options_layout *layout, const char *fn);

#endif
