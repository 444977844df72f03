# redis-ps build.  Outputs go under build/.  Nothing is downloaded at build time:
# every dependency is a Debian 12 package (see `make deps`).

CC      ?= cc
PYTHON  ?= /usr/bin/python3
OPT     ?= -O2
WARN     = -Wall -Wextra -Werror
# Determinism: no -ffast-math anywhere, no contraction of a*b+c into fma, so a
# master, its replicas and an AOF replay compute bit-identical tensors.
BASE_CFLAGS = -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -ffp-contract=off -fno-fast-math -fno-math-errno

# SANITIZE=address,undefined builds everything instrumented (use a separate
# build dir, e.g. B=build/asan, or `make check-asan`). Any finding aborts:
# UBSan does not recover, ASan halts. The module then runs inside Debian's
# non-instrumented redis-server with the ASan runtime preloaded:
# python_tests/psserver.py does that (psserver_proc.py finds the runtime with ldd) and the
# tests fail on any report a server wrote (see docs/security.md).
ifneq ($(SANITIZE),)
  SAN_FLAGS = -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
  export UBSAN_OPTIONS ?= halt_on_error=1:print_stacktrace=1
  export ASAN_OPTIONS ?= halt_on_error=1:detect_leaks=1:strict_string_checks=1
endif

PIC_CFLAGS = $(BASE_CFLAGS) -fPIC -fvisibility=hidden $(SAN_FLAGS)
APP_CFLAGS = $(BASE_CFLAGS) $(SAN_FLAGS)

B = build
OBJ = $(B)/obj

# Components (README "Layout"). Each is a folder compiled with its own include
# path, so a file can only include headers of the components below it:
#   common/  code both sides must compute identically (wire codecs, shape rules, RNG)
#   module/  the Redis module's glue (commands, types, configs)   sees module/core/, common/
#   module/core/  its pure cores (tensor, table, optimizers, dedup) sees common/ (no redismodule.h)
#   libps/   the client library                                     sees common/
#   ml/      the ML library: MLP, CTR models, data readers, metrics,
#            the synthetic CTR generator (no Redis, no sockets)     sees common/
#   ml/ref/  reference row optimizers for bench/ and tests/ only    sees ml/, common/
#   train/   ps-train: job config, task stream, orchestration and
#            the dense and sparse trainers (train/trainer.h)        sees ml/, libps/ (ps.h only), common/
#   tools/   ps-gen-ctr (the synthetic CTR data generator) and
#            ps-export (tables into a serving store)                sees ml/, libps/ (ps.h only), common/
#   relay/   ps-relay, the tree topology's aggregator               sees libps/ (ps.h only), common/
# A module object that includes "ps.h" fails with "No such file or directory";
# `make check-layers` also refuses relative includes that reach across folders.
COMMON_INCS = -Icommon
# module/core/: the pure cores (no Redis calls): redismodule.h is not on their path.
MODULE_CORE_INCS = -Imodule/core -Icommon
MODULE_INCS = -Imodule/core -Icommon
LIBPS_INCS  = -Ilibps/include -Icommon
ML_INCS     = -Icommon
MLREF_INCS  = -Iml -Icommon
TRAIN_INCS  = -Iml -Ilibps/include -Icommon $(VERSION_DEF)
TOOLS_INCS  = -Iml -Ilibps/include -Icommon
RELAY_INCS  = -Ilibps/include -Icommon $(VERSION_DEF)
# The release (`ps-train --version`, libps.pc): LIBPS_VERSION below, written once.
VERSION_DEF = -DREDIS_PS_VERSION='"$(LIBPS_VERSION)"'
# Tests, benches and fuzz harnesses may see every component they exercise.
TEST_INCS   = -Imodule -Imodule/core -Icommon -Ilibps -Ilibps/include -Iml -Iml/ref -Itrain

