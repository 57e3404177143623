#!/usr/bin/env bash
# test_install.sh: installs the build in SLUICE_BUILD_DIR into a temporary
# prefix (not in the loader's search path, like the README's /opt/sluice),
# then builds consumers every way the README says and runs them as users do:
# without LD_LIBRARY_PATH, finding the libraries by their rpath.
#  1. CMake find_package(sluice): sluice::sluice and sluice::sluice_static,
#     configured where hiredis's pkg-config file cannot be found;
#  2. pkg-config sluice (rpath) and sluice-static (no libsluice.so needed);
#  3. the README's first C example, compiled as written, runs;
#  4. libsluice-redis, when built: pkg-config sluice-redis and
#     sluice-redis-static, CMake sluice::sluice_redis (also without hiredis's
#     pkg-config file) and sluice::sluice_redis_static; the shared ways
#     must keep libsluice-redis.so.0 in NEEDED under --as-needed (Debian's
#     default); a program linked with the core alone loads libsluice-redis
#     from beside libsluice.so; with libsluice.so alone in a directory the
#     message names what was tried;
#  5. the loop adapters, when built (libsluice-uv, libsluice-event): a
#     program that decides through the non-blocking API on its loop, built
#     with pkg-config sluice-uv / sluice-uv-static (and -event) and CMake
#     sluice::sluice_uv / sluice::sluice_uv_static (and _event), each
#     linking nothing but the adapter for the loop library (the targets
#     and .pc files hand it on); the shared ways keep the adapter in
#     NEEDED, the static ones no libsluice at all; and the installed
#     libsluice.so.0 itself still links nothing but libc and pthreads.
# Run by ctest, which sets SLUICE_BUILD_DIR and SLUICE_SOURCE_DIR (and
# SLUICE_CMAKE, SLUICE_CC, SLUICE_SANITIZE_FLAGS).
set -uo pipefail

: "${SLUICE_BUILD_DIR:?SLUICE_BUILD_DIR is not set (run through ctest)}"
: "${SLUICE_SOURCE_DIR:?SLUICE_SOURCE_DIR is not set (run through ctest)}"
cmake_bin=${SLUICE_CMAKE:-cmake}
cc=${SLUICE_CC:-cc}
# A sanitized libsluice.so needs its runtime loaded first: build the
# consumers with the same sanitizer.
san=${SLUICE_SANITIZE_FLAGS:-}
unset LD_LIBRARY_PATH

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-install.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# run LOG CMD...: runs CMD quietly; shows its output when it fails.
run() {
    local log=$1
    shift
    if ! "$@" >"$log" 2>&1; then
        echo "command failed: $*" >&2
        cat "$log" >&2
        return 1
    fi
}

if ! run "$tmp/install.log" "$cmake_bin" --install "$SLUICE_BUILD_DIR" --prefix "$prefix"; then
    echo "FAIL: cmake --install $SLUICE_BUILD_DIR --prefix $prefix" >&2
    exit 1
fi

for f in include/sluice.h; do
    [ -f "$prefix/$f" ] || fail "not installed: $f"
done
[ -x "$prefix/bin/sluice" ] || [ -z "${SLUICE_BIN:-}" ] || fail "not installed: bin/sluice"
pc=$(find "$prefix" -name sluice.pc | head -n 1)
[ -n "$pc" ] || fail "not installed: sluice.pc"
[ -n "$(find "$prefix" -name sluice-static.pc)" ] || fail "not installed: sluice-static.pc"
cfg=$(find "$prefix" -name sluiceConfig.cmake | head -n 1)
[ -n "$cfg" ] || fail "not installed: sluiceConfig.cmake"
so=$(find "$prefix" -name 'libsluice.so.0' | head -n 1)
[ -n "$so" ] || fail "not installed: libsluice.so.0"
[ -n "$(find "$prefix" -name libsluice.a)" ] || fail "not installed: libsluice.a"
if [ "$failures" -ne 0 ]; then
    find "$prefix" >&2
    exit 1
