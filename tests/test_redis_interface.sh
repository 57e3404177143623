#!/usr/bin/env bash
# test_redis_interface.sh: a libsluice-redis of another store interface
# version is refused with a message, never used (its structs could mean
# anything to this libsluice).
#
# A copy of the built libsluice.so.0 in a temporary directory, and beside
# it (where the core looks for libsluice-redis first) a fake
# libsluice-redis.so.0 whose sluice_redis_store and
# sluice_redis_cluster_store tables carry the store interface version after
# this one (src/store/store.h: SLUICE__STORE_INTERFACE), and whose open says
# it was called. A program linked with the core alone opens a redis:// and
# a redis-cluster:// URL: each gets SLUICE_EINVAL and a message naming the
# fake, its version and the core's. The same fake of this version is used
# (its open answers): proof that the core found the fake there.
# Run by ctest, which sets SLUICE_SHARED_LIB and SLUICE_SOURCE_DIR (and
# SLUICE_CC, SLUICE_SANITIZE_FLAGS).
set -uo pipefail

: "${SLUICE_SHARED_LIB:?SLUICE_SHARED_LIB is not set (run through ctest)}"
: "${SLUICE_SOURCE_DIR:?SLUICE_SOURCE_DIR is not set (run through ctest)}"
cc=${SLUICE_CC:-cc}
san=${SLUICE_SANITIZE_FLAGS:-} # a sanitized libsluice.so needs its runtime first
unset LD_LIBRARY_PATH

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sluice-interface.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

version=$(sed -n 's/^#define SLUICE__STORE_INTERFACE \([0-9][0-9]*\).*/\1/p' "$SLUICE_SOURCE_DIR/src/store/store.h")
if [ -z "$version" ]; then
    echo "FAIL: no SLUICE__STORE_INTERFACE in src/store/store.h" >&2
    exit 1
fi
other=$((version + 1))

cat >"$tmp/fake.c" <<'EOF'
/* a libsluice-redis that implements store interface VERSION */
#include "store/store.h"

#include <stdio.h>

static int fake_open(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen) {
    *out = NULL;
    snprintf(err, errlen, "the fake libsluice-redis of version %d opened %s", VERSION, cfg->base);
    return SLUICE_ESTORE;
}

__attribute__((visibility("default"))) const sluice__store_ops sluice_redis_store = {
    .version = VERSION, .scheme = "redis", .open = fake_open};
__attribute__((visibility("default"))) const sluice__store_ops sluice_redis_cluster_store = {
    .version = VERSION, .scheme = "redis-cluster", .open = fake_open};
EOF
cat >"$tmp/main.c" <<'EOF'
#include <sluice.h>
#include <stdio.h>

/* Opens each URL: "URL ERROR_NAME: message", one a line. */
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        sluice_store *s = NULL;
        char err[2048] = "";
        int rc = sluice_store_open_err(argv[i], NULL, &s, err, sizeof err);
        printf("%s %s: %s\n", argv[i], sluice_err_name(rc), err);
        sluice_store_close(s);
    }
    return 0;
}
EOF

# build LOG CMD...: runs CMD quietly; shows its output when it fails.
build() {
    local log=$1
    shift
    if ! "$@" >"$log" 2>&1; then
        echo "command failed: $*" >&2
        cat "$log" >&2
        return 1
    fi
}

# fake DIR VERSION: libsluice.so.0 and a fake libsluice-redis.so.0 of
# VERSION in DIR, and DIR/consumer linked with the core alone.
fake() {
    local dir=$1 v=$2
    mkdir -p "$dir"
    cp "$SLUICE_SHARED_LIB" "$dir/libsluice.so.0" &&
        build "$dir/fake.log" "$cc" $san -shared -fPIC -DVERSION="$v" -I"$SLUICE_SOURCE_DIR/include" \
            -I"$SLUICE_SOURCE_DIR/src" "$tmp/fake.c" -o "$dir/libsluice-redis.so.0" &&
        build "$dir/consumer.log" "$cc" $san -I"$SLUICE_SOURCE_DIR/include" "$tmp/main.c" "$dir/libsluice.so.0" \
            -Wl,-rpath,"$dir" -o "$dir/consumer"
}

urls=("redis://127.0.0.1:1" "redis-cluster://127.0.0.1:1")

# another version: refused, both versions named
if fake "$tmp/other" "$other"; then
    if readelf -d "$tmp/other/consumer" 2>/dev/null | grep -q 'NEEDED.*libsluice-redis'; then
        fail "the consumer links libsluice-redis: it must load it"
    fi
    out=$("$tmp/other/consumer" "${urls[@]}" 2>&1)
    rc=$?
    [ "$rc" -eq 0 ] || fail "the consumer exited $rc: $out"
    for url in "${urls[@]}"; do
        line=$(grep -F "$url SLUICE_" <<<"$out")
        if [ -z "$line" ]; then
            fail "$url: no answer (the consumer printed: $out)"
        elif ! grep -q "^$url SLUICE_EINVAL: " <<<"$line"; then
            fail "$url: expected SLUICE_EINVAL: $line"
        elif ! grep -qF "$tmp/other/libsluice-redis.so.0 implements store interface version $other" <<<"$line" ||
             ! grep -qF "libsluice version $version" <<<"$line"; then
            fail "$url: the message does not name $tmp/other/libsluice-redis.so.0, version $other and" \
                 "libsluice's version $version: $line"
        else
            echo "ok   version $other refused: $line"
        fi
    done
else
    fail "the fake libsluice-redis of version $other, or its consumer, did not build"
fi

# this version: the fake is the one used
if fake "$tmp/same" "$version"; then
    out=$("$tmp/same/consumer" "${urls[@]}" 2>&1)
    for url in "${urls[@]}"; do
        line=$(grep -F "$url SLUICE_" <<<"$out")
        if ! grep -q "^$url SLUICE_ESTORE: .*the fake libsluice-redis of version $version opened" <<<"$line"; then
            fail "$url: the fake of version $version beside libsluice.so was not the one used: ${line:-$out}"
        else
            echo "ok   version $version used: $line"
        fi
    done
else
    fail "the fake libsluice-redis of version $version, or its consumer, did not build"
fi

if [ "$failures" -ne 0 ]; then
    echo "test_redis_interface: $failures failure(s)" >&2
    exit 1
fi
echo "test_redis_interface: ok"
