# Builds one language's module from the C that scripts/package.sh bundles under
# src/ (the files CMake builds): the core, the code every binding shares and
# SWIG's wrapper, linked to hiredis and OpenSSL. The including Makefile sets
# MODULE (the file to build), WRAPPER (src/redmutex_LANG.c) and LANG_CFLAGS
# (the interpreter's headers).
CC ?= cc
CFLAGS ?= -O2
# hiredis and OpenSSL: pkg-config's flags, or the directories a package manager
# found them in (HIREDIS_INCDIR, HIREDIS_LIBDIR, OPENSSL_INCDIR, OPENSSL_LIBDIR).
ifneq ($(HIREDIS_INCDIR)$(OPENSSL_INCDIR),)
DEPS_CFLAGS ?= $(addprefix -I,$(filter-out /usr/include,$(HIREDIS_INCDIR) $(OPENSSL_INCDIR)))
DEPS_LIBS ?= $(addprefix -L,$(HIREDIS_LIBDIR) $(OPENSSL_LIBDIR)) -lhiredis -lssl -lcrypto
else
DEPS_CFLAGS ?= $(shell pkg-config --cflags hiredis openssl 2>/dev/null)
DEPS_LIBS ?= $(shell pkg-config --libs hiredis openssl 2>/dev/null || echo -lhiredis -lssl -lcrypto)
endif

SOURCES := $(sort $(wildcard src/core/src/*.c src/common/*.c)) $(WRAPPER)
OBJECTS := $(SOURCES:.c=.o)
# C11 with the core's internal functions hidden, as in the CMake build.
ALL_CFLAGS = -std=c11 -fPIC -fvisibility=hidden -Isrc/core/include -Isrc/core/src -Isrc/common $(DEPS_CFLAGS) $(CFLAGS)

# Only the module's entry point is exported (src/exports.map). The module is
# never unloaded: a client freed by the garbage collector closes in a
# background thread of the core, which may outlive the interpreter's state.
$(MODULE): $(OBJECTS)
	$(CC) -shared $(LDFLAGS) -Wl,--version-script=src/exports.map -Wl,-z,nodelete -o $@ $(OBJECTS) $(DEPS_LIBS) -lpthread -lm

$(WRAPPER:.c=.o): ALL_CFLAGS += $(LANG_CFLAGS)
src/%.o: src/%.c
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

clean:
	rm -f $(OBJECTS) $(MODULE)

.PHONY: clean install
