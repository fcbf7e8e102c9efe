# cecoll: build, run, test, install.
#   make          build/libcecoll.so (a link to libcecoll.so.$(VERSION)) and build/include/cecoll/
#   make help     this list
#   make run      the main job: every cecoll-perf operation on 4 ranks (host device, or the GPU where
#                 present): nccl-tests' table, build/perf.json and its plot build/perf.png
#   make perf     the same sweep without the plot: build/perf.json (PERF_JSON=...)
#   make plot     renders an existing build/perf.json (PERF_JSON=...) as build/perf.png (PERF_PNG=...),
#                 no new sweep; build/cecoll-plot needs Go's module proxy once
#   make test     Go tests (host device, with and without chaos, -race), the C tests, the READMEs' examples,
#                 cecoll-perf's format, the Python tests; each part alone: make test-lint, test-layout,
#                 test-go, test-race, test-chaos, test-c, test-readme, test-perf, test-python
#   make test-matrix   the whole correctness matrix on the host device (ctests/README.md)
#   make test-mutants  every defect test must fail with its fix undone (a few minutes; docs/protocol.md)
#   make fuzz     every fuzz target of the peer-facing decoders, FUZZTIME each (make test runs their seeds)
#   make bench-mpi     the OpenMPI baseline, where mpicc exists
#   make install  PREFIX=/usr/local   the library and its links, include/cecoll/, CMake and pkg-config files
#   make install-dropin PREFIX=/usr/local   cecoll as libnccl.so.2 and librccl.so.1 in $(PREFIX)/lib/cecoll-dropin,
#                 then prints the LD_LIBRARY_PATH line that puts it in front of a program's NCCL
#   make dropin   those two drop-in copies in build/dropin/ only
#   make clean    removes build/

