/*
 * Versioned options structs. A struct only ever gains fields at its end, and
 * its `version` (the first field, a uint32_t) says which fields the caller's
 * struct has. Each kind of options keeps a table of its size per version, so
 * a program built against an older header, whose struct is shorter, is read
 * only as far as its version reaches; the newer fields take their defaults.
 * Reading further would read past the caller's object.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "options.h"

#include <string.h>

static int check_version(rm_err *err, const rm_options_layout *layout, uint32_t version, const char *fn)
{
    if (version >= 1 && version < layout->n_sizes)
        return 0;
    return rm_fail(err, REDMUTEX_EINVAL,
                   "%s: %s version %u is unknown (this library knows versions 1 to %zu; initialise the "
                   "struct with %s)",
                   fn, layout->what, version, layout->n_sizes - 1, layout->init_fn);
}

int rm_options_init(rm_err *err, void *opts, unsigned int version, const rm_options_layout *layout)
{
    if (!opts)
        return rm_fail(err, REDMUTEX_EINVAL, "%s: opts is NULL", layout->init_fn);
    int rc = check_version(err, layout, version, layout->init_fn);
    if (rc)
        return rc;
    memcpy(opts, layout->defaults, layout->sizes[version]);
    uint32_t v = version;
    memcpy(opts, &v, sizeof v);
    return 0;
}

int rm_options_load(rm_err *err, void *out, const void *opts, const rm_options_layout *layout, const char *fn)
{
    size_t current = layout->n_sizes - 1;
    memcpy(out, layout->defaults, layout->sizes[current]);
    if (!opts)
        return 0;
    uint32_t version;
    memcpy(&version, opts, sizeof version);
    int rc = check_version(err, layout, version, fn);
    if (rc)
        return rc;
    memcpy(out, opts, layout->sizes[version]);
    /* From here on the library works with the current layout. */
    uint32_t v = (uint32_t)current;
    memcpy(out, &v, sizeof v);
    return 0;
}