fi
libdir=$(dirname "$so")
export PKG_CONFIG_PATH="$(dirname "$pc")"
want=$(sed -n 's/^#define SLUICE_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/sluice.h")
command -v pkg-config >/dev/null || fail "pkg-config not found (make deps installs it)"
command -v readelf >/dev/null || fail "readelf not found (make deps installs binutils)"
[ "$failures" -eq 0 ] || exit 1

# An empty pkg-config search path, but for the prefix: hiredis.pc hidden.
mkdir -p "$tmp/no-pc"
no_hiredis=(env PKG_CONFIG_LIBDIR="$tmp/no-pc")

# needed EXE: the libraries EXE names in NEEDED, one a line.
needed() {
    readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
}

# check_needed NAME EXE LIB yes|no: EXE names LIB in NEEDED, or does not.
check_needed() {
    local name=$1 exe=$2 lib=$3 want_it=$4 libs
    libs=$(needed "$exe")
    if [ "$want_it" = yes ] && ! grep -qx "$lib" <<<"$libs"; then
        fail "$name: $lib is not in NEEDED (only: $(echo $libs))"
    elif [ "$want_it" = no ] && grep -q "^$lib" <<<"$libs"; then
        fail "$name: linked statically, yet NEEDED names $lib ($(echo $libs))"
    fi
}

mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/main.c" <<'EOF'
#include <sluice.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    printf("sluice %s\n", sluice_version());
    return strcmp(sluice_version(), SLUICE_VERSION_STRING) != 0;
}
EOF

# check_run NAME EXE: EXE must run and print the version.
check_run() {
    local name=$1 exe=$2 out
    if ! out=$("$exe" 2>&1); then
        fail "$name: consumer failed to run: $out"
    elif [ "$out" != "sluice $want" ]; then
        fail "$name: printed '$out', expected 'sluice $want'"
    else
        echo "ok   $name: $out"
    fi
}

# 1. CMake find_package(sluice), core only, with no hiredis.pc to be found
cat >"$tmp/consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(sluice_consumer C)
find_package(sluice 0.1 REQUIRED)
add_executable(consumer_shared main.c)
target_link_libraries(consumer_shared PRIVATE sluice::sluice)
add_executable(consumer_static main.c)
target_link_libraries(consumer_static PRIVATE sluice::sluice_static)
EOF
if run "$tmp/cmake-configure.log" "${no_hiredis[@]}" "$cmake_bin" -S "$tmp/consumer" -B "$tmp/consumer/build" \
       -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" \
       -DCMAKE_EXE_LINKER_FLAGS="$san" &&
   run "$tmp/cmake-build.log" "$cmake_bin" --build "$tmp/consumer/build"; then
    check_run "find_package sluice::sluice (no hiredis.pc)" "$tmp/consumer/build/consumer_shared"
    check_run "find_package sluice::sluice_static (no hiredis.pc)" "$tmp/consumer/build/consumer_static"
    check_needed "find_package sluice::sluice" "$tmp/consumer/build/consumer_shared" libsluice.so.0 yes
    check_needed "find_package sluice::sluice_static" "$tmp/consumer/build/consumer_static" libsluice.so no
else
    fail "find_package(sluice) for sluice::sluice, without hiredis.pc: the consumer did not build"
fi

# 2. pkg-config: shared with an rpath, and static
if flags=$(pkg-config --cflags --libs sluice) &&
   run "$tmp/pkgconfig-build.log" "$cc" $san "$tmp/consumer/main.c" -o "$tmp/consumer_pc" $flags \
       -Wl,-rpath,"$libdir"; then
    check_run "pkg-config sluice ($flags)" "$tmp/consumer_pc"
    check_needed "pkg-config sluice" "$tmp/consumer_pc" libsluice.so.0 yes
else
    fail "pkg-config sluice: the consumer did not build (flags: ${flags:-none})"
fi
if ! pkg-config --exact-version="$want" sluice; then
    fail "pkg-config: version is $(pkg-config --modversion sluice), expected $want"
fi
if flags=$(pkg-config --cflags --libs sluice-static) &&
   run "$tmp/pkgconfig-static-build.log" "$cc" $san "$tmp/consumer/main.c" -o "$tmp/consumer_pc_static" $flags; then
    check_run "pkg-config sluice-static ($flags)" "$tmp/consumer_pc_static"
    check_needed "pkg-config sluice-static" "$tmp/consumer_pc_static" libsluice.so no
else
    fail "pkg-config sluice-static: the consumer did not build (flags: ${flags:-none})"
fi

# 3. the README's first C example, as written
awk '/^```c$/ { inside = 1; next } inside && /^```$/ { exit } inside { print }' \
    "$SLUICE_SOURCE_DIR/README.md" >"$tmp/readme.c"
werror=-Werror
[ -z "$san" ] || werror= # sanitizer instrumentation makes gcc warn spuriously
if ! grep -q 'int main' "$tmp/readme.c"; then
    fail "README.md: its first \`\`\`c block is not a program: $(head -3 "$tmp/readme.c")"