COMMON_SRC = $(wildcard common/*.c)
# Pure cores of the module (no Redis calls) and the glue that talks to Redis.
MODULE_GLUE = $(wildcard module/*.c)
MODULE_PURE = $(wildcard module/core/*.c)
LIBPS_SRC   = $(wildcard libps/*.c)
# The ML library (ps-train, ps-gen-ctr, tests and bench link it); its
# reference table (ml/ref/) is linked by tests and bench only.
ML_SRC      = $(wildcard ml/*.c)
MLREF_SRC   = $(wildcard ml/ref/*.c)
# ps-train; its run log (train/runlog.c) is pure and also linked by tests.
TRAIN_PURE  = train/runlog.c
TRAIN_SRC   = $(wildcard train/*.c)
TOOLS_SRC   = $(wildcard tools/*.c)
RELAY_SRC   = $(wildcard relay/*.c)

obj = $(patsubst %.c,$(OBJ)/%.o,$(1))

MODULE_OBJS = $(call obj,$(MODULE_PURE) $(MODULE_GLUE) $(COMMON_SRC))
PURE_OBJS   = $(call obj,$(MODULE_PURE) $(COMMON_SRC) $(ML_SRC) $(MLREF_SRC) $(TRAIN_PURE))
LIBPS_OBJS  = $(call obj,$(LIBPS_SRC) $(COMMON_SRC))
# Programs linked with libps.a take the common objects from the archive.
APP_PURE_OBJS = $(call obj,$(MODULE_PURE) $(ML_SRC) $(MLREF_SRC) $(TRAIN_PURE))

TEST_SRC  = $(wildcard tests/test_*.c)
TEST_BINS = $(patsubst tests/%.c,$(B)/tests/%,$(TEST_SRC))
# Small C programs the integration tests drive (linked with libps).
PTOOL_SRC  = $(wildcard python_tests/tools/*.c)
PTOOL_BINS = $(patsubst python_tests/tools/%.c,$(B)/ptools/%,$(PTOOL_SRC))
# A bench program is one file bench/NAME.c, or a folder bench/NAME/ of .c files
# (built as one program; see the ps_bench rule below).
BENCH_SRC = $(wildcard bench/*.c)
BENCH_DIRS = $(patsubst bench/%/,%,$(sort $(dir $(wildcard bench/*/*.c))))
BENCH_BINS = $(patsubst bench/%.c,$(B)/bench/%,$(BENCH_SRC)) $(addprefix $(B)/bench/,$(BENCH_DIRS))

CLIENT_LIBS = -lhiredis -lopenblas -lz -lm -lpthread

# libps's version and the shared library's file names (SONAME libps.so.0).
LIBPS_VERSION = 0.1.0
LIBPS_SOVERSION = 0
LIBPS_SO = libps.so.$(LIBPS_VERSION)
LIBPS_SONAME = libps.so.$(LIBPS_SOVERSION)

.PHONY: all module client check-layers ptools test unit pytest bench bench-durability demo demo-cluster demo-tree deps check-deps install uninstall clean \
        check-asan valgrind valgrind-unit valgrind-server fuzz fuzz-short

all: module client ## the module, libps (static and shared), ps-train, ps-gen-ctr, ps-relay, ps-export

module: $(B)/ps.so ## the Redis module build/ps.so
client: $(B)/libps.a $(B)/$(LIBPS_SO) $(B)/ps-train $(B)/ps-gen-ctr $(B)/ps-relay $(B)/ps-export ## libps, ps-train, ps-gen-ctr, ps-relay, ps-export
ptools: $(PTOOL_BINS) ## the small C drivers the integration tests use

# The kernels need the vectorizer (-O3): element-wise float ops vectorize
# without reassociation, so the bits stay those of the scalar loop.
$(OBJ)/module/core/optim.o: OPT = -O3
$(OBJ)/module/core/embed_optim.o: OPT = -O3
$(OBJ)/common/codec.o: OPT = -O3

