# sparsellm.c build.
#   make            the product: CUDA binaries (train_gpt_relu, infer) and the CPU tools (tokenize, encode,
#                   train_cpu, ref_export)
#   make test       build and run the tests: the include-graph check, the two-unit link check, the CPU tests, and
#                   the GPU tests when a GPU is visible (built either way); builds the benchmarks too, whose
#                   command lines test_cli checks
#   make test-py    the Python tests of scripts/paper_report.py and dev/plots.py (part of make test)
#   make bench      the benchmarks of dev/bench
#   make clean
# Options: GPU_ARCH (default Hopper sm_90a), NO_MPI=1, NO_NCCL=1, NVCC, CC.
# A local dependency prefix in .deps/ (scripts/deps_unpack.sh) is used when present.

CC      ?= gcc
NVCC    ?= nvcc
BUILD   := build
GPU_ARCH ?= -gencode=arch=compute_90a,code=sm_90a

CFLAGS  := -O2 -g -std=c11 -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -I. -Icore
NVFLAGS := -O3 -g -std=c++17 $(GPU_ARCH) -I. -Icore -Xcompiler -Wall,-Wno-unused-function \
           --expt-relaxed-constexpr -lineinfo
LDLIBS  := -lcjson -lpcre2-8 -lm -lpthread -ldl

# Local prefix of unpacked .deb files (offline GPU machines).
DEPS_LIB := $(firstword $(wildcard .deps/usr/lib/x86_64-linux-gnu .deps/usr/lib))
ifneq ($(wildcard .deps/usr/include),)
  CFLAGS  += -I.deps/usr/include
  NVFLAGS += -I.deps/usr/include
endif
ifneq ($(DEPS_LIB),)
  LDFLAGS_DEPS := -L$(DEPS_LIB) -Wl,-rpath,$(abspath $(DEPS_LIB))
  NVLDFLAGS_DEPS := -L$(DEPS_LIB) -Xlinker -rpath -Xlinker $(abspath $(DEPS_LIB))
endif

CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
HAVE_NVCC := $(if $(shell command -v $(NVCC) 2>/dev/null),1,)
CUDA_LIBS := -lcublasLt -lcublas -lcuda -ldl

# NCCL (multi-GPU) and MPI (launcher) are detected and optional: core/dist.cuh compiles them in when USE_NCCL /
# USE_MPI are defined. NCCL outside the CUDA toolkit (e.g. the nvidia-nccl pip wheel): NCCL_HOME=<dir with
# include/nccl.h and lib/libnccl.so>.
ifeq ($(NO_NCCL),)
  ifneq ($(NCCL_HOME),)
    HAVE_NCCL := 1
    NCCL_FLAGS := -DUSE_NCCL -I$(NCCL_HOME)/include
    NCCL_LIBS := -L$(NCCL_HOME)/lib -Xlinker -rpath -Xlinker $(NCCL_HOME)/lib -lnccl
  else ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h),)
    HAVE_NCCL := 1
    NCCL_FLAGS := -DUSE_NCCL
    NCCL_LIBS := -lnccl
  endif
endif
ifeq ($(NO_MPI),)
  MPI_INC := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openmpi/include /usr/include/openmpi /usr/include/x86_64-linux-gnu/openmpi))
  MPI_LIBDIR := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openmpi/lib))
  ifneq ($(and $(MPI_INC),$(wildcard $(MPI_INC)/mpi.h)),)
    HAVE_MPI := 1
    MPI_FLAGS := -DUSE_MPI -I$(MPI_INC)
    MPI_LIBS := $(if $(MPI_LIBDIR),-L$(MPI_LIBDIR)) -lmpi
  endif
endif