elif run "$tmp/readme-build.log" "$cc" $san -Wall -Wextra $werror "$tmp/readme.c" -o "$tmp/readme" \
         $(pkg-config --cflags --libs sluice) -Wl,-rpath,"$libdir"; then
    if out=$("$tmp/readme" 2>&1) && grep -q 'client-42: allowed' <<<"$out"; then
        echo "ok   README example: $(head -1 <<<"$out")"
    else
        fail "README example: exit $?, printed: $out"
    fi
else
    fail "README example: does not compile as written"
fi

# 4. libsluice-redis, when it was built. Port 1 refuses connections, so
# with on_error=error the decision is SLUICE_ESTORE: proof that the Redis
# store itself answered.
if [ -e "$libdir/libsluice-redis.so" ]; then
    cat >"$tmp/consumer/redis.c" <<'EOF'
#include <sluice.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    sluice_store *s;
    sluice_policy *p;
    sluice_decision d;
    char err[1024] = "";
    if (sluice_store_open_err("redis://127.0.0.1:1?on_error=error&connect_timeout_ms=100", NULL, &s,
                              err, sizeof err) != 0) {
        printf("open: %s\n", err);
        return 1;
    }
    sluice_policy_parse("p", "token-bucket capacity=1 rate=1/s", &p, err, sizeof err);
    int rc = sluice_store_acquire(s, p, "k", 1, 1, &d);
    printf("sluice %s %s\n", sluice_version(), sluice_err_name(rc));
    sluice_store_close(s);
    sluice_policy_free(p);
    return rc != SLUICE_ESTORE;
}
EOF
    check_redis() {
        local name=$1 exe=$2 out
        if ! out=$("$exe" 2>&1); then
            fail "$name: $out"
        else
            echo "ok   $name: $out"
        fi
    }
    # pkg-config, shared (as the README says) and static
    if flags=$(pkg-config --cflags --libs sluice-redis) &&
       run "$tmp/redis-pc-build.log" "$cc" $san "$tmp/consumer/redis.c" -o "$tmp/consumer_redis_pc" $flags \
           -Wl,-rpath,"$libdir"; then
        check_needed "pkg-config sluice-redis" "$tmp/consumer_redis_pc" libsluice-redis.so.0 yes
        check_redis "pkg-config sluice-redis" "$tmp/consumer_redis_pc"
    else
        fail "pkg-config sluice-redis: the consumer did not build"
    fi
    if flags=$(pkg-config --cflags --libs sluice-redis-static) &&
       run "$tmp/redis-pc-static-build.log" "$cc" $san "$tmp/consumer/redis.c" -o "$tmp/consumer_redis_pc_static" $flags; then
        check_needed "pkg-config sluice-redis-static" "$tmp/consumer_redis_pc_static" libsluice no
        check_redis "pkg-config sluice-redis-static" "$tmp/consumer_redis_pc_static"
    else
        fail "pkg-config sluice-redis-static: the consumer did not build"
    fi
    # CMake: shared (also where hiredis.pc cannot be found) and static
    mkdir -p "$tmp/rconsumer"
    cp "$tmp/consumer/redis.c" "$tmp/rconsumer/main.c"
    cat >"$tmp/rconsumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(sluice_redis_consumer C)
option(WITH_STATIC "also the static consumer" ON)
find_package(sluice 0.1 REQUIRED COMPONENTS redis)
add_executable(consumer_redis main.c)
target_link_libraries(consumer_redis PRIVATE sluice::sluice_redis)
if(WITH_STATIC)
  add_executable(consumer_redis_static main.c)
  target_link_libraries(consumer_redis_static PRIVATE sluice::sluice_redis_static)