GO      ?= go
CC      ?= gcc
PREFIX  ?= /usr/local
BUILD   := build
# cecoll's own version (semantic; the NCCL API it speaks is nccl.h's): the
# library's file name and SONAME, the CMake and pkg-config files.
VERSION := $(shell cat VERSION)
SONAME  := libcecoll.so.$(firstword $(subst ., ,$(VERSION)))
LIBFILE := $(BUILD)/libcecoll.so.$(VERSION)
LIB     := $(BUILD)/libcecoll.so
NCCL_API := $(shell sed -n 's/^\#define NCCL_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$$/\2/p' include/nccl.h | paste -sd.)
HEADERS := $(BUILD)/include/cecoll/nccl.h $(BUILD)/include/cecoll/nccl_ce.h
PKGFILES := $(BUILD)/cmake/cecollConfig.cmake $(BUILD)/cmake/cecollConfigVersion.cmake $(BUILD)/pkgconfig/cecoll.pc
GOFILES := $(shell find export internal -name '*.go' -not -name '*_test.go') go.mod go.sum
CFILES  := $(wildcard export/*.c export/*.h) export/exports.map include/nccl.h include/nccl_ce.h
PERF    := $(BUILD)/cecoll-perf
# cecoll-plot is its own Go module (tools/plot/go.mod): gonum/plot stays out of the library's go.mod.
PLOT    := $(BUILD)/cecoll-plot
# make run / make perf: a short sweep of every operation on 4 ranks.
RUN_ARGS ?= -g 4 -b 32 -e 32M -f 4 -n 10 -w 2 -c 1 -R 2
# The sweep's JSON (make run, make perf write it; make plot reads it) and its plot.
PERF_JSON ?= $(BUILD)/perf.json
PERF_PNG  ?= $(BUILD)/perf.png

# Go's own exported symbols stay hidden: only nccl*, pnccl* and cecoll* leave the library.
LDFLAGS := -extldflags "-Wl,--version-script=$(CURDIR)/export/exports.map -Wl,-soname,$(SONAME)"

.PHONY: all help run perf plot bench-mpi test test-lint test-layout test-readme test-perf test-go test-race test-chaos test-c test-python test-matrix install install-dropin dropin clean test-mutants fuzz

all: $(LIB) $(HEADERS) $(PKGFILES)

# The list at the top of this file.
help:
	@sed -n '2,/^$$/s/^#//p' $(firstword $(MAKEFILE_LIST)) | sed -e 's|$$(VERSION)|$(VERSION)|g' -e 's|$$(PREFIX)|$(PREFIX)|g'

$(LIBFILE): $(GOFILES) $(CFILES) VERSION
	@mkdir -p $(BUILD)
	$(GO) build -buildmode=c-shared -ldflags '$(LDFLAGS)' -o $@ ./export
	@rm -f $(basename $@).h  # cgo's generated header: include/ is the contract

# The names the linker (-lcecoll) and the loader (the SONAME) look for.
$(LIB): $(LIBFILE)
	ln -sf $(notdir $(LIBFILE)) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@

# Under cecoll/, so that -Ibuild/include never hides a real NCCL's nccl.h;
# the rm takes away the copies earlier builds left in build/include/.
$(BUILD)/include/cecoll/%.h: include/%.h
	@mkdir -p $(BUILD)/include/cecoll
	@rm -f $(BUILD)/include/$*.h
	cp $< $@

# The CMake package and pkg-config files make install copies (relocatable:
# each finds the prefix from its own place).
$(BUILD)/cmake/%.cmake: cmake/%.cmake.in VERSION include/nccl.h
	@mkdir -p $(BUILD)/cmake
	sed -e 's|@CECOLL_VERSION@|$(VERSION)|g' -e 's|@NCCL_API_VERSION@|$(NCCL_API)|g' $< >$@
$(BUILD)/pkgconfig/cecoll.pc: cmake/cecoll.pc.in VERSION
	@mkdir -p $(BUILD)/pkgconfig
	sed -e 's|@CECOLL_VERSION@|$(VERSION)|g' $< >$@

$(PERF): tools/perf/cecoll_perf.c include/nccl.h include/nccl_ce.h $(LIB)
	$(CC) -O2 -Wall -Werror -Iinclude -o $@ $< -L$(BUILD) -lcecoll -Wl,-rpath,'$$ORIGIN' -lpthread -lm

# The OpenMPI baseline: built only where mpicc exists (Debian: openmpi-bin libopenmpi-dev).
MPICC ?= mpicc
MPIBENCH := $(BUILD)/mpi-coll-bench
$(MPIBENCH): lab/mpi/mpi_coll_bench.c
	@mkdir -p $(BUILD)
	$(MPICC) -O2 -Wall -Werror -o $@ $<

# Builds the MPI baseline where mpicc exists (loud skip otherwise); lab/mpi/compare.sh runs the comparison.
bench-mpi: all $(PERF)
	@if command -v $(MPICC) >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory $(MPIBENCH); \
	else \
	  echo "## SKIPPED: $(MPIBENCH) (no $(MPICC); apt-get install openmpi-bin libopenmpi-dev)"; \
	fi

$(PLOT): $(wildcard tools/plot/*.go) tools/plot/go.mod tools/plot/go.sum
	@mkdir -p $(BUILD)
	cd tools/plot && $(GO) build -o ../../$@ .

# cecoll-perf runs build/cecoll-plot itself for --plot.
run: all $(PERF) $(PLOT)
	$(PERF) $(RUN_ARGS) --json $(PERF_JSON) --plot $(PERF_PNG)
	@echo "plot: $(PERF_PNG)"

# The sweep alone; make plot renders it.
perf: all $(PERF)
	$(PERF) $(RUN_ARGS) --json $(PERF_JSON)
	@echo "sweep: $(PERF_JSON) (make plot renders it)"

# Renders a sweep already made (make run, make perf, or one copied from a GPU machine): no new run.
plot: $(PLOT)
	@test -f $(PERF_JSON) || { echo "make plot: no $(PERF_JSON): run make perf (or make run) first, or name a sweep's JSON: make plot PERF_JSON=FILE"; exit 1; }
	$(PLOT) -in $(PERF_JSON) -out $(PERF_PNG)
	@echo "plot: $(PERF_PNG)"

test: test-lint test-layout test-go test-race test-chaos test-c test-readme test-perf test-python
	@echo "make test: all parts passed"

# The product tree never refers to lab/ (measurement tooling, lab/README.md).
PRODUCT_DIRS := export internal include ctests python
test-layout:
	@if grep -rnIE '(^|[^A-Za-z0-9_.-])lab/' $(PRODUCT_DIRS); then \
	  echo "test-layout: the lines above refer to lab/ from the product tree"; exit 1; \
	fi
	@echo "test-layout: no product file refers to lab/"
	@# A mutant that no longer applies kills nothing: make test-mutants would report it
	@# BROKEN, but only when someone runs it; this check costs a second.
	@bad=0; for p in internal/ce/mutants/*.patch internal/comm/mutants/*.patch export/mutants/*.patch; do \
	  git apply --check "$$p" 2>/dev/null || { echo "test-layout: $$p no longer applies: regenerate it"; bad=1; }; \
	done; [ $$bad -eq 0 ] && echo "test-layout: every mutant patch applies"

# gofmt, go vet, go mod tidy and staticcheck (pinned by tools/lint/go.mod)
# in every Go module: tools/lint/check.sh.
test-lint:
	GO=$(GO) bash tools/lint/check.sh

test-go:
	$(GO) test -count=1 ./...
	cd tools/plot && $(GO) test -count=1 .

# The race detector on the runtime, the engine and the communicators (reduced sets).
test-race:
	$(GO) test -count=1 -race -short ./internal/...

# Each B test must fail when its fix is undone: internal/ce/mutants/*.patch,
# each applied in a scratch copy (a few minutes; not part of make test);
# likewise forward mode's internal/comm/mutants/F*.patch and export/mutants/X*.patch.
test-mutants:
	bash internal/ce/mutants/run.sh

# The fuzz targets of every decoder of what a peer or the environment sends
# (fuzz_test.go of internal/bootstrap, internal/peermem and internal/comm;
# internal/param hostile_test.go), each for
# FUZZTIME, one after the other: go test -fuzz takes one target of one
# package. Plain go test (make test) runs their seed corpora. A finding
# is written to the package's testdata/fuzz/ and fails the run. Go 1.26's
# coordinator may fail a target with "context deadline exceeded" as
# FUZZTIME ends (go.dev/issue/75804, fixed in 1.27): without a new input
# written that is reported, not failed.
FUZZTIME ?= 20s
# Minimising a new input may take 60 s by default, a whole run's time.
FUZZFLAGS ?= -fuzzminimizetime 2s
FUZZ_PKGS := ./internal/bootstrap ./internal/peermem ./internal/comm ./internal/param
fuzz:
	@log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	for pkg in $(FUZZ_PKGS); do \
	  for fn in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$fn ($(FUZZTIME))"; \
	    before=$$(ls $$pkg/testdata/fuzz/$$fn 2>/dev/null | wc -l); \
	    $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg >$$log 2>&1; rc=$$?; \
	    grep '^fuzz: elapsed' $$log | tail -1; grep -v '^fuzz: elapsed' $$log; \
	    after=$$(ls $$pkg/testdata/fuzz/$$fn 2>/dev/null | wc -l); \
	    if [ $$rc -ne 0 ]; then \
	      if [ "$$after" -eq "$$before" ] && grep -q 'context deadline exceeded' $$log; then \
	        echo "## $$fn: no input written: the fuzztime deadline race of go.dev/issue/75804, not a finding"; \
	      else \
	        echo "## $$fn failed (a finding is in $$pkg/testdata/fuzz/$$fn)"; exit 1; \
	      fi; \
	    fi; \
	  done; \
	done

# The host device's adversarial scheduler: a fixed list of seeds. A failure under
# any seed is a bug, not a flake.
CHAOS_SEEDS ?= 1 2 3
test-chaos:
	@for s in $(CHAOS_SEEDS); do \
	  echo "== CECOLL_HOST_CHAOS=$$s"; \
	  CECOLL_HOST_CHAOS=$$s $(GO) test -count=1 -short ./internal/hip/host/ ./internal/ce/ ./internal/comm/ || exit 1; \
	done
	@# The 32 hardware queues cecoll sets on a GPU, each held by a stream with
	@# work pending: a change that parks more streams than that stalls here
	@# (the communicators' tests: groups, threads, processes; about 12 s).
	@echo "== CECOLL_HOST_QUEUES=32"
	CECOLL_HOST_QUEUES=32 $(GO) test -count=1 -short ./internal/comm/

test-c: all dropin
	bash ctests/run.sh

# The correctness matrix (ctests/matrix.c): every cell under a watchdog, 16 cells per
# process (-b). Hung cells sleep rather than spin, so more run at once than there are cores
# (docs/performance.md, "The matrix's running time"). make test runs it too (ctests/run.sh).
# $ORIGIN/.. finds libcecoll.so in build/, also where the tree was copied (a GPU machine).
MATRIX := $(BUILD)/ctests/matrix
MATRIX_ARGS ?= -j 6 -b 16 -t 10
$(MATRIX): ctests/matrix.c ctests/common.c ctests/common.h ctests/mp_common.c ctests/mp_common.h include/nccl.h include/nccl_ce.h $(LIB)
	@mkdir -p $(BUILD)/ctests
	$(CC) -std=gnu17 -O1 -g -Wall -Werror -Iinclude -o $@ ctests/matrix.c ctests/common.c ctests/mp_common.c \
	  -L$(BUILD) -lcecoll -Wl,-rpath,'$$ORIGIN/..' -lpthread

test-matrix: all $(MATRIX)
	CECOLL_BACKEND=host $(MATRIX) --run all $(MATRIX_ARGS)
	@for s in 1 2 3; do \
	  echo "== CECOLL_HOST_CHAOS=$$s"; \
	  CECOLL_HOST_CHAOS=$$s CECOLL_BACKEND=host $(MATRIX) --run all $(MATRIX_ARGS) || exit 1; \
	done

# Every example of the READMEs (blocks marked runnable), built and run twice as
# the README says (ctests/readme_examples.sh); Python ones skipped loudly without torch.
test-readme: all
	TEST_PYTHON=$(TEST_PYTHON) bash ctests/readme_examples.sh README.md python/README.md ctests/README.md

# cecoll-perf's options, errors and nccl-tests output format (tools/perf/perf_test.py), host device.
test-perf: all $(PERF) $(PLOT)
	$(TEST_PYTHON) tools/perf/perf_test.py $(PERF)

# The Python binding (python/cecoll) on 2 and 4 spawned processes, host device.
# Always Debian's interpreter: a python3 earlier on PATH may lack torch.
# Without torch or pytest for it the tests are skipped, loudly, not failed.
TEST_PYTHON := /usr/bin/python3
test-python: all
	@if $(TEST_PYTHON) -c 'import torch, pytest' >/dev/null 2>&1; then \
	  echo "PYTHONPATH=python CECOLL_LIBRARY=$(LIB) $(TEST_PYTHON) -m pytest -q python/tests"; \
	  PYTHONPATH=$(CURDIR)/python CECOLL_LIBRARY=$(CURDIR)/$(LIB) \
	    $(TEST_PYTHON) -m pytest -q -p no:cacheprovider python/tests; \
	else \
	  echo "################################################################"; \
	  echo "## SKIPPED: python tests (torch/pytest not installed for $(TEST_PYTHON))"; \
	  echo "## install them: apt-get install python3-torch python3-pytest python3-numpy"; \
	  echo "################################################################"; \
	fi

# The layout CMakeLists.txt's install makes too.
install: all
	install -d $(DESTDIR)$(PREFIX)/lib/cmake/cecoll $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/cecoll
	install -m 0755 $(LIBFILE) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(notdir $(LIBFILE)) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libcecoll.so
	install -m 0644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/cecoll/
	install -m 0644 $(BUILD)/cmake/cecollConfig.cmake $(BUILD)/cmake/cecollConfigVersion.cmake $(DESTDIR)$(PREFIX)/lib/cmake/cecoll/
	install -m 0644 $(BUILD)/pkgconfig/cecoll.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/

# Drop-in copies: cecoll with the SONAME of the library it stands in for, so
# a program that needs libnccl.so.2 (or librccl.so.1) loads it from the
# directory put first on LD_LIBRARY_PATH, and cecoll forwards what it does
# not run to the real one it finds further on (docs/forward.md).
DROPIN := $(BUILD)/dropin
$(DROPIN)/libnccl.so.2 $(DROPIN)/librccl.so.1: $(GOFILES) $(CFILES)
	@mkdir -p $(DROPIN)
	$(GO) build -buildmode=c-shared -ldflags '-extldflags "-Wl,--version-script=$(CURDIR)/export/exports.map -Wl,-soname,$(notdir $@)"' -o $@ ./export
	@rm -f $(basename $@).h $(DROPIN)/*.h

dropin: $(DROPIN)/libnccl.so.2 $(DROPIN)/librccl.so.1

install-dropin: dropin
	install -d $(DESTDIR)$(PREFIX)/lib/cecoll-dropin
	install -m 0755 $(DROPIN)/libnccl.so.2 $(DROPIN)/librccl.so.1 $(DESTDIR)$(PREFIX)/lib/cecoll-dropin/
	@echo "drop-in: libnccl.so.2 and librccl.so.1 installed in $(DESTDIR)$(PREFIX)/lib/cecoll-dropin; run a program on them with"
	@echo "  LD_LIBRARY_PATH=$(PREFIX)/lib/cecoll-dropin:\$$LD_LIBRARY_PATH <program>"
	@echo "(a program that names its NCCL in DT_RPATH, as torch's wheels do: LD_PRELOAD=$(PREFIX)/lib/cecoll-dropin/libnccl.so.2 <program>)"

clean:
	rm -rf $(BUILD)
