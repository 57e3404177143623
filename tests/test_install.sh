#!/usr/bin/env bash
# test_install.sh: installs the build in SLUICE_BUILD_DIR into a temporary
# prefix, then builds and runs a small consumer three ways: CMake
# find_package(sluice) with sluice::sluice (shared) and sluice::sluice_static,
# and pkg-config. Each consumer prints sluice_version().
# Run by ctest, which sets SLUICE_BUILD_DIR (and SLUICE_CMAKE, SLUICE_CC,
# SLUICE_SANITIZE_FLAGS).
set -uo pipefail

: "${SLUICE_BUILD_DIR:?SLUICE_BUILD_DIR is not set (run through ctest)}"
cmake_bin=${SLUICE_CMAKE:-cmake}
cc=${SLUICE_CC:-cc}
# A sanitized libsluice.so needs its runtime loaded first: build the
# consumers with the same sanitizer.
san=${SLUICE_SANITIZE_FLAGS:-}

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
want=$(sed -n 's/^#define SLUICE_VERSION_STRING "\(.*\)"/\1/p' "$prefix/include/sluice.h")

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
    if ! out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$exe" 2>&1); then
        fail "$name: consumer failed to run: $out"
    elif [ "$out" != "sluice $want" ]; then
        fail "$name: printed '$out', expected 'sluice $want'"
    else
        echo "ok   $name: $out"
    fi
}

# 1. CMake find_package(sluice)
cat >"$tmp/consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(sluice_consumer C)
find_package(sluice 0.1 REQUIRED)
add_executable(consumer_shared main.c)
target_link_libraries(consumer_shared PRIVATE sluice::sluice)
add_executable(consumer_static main.c)
target_link_libraries(consumer_static PRIVATE sluice::sluice_static)
EOF
if run "$tmp/cmake-configure.log" "$cmake_bin" -S "$tmp/consumer" -B "$tmp/consumer/build" \
       -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" \
       -DCMAKE_EXE_LINKER_FLAGS="$san" &&
   run "$tmp/cmake-build.log" "$cmake_bin" --build "$tmp/consumer/build"; then
    check_run "find_package sluice::sluice" "$tmp/consumer/build/consumer_shared"
    check_run "find_package sluice::sluice_static" "$tmp/consumer/build/consumer_static"
    # ldd's whole output first: grep -q under pipefail could SIGPIPE it
    if command -v ldd >/dev/null && ! grep -q 'libsluice\.so\.0' <<<"$(ldd "$tmp/consumer/build/consumer_shared")"; then
        fail "find_package sluice::sluice: consumer is not linked to libsluice.so.0"
    fi
else
    fail "find_package(sluice): the consumer did not build"
fi

# 2. pkg-config
if ! command -v pkg-config >/dev/null; then
    fail "pkg-config not found (make deps installs it)"
else
    export PKG_CONFIG_PATH="$(dirname "$pc")"
    if flags=$(pkg-config --cflags --libs sluice) &&
       run "$tmp/pkgconfig-build.log" "$cc" $san "$tmp/consumer/main.c" -o "$tmp/consumer_pc" $flags; then
        check_run "pkg-config ($flags)" "$tmp/consumer_pc"
    else
        fail "pkg-config: the consumer did not build (flags: ${flags:-none})"
    fi
    if ! pkg-config --exact-version="$want" sluice; then
        fail "pkg-config: version is $(pkg-config --modversion sluice), expected $want"
    fi
fi

# 3. libsluice-redis, when it was built: a program that links it (shared,
# both ways) opens redis:// URLs through the core's weak reference. Port 1
# refuses connections, so with on_error=error the decision is SLUICE_ESTORE:
# proof that the Redis store itself answered.
if [ -e "$libdir/libsluice-redis.so" ]; then
    cat >"$tmp/consumer/redis.c" <<'EOF'
#include <sluice.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    sluice_store *s;
    sluice_policy *p;
    sluice_decision d;
    char err[256] = "";
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
        if ! out=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$exe" 2>&1); then
            fail "$name: $out"
        else
            echo "ok   $name: $out"
        fi
    }
    if flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs sluice-redis) &&
       run "$tmp/redis-pc-build.log" "$cc" $san "$tmp/consumer/redis.c" -o "$tmp/consumer_redis_pc" $flags; then
        check_redis "pkg-config sluice-redis" "$tmp/consumer_redis_pc"
    else
        fail "pkg-config sluice-redis: the consumer did not build (see $tmp/redis-pc-build.log: $(tail -3 "$tmp/redis-pc-build.log" 2>/dev/null))"
    fi
    mkdir -p "$tmp/rconsumer"
    cp "$tmp/consumer/redis.c" "$tmp/rconsumer/main.c"
    cat >"$tmp/rconsumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(sluice_redis_consumer C)
find_package(sluice 0.1 REQUIRED)
add_executable(consumer_redis main.c)
target_link_libraries(consumer_redis PRIVATE sluice::sluice_redis)
EOF
    if run "$tmp/rcmake-configure.log" "$cmake_bin" -S "$tmp/rconsumer" -B "$tmp/rconsumer/build" \
           -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$san" \
           -DCMAKE_EXE_LINKER_FLAGS="$san" &&
       run "$tmp/rcmake-build.log" "$cmake_bin" --build "$tmp/rconsumer/build"; then
        check_redis "find_package sluice::sluice_redis" "$tmp/rconsumer/build/consumer_redis"
    else
        fail "find_package sluice::sluice_redis: the consumer did not build ($(tail -3 "$tmp/rcmake-build.log" "$tmp/rcmake-configure.log" 2>/dev/null))"
    fi
fi

if [ "$failures" -ne 0 ]; then
    echo "test_install: $failures failure(s)" >&2
    exit 1
fi
echo "test_install: ok"