# ---- C library shared by all binaries and tests --------------------------------------------
LIB_SRCS := $(filter-out %_main.c,$(wildcard core/*.c dataloader/*.c model/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libsllm.a

# ---- tests ---------------------------------------------------------------------------------
TEST_SUPPORT_SRCS := $(filter-out test/test_%.c %_main.c,$(wildcard test/*.c))
TEST_SUPPORT_OBJS := $(TEST_SUPPORT_SRCS:%.c=$(BUILD)/%.o)
CPU_TESTS := $(patsubst test/%.c,$(BUILD)/%,$(wildcard test/test_*.c))
GPU_TESTS := $(patsubst test/gpu/%.cu,$(BUILD)/gpu_%,$(wildcard test/gpu/test_*.cu))

# ---- binaries ------------------------------------------------------------------------------
# Command-line tools: any <dir>/<name>_main.c becomes build/<name>.
TOOLS     := $(foreach f,$(wildcard dataloader/*_main.c core/*_main.c model/*_main.c),$(BUILD)/$(notdir $(f:_main.c=)))
CUDA_BINS := $(patsubst %.cu,$(BUILD)/%,$(wildcard train_gpt_relu.cu infer.cu))
BENCHES   := $(patsubst dev/bench/%.cu,$(BUILD)/%,$(wildcard dev/bench/*.cu))

# Two translation units that include every model header, linked into one binary: proves that any two units may
# include any header (kernels and non-inline functions in headers are static).
LINK_CHECK := $(BUILD)/link_check

.PHONY: all cpu gpu tests-cpu tests-gpu test test-py bench include-graph clean
.SECONDARY: $(TEST_SUPPORT_OBJS) $(LIB_OBJS)
all: cpu gpu
cpu: $(LIB) $(TOOLS)
tests-cpu: $(CPU_TESTS)
ifeq ($(HAVE_NVCC),1)
gpu: $(CUDA_BINS)
tests-gpu: $(GPU_TESTS) $(LINK_CHECK)
bench: $(BENCHES)
else
gpu tests-gpu bench:
	@echo "nvcc not found: CUDA targets not built (install the CUDA toolkit; see scripts/setup.sh)"
endif

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	ar rcs $@ $^

$(BUILD)/%: dataloader/%_main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -MF $@.d $< -o $@ $(LIB) $(LDFLAGS_DEPS) $(LDLIBS)

$(BUILD)/%: core/%_main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -MF $@.d $< -o $@ $(LIB) $(LDFLAGS_DEPS) $(LDLIBS)

$(BUILD)/%: model/%_main.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -MF $@.d $< -o $@ $(LIB) $(LDFLAGS_DEPS) $(LDLIBS)

$(BUILD)/test_%: test/test_%.c $(TEST_SUPPORT_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itest -MMD -MP -MF $@.d $< -o $@ $(TEST_SUPPORT_OBJS) $(LIB) $(LDFLAGS_DEPS) -lcmocka $(LDLIBS)

$(BUILD)/gpu_test_%: test/gpu/test_%.cu $(TEST_SUPPORT_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Itest $< -o $@ $(TEST_SUPPORT_OBJS) $(LIB) $(NVLDFLAGS_DEPS) -lcmocka $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/%: %.cu $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $< -o $@ $(LIB) $(NVLDFLAGS_DEPS) $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/%: dev/bench/%.cu $(TEST_SUPPORT_OBJS) $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Itest $< -o $@ $(TEST_SUPPORT_OBJS) $(LIB) $(NVLDFLAGS_DEPS) $(LDLIBS) $(CUDA_LIBS)

$(LINK_CHECK): test/link/link_a.cu test/link/link_b.cu $(LIB)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) test/link/link_a.cu test/link/link_b.cu -o $@ $(LIB) $(NVLDFLAGS_DEPS) $(LDLIBS) $(CUDA_LIBS)

# Targets that include core/dist.cuh (NCCL communicator, MPI launch) compile and link NCCL and MPI when found.
DIST_USERS := $(BUILD)/gpu_test_dist $(BUILD)/train_gpt_relu
$(DIST_USERS): NVFLAGS += $(NCCL_FLAGS) $(MPI_FLAGS)
$(DIST_USERS): CUDA_LIBS += $(NCCL_LIBS) $(MPI_LIBS)

# Header dependencies of CUDA targets: rebuild when any header changes.
CUDA_HEADERS := $(wildcard core/*.h core/*.cuh twell/*.h twell/*.cuh model/*.h model/*.cuh dataloader/*.h test/*.h \
                  dev/bench/*.cuh)
$(CUDA_BINS) $(GPU_TESTS) $(BENCHES) $(LINK_CHECK): $(CUDA_HEADERS)

# The folder graph of #include "..." (arrows one way: core/ -> twell/ -> model/ -> binaries); fails on a cycle.
include-graph:
	@bash scripts/include_graph.sh

# bench too: test_cli runs every binary, the benchmarks included, with bad command lines (a stale benchmark would
# fail it).
test: include-graph all bench tests-cpu tests-gpu test-py
	@bash test/run_tests.sh $(CPU_TESTS) -- $(GPU_TESTS)

# The Python tests of the report and plotting scripts (standard library; test_plots skips without matplotlib).
test-py:
	@python3 test/test_paper_report.py
	@python3 test/test_plots.py

clean:
	rm -rf $(BUILD)

# Header dependencies of the C tools and tests (written next to each binary by -MMD).
-include $(LIB_OBJS:.o=.d) $(TEST_SUPPORT_OBJS:.o=.d) $(addsuffix .d,$(TOOLS) $(CPU_TESTS))

# ---- fuzz targets (libFuzzer through clang, with ASan + UBSan) ---------------------------------
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_SEED=N]   each target of test/fuzz/fuzz_*.c runs FUZZ_SECONDS on a seeded corpus
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := -g -O1 -std=c11 -D_GNU_SOURCE -I. -Icore -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_SRCS    := $(filter-out %_main.c,$(wildcard core/*.c dataloader/*.c))
FUZZ_TARGETS := $(patsubst test/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard test/fuzz/fuzz_*.c))
.PHONY: fuzz fuzz-build
$(BUILD)/fuzz/%: test/fuzz/%.c test/fuzz/fuzz_util.h $(FUZZ_SRCS) $(wildcard core/*.h dataloader/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< $(FUZZ_SRCS) -o $@ $(LDFLAGS_DEPS) $(LDLIBS)
fuzz-build: $(FUZZ_TARGETS)
fuzz: fuzz-build
	@FUZZ_SEED=$(FUZZ_SEED) bash test/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)