endif()
EOF
    if run "$tmp/rcmake-configure.log" "$cmake_bin" -S "$tmp/rconsumer" -B "$tmp/rconsumer/build" \
           -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" \
           -DCMAKE_EXE_LINKER_FLAGS="$san" &&
       run "$tmp/rcmake-build.log" "$cmake_bin" --build "$tmp/rconsumer/build"; then
        check_needed "find_package sluice::sluice_redis" "$tmp/rconsumer/build/consumer_redis" libsluice-redis.so.0 yes
        check_redis "find_package sluice::sluice_redis" "$tmp/rconsumer/build/consumer_redis"
        check_needed "find_package sluice::sluice_redis_static" "$tmp/rconsumer/build/consumer_redis_static" libsluice no
        check_redis "find_package sluice::sluice_redis_static" "$tmp/rconsumer/build/consumer_redis_static"
    else
        fail "find_package sluice::sluice_redis: the consumer did not build"
    fi
    if run "$tmp/rcmake-nohiredis-configure.log" "${no_hiredis[@]}" "$cmake_bin" -S "$tmp/rconsumer" \
           -B "$tmp/rconsumer/build-nohiredis" -DWITH_STATIC=OFF \
           -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" \
           -DCMAKE_EXE_LINKER_FLAGS="$san" &&
       run "$tmp/rcmake-nohiredis-build.log" "$cmake_bin" --build "$tmp/rconsumer/build-nohiredis"; then
        check_redis "find_package sluice::sluice_redis (no hiredis.pc)" "$tmp/rconsumer/build-nohiredis/consumer_redis"
    else
        fail "find_package sluice::sluice_redis without hiredis.pc: the consumer did not build"
    fi
    # the core alone: libsluice-redis is loaded from beside libsluice.so
    if run "$tmp/redis-core-build.log" "$cc" $san "$tmp/consumer/redis.c" -o "$tmp/consumer_redis_core" \
           $(pkg-config --cflags --libs sluice) -Wl,-rpath,"$libdir"; then
        check_needed "core only" "$tmp/consumer_redis_core" libsluice-redis no
        check_redis "core only, libsluice-redis loaded from $libdir" "$tmp/consumer_redis_core"
        # libsluice.so alone: the message says where libsluice-redis was looked for
        mkdir -p "$tmp/alone"
        cp "$libdir/libsluice.so.0" "$tmp/alone/"
        if run "$tmp/redis-alone-build.log" "$cc" $san "$tmp/consumer/redis.c" -o "$tmp/consumer_redis_alone" \
               $(pkg-config --cflags --libs sluice) -Wl,-rpath,"$tmp/alone"; then
            if out=$("$tmp/consumer_redis_alone" 2>&1); then
                fail "libsluice.so alone: opened redis:// ($out)"
            elif ! grep -q "needs libsluice-redis" <<<"$out" ||
                 ! grep -qF "$tmp/alone/libsluice-redis.so.0" <<<"$out"; then
                fail "libsluice.so alone: the message does not name $tmp/alone/libsluice-redis.so.0: $out"
            else
                echo "ok   libsluice.so alone: $out"
            fi
        else
            fail "libsluice.so alone: the consumer did not build"
        fi
    else
        fail "core only: the consumer did not build"
    fi
fi

# 5. the loop adapters
system_libs='^(libc|libpthread|libdl|librt|ld-linux[-a-z0-9_]*|libasan|libubsan|libtsan|libstdc\+\+|libm|libgcc_s)\.so'
if others=$(needed "$so" | grep -Ev "$system_libs") && [ -n "$others" ]; then
    fail "installed libsluice.so.0 links more than libc and pthreads: $(echo $others)"
fi
cat >"$tmp/consumer/uv.c" <<'EOF2'
#include <sluice_uv.h>
#include <stdio.h>

static void decided(void *user, int rc, const sluice_decision *d) {
    printf("sluice %s %s %s\n", sluice_version(), sluice_err_name(rc), d->allowed ? "allowed" : "denied");
    ++*(int *)user;
}

