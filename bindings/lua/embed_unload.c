/*
 * A program embedding Lua that closes its Lua state while the redmutex
 * module's client is still being closed in the background: lua_close()
 * collects the client (the core then releases its locks on a thread of its
 * own) and dlcloses the module. The module must stay mapped, or that thread
 * runs unmapped code. Used by spec/gc_spec.lua:  embed_unload URL
 */
#define _POSIX_C_SOURCE 200809L
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <stdio.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s URL\n", argv[0]);
        return 2;
    }
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    const char *code = "local client = require('redmutex').Client(...)\n"
                       "held = {}\n"
                       "for i = 1, 20 do held[i] = client:lock('lua:unload:' .. i); held[i]:acquire() end\n";
    if (luaL_loadstring(L, code) != LUA_OK || (lua_pushstring(L, argv[1]), lua_pcall(L, 1, 0, 0)) != LUA_OK) {
        fprintf(stderr, "%s\n", lua_tostring(L, -1));
        return 1;
    }
    lua_close(L);
    struct timespec pause = {0, 500 * 1000 * 1000}; /* the background close runs meanwhile */
    nanosleep(&pause, NULL);
    puts("ok");
    return 0;
}