HDRS = $(wildcard */*.h module/core/*.h ml/ref/*.h libps/include/redis-ps/*.h)
$(OBJ)/common/%.o: common/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(COMMON_INCS) -c $< -o $@
$(OBJ)/module/%.o: module/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(MODULE_INCS) -c $< -o $@
$(OBJ)/module/core/%.o: module/core/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(MODULE_CORE_INCS) -c $< -o $@
$(OBJ)/libps/%.o: libps/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(LIBPS_INCS) -c $< -o $@
$(OBJ)/ml/ref/%.o: ml/ref/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(MLREF_INCS) -c $< -o $@
$(OBJ)/ml/%.o: ml/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(ML_INCS) -c $< -o $@
$(OBJ)/train/%.o: train/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(TRAIN_INCS) -c $< -o $@
$(OBJ)/tools/%.o: tools/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(TOOLS_INCS) -c $< -o $@
$(OBJ)/relay/%.o: relay/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PIC_CFLAGS) $(RELAY_INCS) -c $< -o $@

# Layering check: no relative include may climb out of its own folder.
check-layers: ## refuse includes that cross component folders
	@if grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*\.\./' \
	    common/*.[ch] module/*.[ch] module/core/*.[ch] libps/*.[ch] libps/include/redis-ps/*.h ml/*.[ch] ml/ref/*.[ch] train/*.[ch] $(wildcard tools/*.[ch]) relay/*.[ch]; then \
	  echo "check-layers: relative includes across components (see Makefile 'Components')"; exit 1; fi

# The module links nothing but libc and libm; only RedisModule_OnLoad is exported.
$(B)/ps.so: $(MODULE_OBJS)
	$(CC) -shared $(SAN_FLAGS) -o $@ $^ -lm

$(B)/libps.a: $(LIBPS_OBJS)
	@rm -f $@
	ar rcs $@ $^

# The shared libps: the same sources compiled with default visibility into
# $(OBJ)/shared/, linked with a version script that exports exactly the public
# API (the psXxx names of ps.h); the internals (ps_* codecs, RNG, wire
# encoders) stay local, as they are hidden in libps.a. SONAME libps.so.0: a
# release that breaks the ABI bumps LIBPS_SOVERSION.
LIBPS_SHARED_OBJS = $(patsubst %.c,$(OBJ)/shared/%.o,$(LIBPS_SRC) $(COMMON_SRC))
$(OBJ)/shared/common/codec.o: OPT = -O3
$(OBJ)/shared/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -fPIC $(SAN_FLAGS) $(LIBPS_INCS) -c $< -o $@
$(B)/libps.map: Makefile
	@mkdir -p $(dir $@)
	printf '%s\n' '{' '  global: ps[A-Z]*;' '  local: *;' '};' > $@
$(B)/$(LIBPS_SO): $(LIBPS_SHARED_OBJS) $(B)/libps.map
	$(CC) -shared $(SAN_FLAGS) -Wl,-soname,$(LIBPS_SONAME) -Wl,--version-script,$(B)/libps.map \
	  -Wl,--no-undefined -o $@ $(LIBPS_SHARED_OBJS) -lhiredis -lm
	ln -sf $(LIBPS_SO) $(B)/$(LIBPS_SONAME)
	ln -sf $(LIBPS_SONAME) $(B)/libps.so

# ps-train links the ML library but not the CTR generator (ps-gen-ctr's).
$(B)/ps-train: $(call obj,$(TRAIN_SRC) $(filter-out ml/ctr_gen.c,$(ML_SRC))) $(B)/libps.a
	$(CC) $(SAN_FLAGS) -o $@ $(filter %.o,$^) $(B)/libps.a $(CLIENT_LIBS)

$(B)/ps-gen-ctr: $(call obj,tools/ps-gen-ctr.c $(ML_SRC) $(COMMON_SRC))
	$(CC) $(SAN_FLAGS) -o $@ $^ -lopenblas -lz -lm

$(B)/ps-export: $(call obj,tools/ps-export.c tools/export_redis.c tools/export_file.c tools/export_util.c) $(B)/libps.a
	$(CC) $(SAN_FLAGS) -o $@ $(filter %.o,$^) $(B)/libps.a $(CLIENT_LIBS)

$(B)/ps-relay: $(call obj,$(RELAY_SRC)) $(B)/libps.a
	$(CC) $(SAN_FLAGS) -o $@ $(filter %.o,$^) $(B)/libps.a $(CLIENT_LIBS)

$(B)/tests/%: tests/%.c $(PURE_OBJS) $(B)/libps.a $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(APP_CFLAGS) $(TEST_INCS) -o $@ $< $(PURE_OBJS) $(B)/libps.a -lcmocka $(CLIENT_LIBS)

# These two build tests/test_codec_vec.c for other targets (#include).
$(B)/tests/test_codec_vec_avx2 $(B)/tests/test_codec_vec_avx512: tests/test_codec_vec.c
$(B)/tests/test_codec_vec_avx2_kernels: tests/test_codec_vec.c

$(B)/bench/%: bench/%.c $(APP_PURE_OBJS) $(B)/libps.a
	@mkdir -p $(dir $@)
	$(CC) $(APP_CFLAGS) $(TEST_INCS) -o $@ $< $(APP_PURE_OBJS) $(B)/libps.a $(CLIENT_LIBS)

# Multi-file bench programs: every .c of bench/NAME/ linked into build/bench/NAME.
.SECONDEXPANSION:
$(addprefix $(B)/bench/,$(BENCH_DIRS)): $(B)/bench/%: $$(wildcard bench/%/*.c) $$(wildcard bench/%/*.h) \
                                                     $(APP_PURE_OBJS) $(B)/libps.a
	@mkdir -p $(dir $@)
	$(CC) $(APP_CFLAGS) $(TEST_INCS) -o $@ $(filter %.c,$^) $(APP_PURE_OBJS) $(B)/libps.a $(CLIENT_LIBS)

$(B)/ptools/%: python_tests/tools/%.c $(B)/libps.a $(APP_PURE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(APP_CFLAGS) $(TEST_INCS) -o $@ $< $(APP_PURE_OBJS) $(B)/libps.a $(CLIENT_LIBS)

# `make help`: every target with a `## what it does` note on its rule line.
.PHONY: help
help: ## list the targets
	@echo "redis-ps: make TARGET (Debian 12; outputs under build/)"
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
	  sed -E 's/^([a-zA-Z_-]+):.*## (.*)$$/\1|\2/' | awk -F'|' '{printf "  %-18s %s\n", $$1, $$2}'

# ---- tests -----------------------------------------------------------------

test: check-deps check-layers all check-design unit pytest ## unit tests (cmocka) + integration tests (pytest); what CI runs first

# The design check, listing every call cycle among the files of ml/, train/ and
# tools/ with the symbols that close it (2-file ones are allowed; docs/design.md).
# check-design enforces the same rules on every component: this is the listing.
.PHONY: check-cycles
check-cycles: all ## check-design, listing the call cycles of ml/, train/, tools/ with their symbols
	@$(PYTHON) scripts/check_design.py --obj $(OBJ) --cycles ml train tools

# Design check (scripts/check_design.py, docs/design.md "Design check"): no
# call circles between components or of more than 2 files inside one (bar the
# reasoned exceptions in scripts/design_allow.txt), one libps encoder per
# command, each protocol fact in one table. Reads the objects `all` built.
.PHONY: check-design
check-design: all
	@$(PYTHON) scripts/check_design.py --obj $(OBJ)

# Speed guard: the SGD apply of 1M floats, best of 30, against a memcpy of the
# same bytes in the same process. It measures ~2x here; a kernel that stops
# vectorizing measures ~14x. The wide margin absorbs machine noise. Skipped in
# sanitizer builds, whose instrumentation changes the kernels' speed.
ifeq ($(SANITIZE),)
SPEED_GUARD = $(B)/bench/apply_bench
endif

# UNIT_JOBS binaries run at a time (each prints its output whole when it ends).
UNIT_JOBS ?= 2
unit: $(TEST_BINS) $(SPEED_GUARD) ## the cmocka unit tests and the kernel speed guard
	@$(MAKE) --no-print-directory -O -j$(UNIT_JOBS) $(addprefix unit-run-,$(notdir $(TEST_BINS)))
ifeq ($(SANITIZE),)
	@echo "== apply kernel speed guard"; ./$(B)/bench/apply_bench --max-sgd-ratio 6 > $(B)/bench/apply_bench.out || \
	  { cat $(B)/bench/apply_bench.out; exit 1; }; grep -E '^sgd +1048576' $(B)/bench/apply_bench.out
endif

# PYTEST_ARGS lets a user select tests, e.g. PYTEST_ARGS="-k replica".
# python_tests/run_pytest.sh runs them in two passes: on PYTEST_JOBS pytest-xdist
# workers all but the tests marked serial or slow, then those alone (timing-sensitive
# or CPU-hungry: kill/freeze timing, speed ratios, fault injection, document runs).
# PYTEST_JOBS=0 runs everything in one serial pass.
# The fault-injection tests (marker 'slow') train asynchronously through kills
# and failovers, and their accuracy bounds sit close to the run-to-run spread
# of asynchronous training. Failed tests are therefore run once more, loudly
# (each pass its own, alone): a real regression fails twice. PYTEST_RERUN=0
# turns the second run off.
PYTEST_RERUN ?= 1
PYTEST_JOBS ?= 2
pytest: module client $(PTOOL_BINS) ## the integration tests (PYTEST_ARGS=..., PYTEST_RERUN=0, PYTEST_JOBS=2)
	@export PS_MODULE=$${PS_MODULE:-$(abspath $(B)/ps.so)} PYTHON=$(PYTHON) \
	  PYTEST_JOBS=$(PYTEST_JOBS) PYTEST_RERUN=$(PYTEST_RERUN); \
	python_tests/run_pytest.sh $(PYTEST_ARGS)

# Soak: the fault-injection tests (marker slow: kills, failovers, restarts, resharding, the
# relay SIGKILLed at random points) SOAK_ROUNDS times, each round with its own PS_TEST_SEED
# (the random kill points of test_relay.py), stopping at the first failure (no rerun). For
# long runs before a release; `make test` runs each of them once.
SOAK_ROUNDS ?= 5
.PHONY: soak
soak: module client $(PTOOL_BINS) ## the fault-injection tests SOAK_ROUNDS (5) times with new seeds
	@set -e; cd python_tests && export PS_MODULE=$${PS_MODULE:-$(abspath $(B)/ps.so)}; \
	for i in $$(seq 1 $(SOAK_ROUNDS)); do \
	  echo "== soak round $$i of $(SOAK_ROUNDS) (PS_TEST_SEED=$$i)"; \
	  PS_TEST_SEED=$$i $(PYTHON) -m pytest -q -x -m slow $(PYTEST_ARGS); done

# ---- memory safety: sanitizers, valgrind, fuzzing (docs/security.md, docs/fuzzing.md)

# The whole unit suite and the integration tests against an ASan+UBSan module,
# built into its own dir so the normal build is left alone. The python tests
# run ps-train and the C drivers from build/ (uninstrumented: the module is
# what faces hostile input), so those are built first. ASAN_PYTEST_ARGS picks
# the tests (default: all but the slow fault-injection training runs, which
# mostly exercise the uninstrumented worker, and the 'nosan' ones, which run no
# module code the rest does not; ASAN_PYTEST_ARGS= runs them too).
ASAN_B ?= build/asan
ASAN_PYTEST_ARGS ?= -m "not slow and not nosan"
check-asan: check-deps ## unit + integration tests against an ASan/UBSan module (CI)
	$(MAKE) --no-print-directory client ptools
	$(MAKE) --no-print-directory B=$(ASAN_B) SANITIZE=address,undefined module unit
	PS_MODULE=$(abspath $(ASAN_B)/ps.so) $(MAKE) --no-print-directory pytest \
	  PYTEST_ARGS='$(ASAN_PYTEST_ARGS) $(PYTEST_ARGS)'

# What check-asan runs, built only (the ASan module and unit binaries): .ci/run builds it
# and the fuzz harnesses at idle priority while make test runs, so those stages start built.
.PHONY: asan-build unit-bins
asan-build:
	$(MAKE) --no-print-directory B=$(ASAN_B) SANITIZE=address,undefined module unit-bins
unit-bins: $(TEST_BINS) $(SPEED_GUARD)

# valgrind over the unit tests (definite leaks and invalid accesses fail) and
# over a redis-server session with the module (fuzz/valgrind-session.sh).
VALGRIND = valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
           --show-leak-kinds=definite
# VALGRIND_JOBS runs (each a single-threaded valgrind) at a time: the server
# session and the unit binaries side by side, each checked in full as before.
VALGRIND_JOBS ?= 2
valgrind: $(TEST_BINS) $(B)/ps.so ## unit tests and a server session under valgrind (CI)
	@$(MAKE) --no-print-directory -O -j$(VALGRIND_JOBS) valgrind-server \
	  $(addprefix valgrind-run-,$(notdir $(TEST_BINS)))

valgrind-unit: $(TEST_BINS)
	@$(MAKE) --no-print-directory -O -j$(VALGRIND_JOBS) $(addprefix valgrind-run-,$(notdir $(TEST_BINS)))

# A unit binary that hangs (a fake node waiting for bytes that never come) fails
# after UNIT_TIMEOUT seconds instead of holding CI until its limit.
UNIT_TIMEOUT ?= 300
unit-run-%: $(B)/tests/%
	@echo "== $<"; timeout -k 10 $(UNIT_TIMEOUT) ./$< || { rc=$$?; \
	  [ $$rc = 124 ] && echo "$< hung: killed after $(UNIT_TIMEOUT) s"; exit $$rc; }

valgrind-run-%: $(B)/tests/%
	@echo "== valgrind $<"; OPENBLAS_NUM_THREADS=1 $(VALGRIND) ./$< > $<.valgrind.out 2>&1 || \
	  { cat $<.valgrind.out; exit 1; }; tail -1 $<.valgrind.out

valgrind-server: $(B)/ps.so
	fuzz/valgrind-session.sh $(abspath $(B)/ps.so)

# libFuzzer harnesses (clang + libclang-rt-14-dev), built into build/fuzz/.
# fuzz-short runs each for FUZZ_SECONDS after replaying its corpus
# (fuzz/corpus/<name>/, which includes every crash found so far).
FUZZ_CC ?= clang
FUZZ_B = build/fuzz
FUZZ_SECONDS ?= 25
FUZZ_CFLAGS = -std=c11 -g -O1 -D_GNU_SOURCE -ffp-contract=off -fno-fast-math -fno-math-errno \
              -Wall -Wextra -Werror -Wno-unused-command-line-argument \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $(TEST_INCS)
FUZZ_NAMES = fuzz_codec fuzz_header fuzz_push fuzz_embed fuzz_resp fuzz_ids fuzz_args
FUZZ_BINS = $(addprefix $(FUZZ_B)/,$(FUZZ_NAMES))
FUZZ_DEPS = $(HDRS) fuzz/fuzz_util.h
MODULE_CORE_SRC = $(MODULE_PURE) $(COMMON_SRC)

fuzz: $(FUZZ_BINS) ## build the libFuzzer harnesses (clang)

$(FUZZ_B)/fuzz_codec: fuzz/fuzz_codec.c $(wildcard common/codec*.c) common/shape.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lm

# The RDB loader itself (module/type.c) against a fake RedisModuleIO.
$(FUZZ_B)/fuzz_header: fuzz/fuzz_header.c module/type.c $(MODULE_CORE_SRC) $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lm

# The ps-embeds RDB loader (module/type_embed.c) against a fake RedisModuleIO.
$(FUZZ_B)/fuzz_embed: fuzz/fuzz_embed.c module/type_embed.c module/ring_table_io.c $(MODULE_CORE_SRC) $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lm

$(FUZZ_B)/fuzz_push: fuzz/fuzz_push.c $(MODULE_CORE_SRC) $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lm

# libps's RESP framer (libps/resp.c), checked against hiredis's reader.
$(FUZZ_B)/fuzz_resp: fuzz/fuzz_resp.c libps/resp.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lhiredis

# The IDFORMAT EF id lists (common/idlist.c).
$(FUZZ_B)/fuzz_ids: fuzz/fuzz_ids.c common/idlist.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^)

# The module's parsers of PS.PUSHGRAD, PS.PULL and PS.SCORE (module/args.c)
# against a fake of the Redis calls they make.
$(FUZZ_B)/fuzz_args: fuzz/fuzz_args.c module/args.c $(COMMON_SRC) $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lm

# fuzz_ids and fuzz_args cover small parsers (their coverage stops growing within seconds):
# FUZZ_SECONDS_SMALL each, to keep CI's time.
FUZZ_SECONDS_SMALL ?= 8
FUZZ_SMALL = fuzz_ids fuzz_args

# FUZZ_JOBS harnesses fuzz at a time (each single-threaded).
FUZZ_JOBS ?= 2
fuzz-short: $(FUZZ_BINS) ## replay each fuzz corpus, then fuzz FUZZ_SECONDS each (CI)
	@$(MAKE) --no-print-directory -O -j$(FUZZ_JOBS) $(addprefix fuzz-run-,$(FUZZ_NAMES))

fuzz-run-%: $(FUZZ_B)/%
	@f=$*; secs=$(FUZZ_SECONDS); case " $(FUZZ_SMALL) " in *" $$f "*) secs=$(FUZZ_SECONDS_SMALL);; esac; \
	  echo "== $$f: corpus replay + $${secs}s"; \
	  rm -rf $(FUZZ_B)/$$f.work; mkdir -p $(FUZZ_B)/$$f.work $(FUZZ_B)/$$f.crashes; \
	  $(FUZZ_B)/$$f -max_total_time=$$secs -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
	    -print_final_stats=0 -artifact_prefix=$(FUZZ_B)/$$f.crashes/ \
	    $(FUZZ_B)/$$f.work fuzz/corpus/$$f > $(FUZZ_B)/$$f.log 2>&1 || \
	    { tail -60 $(FUZZ_B)/$$f.log; echo "$$f FAILED: reproducer in $(FUZZ_B)/$$f.crashes/"; exit 1; }; \
	  grep -E "^#[0-9]+.DONE" $(FUZZ_B)/$$f.log | tail -1

bench: check-deps all $(BENCH_BINS) ## kernels, PUSHGRAD/PULL vs SET/GET, training (about 2.5 minutes)
	bench/run.sh

# Durability vs throughput on a 3+3 cluster (a few minutes; not part of bench).
bench-durability: check-deps all ## throughput of each persistence x WAIT setting on a 3+3 cluster
	PYTHONPATH=python_tests $(PYTHON) bench/durability.py

# Training over a tc-shaped link in a private network namespace (needs root;
# skips otherwise; about 5 minutes).
.PHONY: bench-shaped
bench-shaped: check-deps all ## formats over a tc-shaped 1 Gbit/100 Mbit link (root; about 5 minutes)
	bench/shaped_link.sh

# Training speed of every wire format on loopback against F32 (about 2 minutes).
.PHONY: bench-formats
bench-formats: check-deps all ## training speed of every wire format against F32 (about 2 minutes)
	bench/formats_bench.sh

demo: check-deps all ## Fashion-MNIST MLP, 2 async workers, private server
	scripts/demo.sh

demo-cluster: check-deps all ## the same on 3 masters + 3 replicas, one master killed mid-run
	scripts/demo-cluster.sh

.PHONY: demo-sparse
demo-sparse: check-deps all ## a factorization machine on 1M generated clicks (embedding tables)
	scripts/demo-sparse.sh

# ---- Python package, plots ---------------------------------------------------

.PHONY: pyinstall plots
# Installs python/ (package redis_ps) for the invoking user, offline: its build backend
# is in the tree and requires nothing (python/README.md "Install"; in a venv:
# python3 -m venv --system-site-packages V && V/bin/pip install ./python).
# PYINSTALL_FLAGS= installs system-wide instead.
PYINSTALL_FLAGS ?= --user --break-system-packages
pyinstall: ## pip-install python/ (redis_ps) for this user, offline
	$(PYTHON) -m pip install --no-deps --no-index $(PYINSTALL_FLAGS) ./python

# A real training run (ps-train; PyTorch example and bench when python3-torch is
# installed), then its curves and throughput bars as PNG in $(PLOTS_DIR).
# The default writes under build/ (untracked); `make plots PLOTS_DIR=docs/img`
# refreshes the pictures the docs show, on purpose.
PLOTS_DIR ?= $(B)/plots
plots: check-deps all ## train, then draw the curves as PNG into PLOTS_DIR (build/plots)
	PLOTS_DIR=$(PLOTS_DIR) PYTHON=$(PYTHON) scripts/plots.sh

# The tree topology (ps-relay) against the star: upstream bytes per sample and accuracy.
demo-tree: check-deps all ## 4 workers as a star and as a tree of 2 relays: bytes and accuracy
	scripts/demo-tree.sh

# Online learning and serving: a drifting click stream trained by ps-train stream, served
# by PS.SCORE on a replica; AUC per period against a frozen model, and freshness.
.PHONY: demo-online
demo-online: check-deps all ## a drifting click stream trained online and served: AUC and freshness
	$(PYTHON) scripts/demo_online.py

# Three groups across shaped links (network namespaces, needs root): ring vs star vs tree.
.PHONY: demo-ring
demo-ring: check-deps all ## 3 groups x 2 workers over 20 Mbit/s links: ring, star, tree compared
	scripts/demo-ring.sh

# ---- dependencies ----------------------------------------------------------

DEB_PKGS = gcc make pkg-config redis-server redis-tools libhiredis-dev libopenblas-dev \
           libcmocka-dev zlib1g-dev python3 python3-redis python3-pytest python3-pytest-xdist python3-numpy \
           python3-venv python3-torch \
           dataset-fashion-mnist clang libclang-rt-14-dev valgrind \
           prometheus-redis-exporter gnuplot-nox

# Installs the Debian packages that are missing (as root), or prints the line to run.
deps: ## install the missing Debian packages (root), or print the apt-get line
	@missing=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "deps: all Debian packages present"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing $$missing"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } || \
	    { echo "deps: apt-get failed (another apt/dpkg holding the lock?): not building"; exit 1; }; \
	  still=$$(for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$still" ]; then echo "deps: still missing after apt-get: $$still"; exit 1; fi; \
	else \
	  echo "deps: missing packages; run as root:"; \
	  echo "  apt-get install -y $$missing"; exit 1; \
	fi

# A failed install stops make here (exit 1) instead of a compile error further on.
check-deps:
	@for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || { $(MAKE) --no-print-directory deps || exit 1; break; }; done

# `make install PREFIX=/usr/local DESTDIR=` installs the module, the worker and
# libps with a pkg-config file; DESTDIR stages the tree elsewhere (packaging),
# the paths written into libps.pc stay those of PREFIX. libps comes shared
# (libps.so -> libps.so.0 -> libps.so.0.1.0) and static (libps.a):
# `cc prog.c $(pkg-config --cflags --libs libps)` links the shared one (hiredis is
# a public Requires: ps.h includes hiredis.h and hands out redisReply), and
# `--static` adds the private -lm for a link against libps.a (docs/reference.md).
PREFIX ?= /usr/local
INSTALL_FILES = lib/redis-ps/ps.so bin/ps-train bin/ps-gen-ctr bin/ps-relay bin/ps-export lib/libps.a lib/$(LIBPS_SO) \
                lib/$(LIBPS_SONAME) lib/libps.so include/redis-ps/ps.h include/redis-ps/ps_topology.h \
                include/redis-ps/ps_serve.h lib/pkgconfig/libps.pc

$(B)/libps.pc: Makefile
	@mkdir -p $(dir $@)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: libps' 'Description: C client of the redis-ps parameter server (Redis module ps.so)' \
	  'Version: $(LIBPS_VERSION)' 'Requires: hiredis' \
	  'Libs: -L$${libdir} -lps' 'Libs.private: -lm' 'Cflags: -I$${includedir}' > $@

# Rebuilt every time: the file records PREFIX, which may differ between calls.
.PHONY: $(B)/libps.pc
install: all $(B)/libps.pc ## install module, ps-train, ps-relay, ps-export, libps (PREFIX=/usr/local, DESTDIR=)
	install -d $(DESTDIR)$(PREFIX)/lib/redis-ps $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include/redis-ps \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 0755 $(B)/ps.so $(DESTDIR)$(PREFIX)/lib/redis-ps/ps.so
	install -m 0755 $(B)/ps-train $(DESTDIR)$(PREFIX)/bin/ps-train
	install -m 0755 $(B)/ps-gen-ctr $(DESTDIR)$(PREFIX)/bin/ps-gen-ctr
	install -m 0755 $(B)/ps-relay $(DESTDIR)$(PREFIX)/bin/ps-relay
	install -m 0755 $(B)/ps-export $(DESTDIR)$(PREFIX)/bin/ps-export
	install -m 0644 $(B)/libps.a $(DESTDIR)$(PREFIX)/lib/libps.a
	install -m 0755 $(B)/$(LIBPS_SO) $(DESTDIR)$(PREFIX)/lib/$(LIBPS_SO)
	ln -sf $(LIBPS_SO) $(DESTDIR)$(PREFIX)/lib/$(LIBPS_SONAME)
	ln -sf $(LIBPS_SONAME) $(DESTDIR)$(PREFIX)/lib/libps.so
	install -m 0644 libps/include/redis-ps/ps.h libps/include/redis-ps/ps_topology.h \
	  libps/include/redis-ps/ps_serve.h $(DESTDIR)$(PREFIX)/include/redis-ps/
	install -m 0644 $(B)/libps.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/libps.pc

# Removes what install put there (same PREFIX and DESTDIR), and the redis-ps
# folders if they are left empty.
uninstall: ## remove what install put under PREFIX
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALL_FILES))
	-rmdir $(DESTDIR)$(PREFIX)/lib/redis-ps $(DESTDIR)$(PREFIX)/include/redis-ps 2>/dev/null

clean: ## remove build/
	rm -rf $(B)