int main(void) {
    uv_loop_t loop;
    sluice_store *s;
    sluice_policy *p;
    char err[256];
    int called = 0;
    if (uv_loop_init(&loop) || sluice_store_open_err("memory:", NULL, &s, err, sizeof err) ||
        sluice_policy_parse("p", "token-bucket capacity=1 rate=1/s", &p, err, sizeof err) ||
        sluice_uv_attach(s, &loop) || sluice_store_acquire_async(s, p, "k", 1, 1, decided, &called)) {
        printf("failed: %s\n", err);
        return 1;
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    sluice_store_close(s); /* detaches */
    uv_run(&loop, UV_RUN_NOWAIT);
    sluice_policy_free(p);
    return !(called == 1 && uv_loop_close(&loop) == 0);
}
EOF2
cat >"$tmp/consumer/event.c" <<'EOF2'
#include <event2/event.h>
#include <sluice_event.h>
#include <stdio.h>

static void decided(void *user, int rc, const sluice_decision *d) {
    printf("sluice %s %s %s\n", sluice_version(), sluice_err_name(rc), d->allowed ? "allowed" : "denied");
    ++*(int *)user;
}

int main(void) {
    struct event_base *base = event_base_new();
    sluice_store *s;
    sluice_policy *p;
    char err[256];
    int called = 0;
    if (!base || sluice_store_open_err("memory:", NULL, &s, err, sizeof err) ||
        sluice_policy_parse("p", "token-bucket capacity=1 rate=1/s", &p, err, sizeof err) ||
        sluice_event_attach(s, base) || sluice_store_acquire_async(s, p, "k", 1, 1, decided, &called)) {
        printf("failed: %s\n", err);
        return 1;
    }
    event_base_dispatch(base);
    sluice_store_close(s); /* detaches */
    event_base_free(base);
    sluice_policy_free(p);
    return called != 1;
}
EOF2
# check_loop NAME EXE: runs, and says the request was decided
check_loop() {
    local name=$1 exe=$2 out
    if ! out=$("$exe" 2>&1) || [ "$out" != "sluice $want SLUICE_OK allowed" ]; then
        fail "$name: $out"
    else
        echo "ok   $name: $out"
    fi
}
for adapter in uv event; do
    [ -e "$libdir/libsluice-$adapter.so.0" ] || continue
    [ -f "$prefix/include/sluice_$adapter.h" ] || fail "not installed: include/sluice_$adapter.h"
    if flags=$(pkg-config --cflags --libs "sluice-$adapter") &&
       run "$tmp/$adapter-pc-build.log" "$cc" $san "$tmp/consumer/$adapter.c" -o "$tmp/consumer_${adapter}_pc" \
           $flags -Wl,-rpath,"$libdir"; then
        check_needed "pkg-config sluice-$adapter" "$tmp/consumer_${adapter}_pc" "libsluice-$adapter.so.0" yes
        check_loop "pkg-config sluice-$adapter ($flags)" "$tmp/consumer_${adapter}_pc"
    else
        fail "pkg-config sluice-$adapter: the consumer did not build (flags: ${flags:-none})"
    fi
    if flags=$(pkg-config --cflags --libs "sluice-$adapter-static") &&
       run "$tmp/$adapter-pc-static-build.log" "$cc" $san "$tmp/consumer/$adapter.c" \
           -o "$tmp/consumer_${adapter}_pc_static" $flags; then
        check_needed "pkg-config sluice-$adapter-static" "$tmp/consumer_${adapter}_pc_static" libsluice no
        check_loop "pkg-config sluice-$adapter-static ($flags)" "$tmp/consumer_${adapter}_pc_static"
    else
        fail "pkg-config sluice-$adapter-static: the consumer did not build (flags: ${flags:-none})"
    fi
    mkdir -p "$tmp/${adapter}consumer"
    cp "$tmp/consumer/$adapter.c" "$tmp/${adapter}consumer/main.c"
    cat >"$tmp/${adapter}consumer/CMakeLists.txt" <<EOF2
cmake_minimum_required(VERSION 3.16)
project(sluice_${adapter}_consumer C)
find_package(sluice 0.1 REQUIRED COMPONENTS $adapter)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE sluice::sluice_$adapter)
add_executable(consumer_static main.c)
target_link_libraries(consumer_static PRIVATE sluice::sluice_${adapter}_static)
EOF2
    if run "$tmp/$adapter-cmake-configure.log" "${no_hiredis[@]}" "$cmake_bin" -S "$tmp/${adapter}consumer" \
           -B "$tmp/${adapter}consumer/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
           -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" &&
       run "$tmp/$adapter-cmake-build.log" "$cmake_bin" --build "$tmp/${adapter}consumer/build"; then
        check_needed "find_package sluice::sluice_$adapter" "$tmp/${adapter}consumer/build/consumer" \
            "libsluice-$adapter.so.0" yes
        check_loop "find_package sluice::sluice_$adapter (no pkg-config files)" "$tmp/${adapter}consumer/build/consumer"
        check_needed "find_package sluice::sluice_${adapter}_static" "$tmp/${adapter}consumer/build/consumer_static" \
            libsluice no
        check_loop "find_package sluice::sluice_${adapter}_static" "$tmp/${adapter}consumer/build/consumer_static"
    else
        fail "find_package sluice::sluice_$adapter: the consumers did not build"
    fi
done

if [ "$failures" -ne 0 ]; then
    echo "test_install: $failures failure(s)" >&2
    exit 1
fi
echo "test_install: ok"
