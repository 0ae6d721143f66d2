/* luarun: runs a Lua script file with the standard libraries, as the stock `lua` binary
 * would for `lua script.lua args...` (the crate the sources come from ships the library
 * only, without lua.c). Error messages go to stderr and make the exit status 1. */
#include <stdio.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: luarun script.lua [args...]\n");
        return 2;
    }
    lua_State *L = luaL_newstate();
    if (L == NULL) {
        fprintf(stderr, "luarun: cannot create a Lua state\n");
        return 1;
    }
    luaL_openlibs(L);
    lua_createtable(L, argc, 0);           /* the global `arg`, as lua.c sets it */
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    int status = luaL_dofile(L, argv[1]);
    if (status != LUA_OK) {
        fprintf(stderr, "luarun: %s\n", lua_tostring(L, -1));
        lua_close(L);
        return 1;
    }
    lua_close(L);
    return 0;
}
