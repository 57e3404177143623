# sluice: a thin wrapper around CMake.
#
#   make / make build    configure + build into $(BUILD)/
#   make run             build, then run the demo
#   make test            deps, then the suite three times: plain, ASan+UBSan, TSan
#   make bench           build, then run every benchmark
#   make bench-peers     deps-peers, build, then sluice beside Guava's and Go's rate limiters
#   make install PREFIX=/some/where
#   make deps            install the Debian packages the tests need (root), or say how
#   make deps-peers      the same for the packages bench-peers needs
#   make clean

# Debian packages the build and the tests need (one list; add to it here).
DEPS := cmake gcc make pkg-config binutils redis-server redis-tools libhiredis-dev python3 bsdutils \
        libuv1-dev libevent-dev curl wrk
# What bench-peers needs besides: Go with golang.org/x/time/rate, Guava and a
# JDK (any javac on the PATH will do for the last).
PEER_DEPS = $(strip golang-go golang-golang-x-time-dev libguava-java $(if $(shell command -v javac),,default-jdk-headless))

PREFIX     ?= /usr/local
BUILD      ?= build
BUILD_TYPE ?= Release
WERROR     ?= OFF
JOBS       ?= 2
CMAKE      ?= cmake
CTEST      ?= ctest

ASAN_BUILD := build-asan
TSAN_BUILD := build-tsan
# Sanitizer builds: -O1 -g with assertions on; no -Werror (sanitizer
# instrumentation makes gcc warn spuriously); no benchmarks.
SAN_CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
                   -DSLUICE_BUILD_BENCH=OFF -DSLUICE_WERROR=OFF
CTEST_FLAGS := --output-on-failure --no-tests=error -j$(JOBS)

export ASAN_OPTIONS  ?= detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS  ?= halt_on_error=1 second_deadlock_stack=1

# instr_store is a workload for callgrind (see its top comment), not a bench
BENCHES := $(filter-out instr_store,$(basename $(notdir $(wildcard bench/*.c))))

MAKEFLAGS += --no-print-directory

# CMake does the parallel work; the steps here run in order.
.NOTPARALLEL:
.PHONY: all build run deps deps-peers test test-plain test-asan test-tsan bench bench-peers install clean

all: build

build:
	@$(CMAKE) -S . -B $(BUILD) --log-level=WARNING -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DSLUICE_WERROR=$(WERROR)
	$(CMAKE) --build $(BUILD) -j$(JOBS)

run: build
	./$(BUILD)/sluice demo
	@echo
	sh docs/cli-demo.sh ./$(BUILD)/sluice

deps:
	@missing=""; \
	for p in $(DEPS); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q ' installed$$' || missing="$$missing $$p"; \
	done; \
	missing="$${missing# }"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	  else \
	    echo "sudo apt-get install -y $$missing"; exit 1; \
	  fi; \
	fi

deps-peers:
	@$(MAKE) deps DEPS="$(PEER_DEPS)"

test: deps
	$(MAKE) --no-print-directory test-plain
	$(MAKE) --no-print-directory test-asan
	$(MAKE) --no-print-directory test-tsan

test-plain: build
	cd $(BUILD) && $(CTEST) $(CTEST_FLAGS)

test-asan:
	@$(CMAKE) -S . -B $(ASAN_BUILD) --log-level=WARNING $(SAN_CMAKE_FLAGS) -DSLUICE_SANITIZE=address
	$(CMAKE) --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && $(CTEST) $(CTEST_FLAGS)

# ThreadSanitizer cannot map its shadow memory on kernels with a high-entropy
# mmap ("unexpected memory mapping"); then the tests run with ASLR off
# (setarch -R, inherited by every child of ctest).
test-tsan:
	@$(CMAKE) -S . -B $(TSAN_BUILD) --log-level=WARNING $(SAN_CMAKE_FLAGS) -DSLUICE_SANITIZE=thread
	$(CMAKE) --build $(TSAN_BUILD) -j$(JOBS)
	@set -e; wrap=""; probe="$(TSAN_BUILD)/tsan-probe"; \
	printf '#include <pthread.h>\nstatic void *f(void *a) { return a; }\nint main(void) { pthread_t t; pthread_create(&t, 0, f, 0); return pthread_join(t, 0); }\n' \
	  | $${CC:-cc} -fsanitize=thread -x c - -o "$$probe" -pthread; \
	if ! out=$$("$$probe" 2>&1); then \
	  if echo "$$out" | grep -q 'unexpected memory mapping' \
	     && setarch "$$(uname -m)" -R "$$probe" >/dev/null 2>&1; then \
	    wrap="setarch $$(uname -m) -R"; \
	    echo "tsan: high-entropy mmap on this kernel; running the tests under '$$wrap'"; \
	  else \
	    echo "tsan: a trivial ThreadSanitizer program fails here:"; echo "$$out"; exit 1; \
	  fi; \
	fi; \
	cd $(TSAN_BUILD) && echo "$(CTEST) $(CTEST_FLAGS)" && $$wrap $(CTEST) $(CTEST_FLAGS)

bench: build
	@set -e; for b in $(BENCHES); do echo "== $$b"; ./$(BUILD)/$$b; done
	@bash bench/bench_http.sh $(BUILD)

# Not part of bench: the peers' harnesses in bench/peers/ (run.sh says how).
bench-peers: deps-peers build
	sh bench/peers/run.sh $(BUILD)

install: build
	$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
