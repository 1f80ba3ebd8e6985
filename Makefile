# cutrain build. `make` builds bin/cutrain, bin/cutrain_minimal and bin/cutrain_tests; `make test` runs the tests.
#
#   make                 CUDA build when nvcc is found (PATH or /usr/local/cuda/bin), else CPU-only
#   make CPU_ONLY=1      CPU-only build even when nvcc is there
#   make CUDA_ARCH=sm_90  one GPU architecture, machine code only (an H100/H200 host; also
#                        sm_80,sm_90 or nvcc's own -gencode flags)
#   make deps            installs the Debian packages cutrain needs (no-op when present)
#   make test | clean | demo
#   make slowest         the suite's 20 slowest test cases (sim-slowest: make sim-test's)
#   make stress          the suites again and again under load, naming what failed (tests/stress.sh)
#   make bundle          bundle/: binaries, libraries, data and run.sh for a GPU host (CUDA only)
#   make SIM=1           the GPU simulator's build (sim/README.md): every .cu as host C++ against
#                        sim/, in build/sim (binaries in build/sim/bin, never bin/)
#   make sim-test        builds it and runs the GPU test cases and the simulator's own tests
#   make fuzz            builds the fuzz targets (clang, libFuzzer, ASan, UBSan) and runs each
#                        for FUZZ_SECONDS (default 60); fuzz/README.md
#
# Objects go to build/cpu or build/cuda, so switching modes never mixes them.

# `make` alone builds `all`: sim/sim.mk, included before `all` is defined, must not make its
# `sim-test` the default.
.DEFAULT_GOAL := all

CXX      ?= g++
comma    := ,
CPU_ONLY ?= 0
SIM      ?= 0
CUDA_HOME ?= /usr/local/cuda
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
# sm_80 (A100) and sm_90 (H100/H200) machine code, plus PTX so newer GPUs can JIT it.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
# The short spelling: CUDA_ARCH=sm_90 or sm_80,sm_90 -> one -gencode per architecture.
ifneq ($(filter sm_%,$(subst $(comma), ,$(CUDA_ARCH))),)
  CUDA_GENCODE := $(foreach a,$(patsubst sm_%,%,$(subst $(comma), ,$(CUDA_ARCH))),-gencode arch=compute_$(a),code=sm_$(a))
else
  CUDA_GENCODE := $(CUDA_ARCH)
endif

ifeq ($(SIM),1)
  USE_CUDA := 0
else ifeq ($(CPU_ONLY),1)
  USE_CUDA := 0
else ifeq ($(NVCC),)
  USE_CUDA := 0
else
  USE_CUDA := 1
endif

# Host libraries (Debian packages, see `make deps`): HDF5, libjpeg-turbo, stb_image, zlib,
# libwebp (WebP decoding), libexif (a photo's EXIF orientation); libcsv (CSV lists) and
# libunistring (the display width of class names in tables) have no pkg-config file.
PKGS     := hdf5 libturbojpeg stb zlib libwebp libexif
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lcsv -lunistring
# OpenMPI's C API, for runs that mpirun starts (train/replicas/mpi.h; its C++ bindings are left
# out). The program and the tests link it; the fuzz targets do not need it.
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null) -DOMPI_SKIP_MPICXX=1
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)

# -fopenmp: the CPU kernels split their outer loops over threads (conv2d, linear, batchnorm,
# pooling; see kernels/README.md). Each thread owns whole outputs, so results are the same
# bit for bit whatever the thread count: a run's --compute-threads, by default the cores (or
# OMP_NUM_THREADS).
CXXFLAGS += -std=c++17 -O2 -g -Wall -Wextra -pthread -fopenmp -MMD -MP -I. $(PKG_CFLAGS) \
            $(MPI_CFLAGS)
# -ffp-contract=off: never fuse a*b + c into an fma (g++ does so by default in C++ on targets
# that have one). The GPU kernels that must give the CPU reference's bits rely on it
# (kernels/hd.h); on x86-64 without -march flags there is no fma to fuse into anyway.
CXXFLAGS += -ffp-contract=off
# -fno-trapping-math: floating-point operations raise no trap anyone handles (nothing here reads
# or enables FP exceptions), so a comparison may run in both arms of a select: that lets the
# compiler vectorise ReLU's and max pooling's selects. It changes no value: the arithmetic,
# its order and its rounding stay IEEE's (tests/train/engine/golden_test.cpp pins the bits).
CXXFLAGS += -fno-trapping-math
LDFLAGS  += -pthread -fopenmp
# oneDNN (Debian's libdnnl, built on OpenMP): the CPU's fast conv2d and linear (kernels/onednn.h).
# ONNX (Debian's libonnx-dev, on protobuf): `cutrain export` writes its graphs with the ONNX
# library's own classes and checks them with its checker (train/export/onnx_export.h). Its
# headers want the two definitions its CMake package gives (ONNX_ML: the onnx-ml protos).
ONNX_CFLAGS := -DONNX_NAMESPACE=onnx -DONNX_ML=1
ONNX_LIBS   := -lonnx -lonnx_proto $(shell pkg-config --libs protobuf 2>/dev/null)
LDLIBS   := $(PKG_LIBS) -ldnnl $(ONNX_LIBS) $(MPI_LIBS)

ifeq ($(USE_CUDA),1)
  MODE      := cuda
  CUDA_INC  := $(dir $(NVCC))../include
  CUDA_LIB  := $(dir $(NVCC))../lib64
  CXXFLAGS  += -DCUTRAIN_CUDA=1 -isystem $(CUDA_INC)
  NVCCFLAGS += -std=c++17 -O2 -g -lineinfo -DCUTRAIN_CUDA=1 -I. $(CUDA_GENCODE) \
               -Xcompiler -Wall,-Wextra -MMD -MP
  # cuBLAS always (part of the toolkit); cuDNN when its header is there (CUTRAIN_CUDNN).
  # Both are shared libraries: found through the rpath here, LD_LIBRARY_PATH elsewhere.
  CUDNN_H   := $(wildcard $(CUDA_INC)/cudnn.h)
  ifneq ($(CUDNN_H),)
    CXXFLAGS  += -DCUTRAIN_CUDNN=1
    NVCCFLAGS += -DCUTRAIN_CUDNN=1
    CUDNN_LIB := -lcudnn
  endif
  # NCCL between the GPUs of mpirun's processes when its header is there (CUTRAIN_NCCL). It is
  # not linked: train/replicas/mpi_gpu.cpp loads libnccl.so.2 when a run needs it, so the
  # program also runs where NCCL is not installed (on the host-staged MPI ring).
  ifneq ($(wildcard $(CUDA_INC)/nccl.h /usr/include/nccl.h),)
    CXXFLAGS  += -DCUTRAIN_NCCL=1
  endif
  # static cudart: the binaries need no libcudart at run time, only the driver
  LDLIBS    += -L$(CUDA_LIB) -Wl,-rpath,$(abspath $(CUDA_LIB)) -lcublas $(CUDNN_LIB) \
               -lcudart_static -ldl -lrt
else ifeq ($(SIM),1)
  # The simulator (sim/README.md): CUDA's headers replaced by sim/include (first on the path;
  # CUDA's own include folder is not on it, and __CUDACC__ is not defined), the runtime by
  # sim/*.cpp. The kernels' .cu files are compiled as C++ from copies that sim/rewrite.py makes
  # in build/sim/gen (launches and __shared__ rewritten), with GCC's thread-sanitizer
  # instrumentation and no runtime: each load, store and atomic calls the simulator's checks
  # (sim/hooks.cpp; ASan's hooks would miss a store after a load of the same place, which a
  # race check needs). No vectorisation there: a vector access is not the kernel's own.
  # Its build is in CI's time (.ci/run, `make sim-test`): the host code is compiled with line
  # tables only (-g1: about 40% less compile time than -g), and train/, data/ and nn/ at -O1
  # (below); the .cu files keep -O2 -g, for the kernels are the simulator's time and a reader
  # steps through them in gdb (docs/simulator.md).
  MODE      := sim
  CXXFLAGS  := -Isim/include $(patsubst -g,-g1,$(CXXFLAGS)) -DCUTRAIN_CUDA=1 -DCUTRAIN_SIM=1
  SIM_CUFLAGS = -x c++ -Isim/include -Ibuild/sim/gen $(filter-out -Isim/include,$(CXXFLAGS)) -g \
                -DCUTRAIN_SIM_CUDACC=1 -Wno-unknown-pragmas -fno-tree-vectorize -fsanitize=thread \
                --param tsan-instrument-func-entry-exit=0
  LDLIBS    += -lboost_context
else
  MODE      := cpu
  $(info cutrain: CPU-only build ($(if $(filter 1,$(CPU_ONLY)),CPU_ONLY=1,no nvcc found)): GPU code left out, GPU tests will be skipped)
endif

BUILD := build/$(MODE)
# Where the binaries go: bin/, or build/sim/bin for the simulator's (so that make test, demo and
# bundle never pick them up).
BIN := $(if $(filter sim,$(MODE)),build/sim/bin,bin)
GPU_CODE := $(filter 1,$(USE_CUDA) $(SIM))

# Sources: every .cpp of the library folders and their subfolders (train/cli/, train/run/,
# ...); .cu only in CUDA builds. train/cli/main.cpp is the program; the rest of train/ (the
# trainer, its commands) is library code, linked into the tests as well, so the training loop
# is tested like everything else.
LIB_DIRS := kernels nn data train
APP_CPP  := train/cli/main.cpp
# train/minimal/: the one-file trainer (train/minimal/README.md), a program of its own.
MINIMAL_CPP := $(wildcard train/minimal/*.cpp)
LIB_CPP  := $(filter-out $(APP_CPP) $(MINIMAL_CPP),$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cpp $(d)/*/*.cpp)))
LIB_CU   := $(if $(GPU_CODE),$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.cu $(d)/*/*.cu)))
# The tests mirror the library's folders, down to train/'s (tests/train/engine/, ...): three
# levels. *_gpu_test.cpp call the CUDA launchers: CUDA builds only (they skip without a device).
TEST_DIRS := tests tests/* tests/*/*
TEST_GPU_CPP := $(wildcard $(TEST_DIRS:%=%/*_gpu_test.cpp))
TEST_CPP := $(filter-out $(if $(GPU_CODE),,$(TEST_GPU_CPP)),$(wildcard $(TEST_DIRS:%=%/*.cpp)))
# The fuzz targets' feeds and seed corpus (fuzz/README.md), built into the tests without the
# libFuzzer entry point: tests/fuzz/ runs the kept reproducers and the seeds through them.
FUZZ_FEED_CPP := $(wildcard fuzz/*_fuzz.cpp) fuzz/feed.cpp fuzz/hdf5_guard.cpp fuzz/corpus.cpp
TEST_CPP += $(FUZZ_FEED_CPP)
TEST_CU  := $(if $(GPU_CODE),$(wildcard $(TEST_DIRS:%=%/*.cu)))
# bench/*_gpu.cpp time the CUDA kernels: CUDA builds only, like the GPU tests. The simulator's
# build makes one of them, bench_kernels_gpu, to run any kernel under it: its checks against
# the CPU reference are real, its times labelled meaningless (kernels/ladder/README.md).
BENCH_GPU_CPP := $(wildcard bench/*_gpu.cpp)
BENCH_SIM_CPP := bench/kernels_gpu.cpp
BENCH_GPU_OFF := $(if $(filter 1,$(USE_CUDA)),,$(filter-out $(if $(filter 1,$(SIM)),$(BENCH_SIM_CPP)),$(BENCH_GPU_CPP)))
BENCH_CPP := $(filter-out $(BENCH_GPU_OFF),$(wildcard bench/*.cpp))
BENCH_BIN := $(patsubst bench/%.cpp,$(BIN)/bench_%,$(BENCH_CPP))

obj = $(patsubst %,$(BUILD)/%.o,$(1))
LIB_OBJ  := $(call obj,$(LIB_CPP) $(LIB_CU))
APP_OBJ  := $(call obj,$(APP_CPP))
MINIMAL_OBJ := $(call obj,$(MINIMAL_CPP))
TEST_OBJ := $(call obj,$(TEST_CPP) $(TEST_CU))
# The simulator's runtime and its own tests, in SIM builds; `make sim-test` (sim/sim.mk).
include sim/sim.mk
# The tests' own code is built -Og (the last -O wins): the code under test is the library,
# built -O2 above; the test files only call it and compare. That is about 40% less compile
# time for them (half of a build's) at no cost in test time, and they step well in gdb.
$(call obj,$(TEST_CPP)): CXXFLAGS += -Og
# Only the files that include ONNX's headers need its definitions.
$(call obj,$(wildcard train/export/*.cpp tests/train/export/*.cpp)): CXXFLAGS += $(ONNX_CFLAGS)

# Relink when the mode changes (the objects of the other mode are older than the binary).
MODE_STAMP := $(if $(filter sim,$(MODE)),build/sim/mode,build/mode)
$(shell mkdir -p $(dir $(MODE_STAMP)); [ "$$(cat $(MODE_STAMP) 2>/dev/null)" = "$(MODE)" ] || echo $(MODE) > $(MODE_STAMP))

# The commit the GPU benchmarks report (-dirty with uncommitted changes), passed as a -D. The
# stamp file changes only when the commit does, so only the objects that print it rebuild.
GIT_COMMIT := $(or $(shell git describe --always --dirty --abbrev=12 2>/dev/null),unknown)
COMMIT_STAMP := build/commit
$(shell [ "$$(cat $(COMMIT_STAMP) 2>/dev/null)" = "$(GIT_COMMIT)" ] || \
        echo $(GIT_COMMIT) > $(COMMIT_STAMP))

.PHONY: all test slowest stress clean deps deps-debian deps-python demo bench bundle fuzz sim-test sim-slowest
all: $(BIN)/cutrain $(BIN)/cutrain_minimal $(BIN)/cutrain_tests \
     $(if $(filter sim,$(MODE)),$(BIN)/bench_kernels_gpu,$(BENCH_BIN))

# The GPU architectures the .cu objects were built for: another CUDA_ARCH rebuilds them (and
# only them) instead of linking objects of two different target sets.
ARCH_STAMP := build/cuda_arch
ifeq ($(USE_CUDA),1)
$(shell [ "$$(cat $(ARCH_STAMP) 2>/dev/null)" = "$(CUDA_GENCODE)" ] || echo "$(CUDA_GENCODE)" > $(ARCH_STAMP))
$(call obj,$(LIB_CU) $(TEST_CU)): $(ARCH_STAMP)
endif

$(BIN)/cutrain: $(APP_OBJ) $(LIB_OBJ) $(MODE_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(APP_OBJ) $(LIB_OBJ) $(LDLIBS)

# The one-file trainer: train/minimal/'s main on the same library.
$(BIN)/cutrain_minimal: $(MINIMAL_OBJ) $(LIB_OBJ) $(MODE_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(MINIMAL_OBJ) $(LIB_OBJ) $(LDLIBS)

$(BIN)/cutrain_tests: $(TEST_OBJ) $(LIB_OBJ) $(MODE_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(TEST_OBJ) $(LIB_OBJ) $(LDLIBS)

# Benchmarks: one program per bench/<name>.cpp (built with everything, run by hand).
$(BIN)/bench_%: $(BUILD)/bench/%.cpp.o $(LIB_OBJ) $(MODE_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(LIB_OBJ) $(LDLIBS)

bench: $(BENCH_BIN)
# Reached only through the pattern above, the bench objects would count as intermediate files
# on a first build, be deleted after linking and be rebuilt by the next make: keep them
# (.SECONDARY with the files named; a .PRECIOUS pattern keeps them only when make is interrupted).
.SECONDARY: $(call obj,$(BENCH_CPP))
# The GPU benchmarks print the commit ($(GIT_COMMIT), above).
BENCH_GPU_OBJ := $(call obj,$(filter $(BENCH_GPU_CPP),$(BENCH_CPP)))
$(BENCH_GPU_OBJ): $(COMMIT_STAMP)
$(BENCH_GPU_OBJ): CXXFLAGS += -DCUTRAIN_COMMIT='"$(GIT_COMMIT)"'

$(BUILD)/%.cpp.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

ifeq ($(MODE),sim)
$(BUILD)/%.cu.o: build/sim/gen/%.cu
	@mkdir -p $(@D)
	$(CXX) $(SIM_CUFLAGS) -c $< -o $@
else
$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
endif

# A self-contained folder for a GPU host without the Debian packages (bench/README.md): the
# binaries (debug info stripped), the shared libraries they need that such a host lacks, the
# Fashion-MNIST files and run.sh, which runs the tests, the sanitizers and the benchmark.
ifeq ($(USE_CUDA),1)
bundle: all
	CUDA_ARCH="$(CUDA_GENCODE)" bench/bundle/make.sh bundle bin/cutrain bin/cutrain_tests $(BENCH_BIN)
else
bundle:
	@echo "make bundle: needs the CUDA build (nvcc not found, or CPU_ONLY=1)"; exit 1
endif

# Idle OpenMP threads spin by default; on a machine whose cores are shared that can make the
# threaded CPU kernels slower than one thread. Passive waiting costs nothing here.
test: all
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ./$(BIN)/cutrain_tests $(TEST_ARGS)

# The 20 slowest test cases of this build's suite (`make CPU_ONLY=1 slowest` for the CPU-only
# build's; `make sim-slowest` for sim-test's), from doctest's durations of a run made now.
slowest: all
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} ./$(BIN)/cutrain_tests --duration=true \
	  $(TEST_ARGS) > build/slowest.log 2>&1; tail -n 1 build/slowest.log; \
	  echo "the 20 slowest test cases (seconds):"; grep -a '^[0-9.]* s: ' build/slowest.log | sort -rn | head -n 20

# The suites again and again, alone, beside a CPU hog and two at once, listing every case that
# failed in any round (tests/stress.sh): make stress ROUNDS=5 SUITES="test cpu sim".
stress:
	ROUNDS="$(ROUNDS)" SUITES="$(SUITES)" MODES="$(MODES)" tests/stress.sh

# clang and libclang-rt-dev (its sanitizer and libFuzzer runtimes, which clang only
# recommends) are for `make fuzz`; libboost-context-dev (its fibers) for `make sim-test`.
DEBIAN_PACKAGES := libturbojpeg0-dev libstb-dev libhdf5-dev zlib1g-dev doctest-dev \
                   libcli11-dev nlohmann-json3-dev dataset-fashion-mnist pkg-config \
                   libwebp-dev libexif-dev libcsv-dev libunistring-dev \
                   libopenmpi-dev openmpi-bin libdnnl-dev libonnx-dev libprotobuf-dev \
                   chromium clang libclang-rt-dev libboost-context-dev
# Installs only what is missing; apt-get update first, sudo when not root.
deps: deps-debian deps-python
deps-debian:
	@missing=""; \
	for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all $(words $(DEBIAN_PACKAGES)) packages present"; exit 0; fi; \
	sudo=""; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	echo "deps: installing$$missing"; \
	$$sudo apt-get update -q && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing

# The tests' Python clients, from PyPI into the project's own virtual environment .venv/:
# onnxruntime and onnx run `cutrain export`'s graphs (tests/train/export/), tensorboard reads
# `cutrain train`'s event files (tests/train/run/), at the versions of tests/requirements.txt.
# Installed again when that file changes (.venv keeps a copy).
# When PyPI cannot be reached this says so and goes on; those tests then skip, saying why
# (.venv/pip.log).
VENV := .venv
PY_REQUIREMENTS := tests/requirements.txt
deps-python:
	@if cmp -s $(PY_REQUIREMENTS) $(VENV)/requirements.txt; then \
	  echo "deps: $(VENV) has $(PY_REQUIREMENTS)"; exit 0; fi; \
	if ! [ -x $(VENV)/bin/python ] && ! python3 -m venv $(VENV); then \
	  echo "deps: python3 -m venv failed: the ONNX runtime and TensorBoard tests will be skipped"; exit 0; fi; \
	echo "deps: installing $(PY_REQUIREMENTS) into $(VENV) (PyPI)"; \
	if $(VENV)/bin/pip install -q --disable-pip-version-check -r $(PY_REQUIREMENTS) > $(VENV)/pip.log 2>&1; \
	then cp $(PY_REQUIREMENTS) $(VENV)/requirements.txt; echo "deps: $(VENV) ready"; \
	else echo "deps: could not install $(PY_REQUIREMENTS) from PyPI ($(VENV)/pip.log says why): the ONNX runtime and TensorBoard tests will be skipped"; \
	  tail -3 $(VENV)/pip.log; fi

# The main job on the embedded default: deps, build, Fashion-MNIST import, training, a summary.
# GPU when usable, else a CPU subset (train/cli/demo.sh says which and why).
demo:
	@train/cli/demo.sh

# ---- fuzzing (fuzz/README.md) ----------------------------------------------------------------
# One libFuzzer target per parser of outside input, built by clang with AddressSanitizer and
# UndefinedBehaviorSanitizer in build/fuzz (CPU-only, whatever the main build), each run for
# FUZZ_SECONDS by fuzz/run.sh; a finding fails make, naming the reproducer and the command
# that replays it. `make -j2 fuzz` runs two targets at a time.
#   make fuzz FUZZ_SECONDS=30 FUZZ_TARGETS="pack checkpoint"
FUZZ_CXX      ?= clang++
FUZZ_SECONDS  ?= 60
FUZZ_TARGETS  ?= image_list csv_list image_decode pack checkpoint checkpoint_config model_spec idx
FUZZ_BUILD    := build/fuzz
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined
# -Wno-*: what clang says only because OpenMP is off here (a variable read by a pragma alone)
# or the CUDA code is (fields of the GPU classes); the main build's -Wall sees the same code.
FUZZ_CXXFLAGS := -std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -pthread -MMD -MP \
                 -Wno-source-uses-openmp -Wno-unused-variable -Wno-unused-private-field \
                 -I. $(PKG_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -DCUTRAIN_FUZZ_ENTRY=1
# The library objects the targets and the corpus writer use (no OpenMP: one thread is what a
# fuzzer wants). They go into an archive, so each target links only those it needs.
FUZZ_LIB_CPP  := $(addprefix data/,atomic_file.cpp image_list.cpp image_decode.cpp \
                   image_decode_webp.cpp image_decode_pnm.cpp \
                   image_format.cpp image_transform.cpp image_encode.cpp hdf5_handle.cpp \
                   hdf5_io.cpp pack_read.cpp pack_write.cpp idx.cpp sampler.cpp trace.cpp) \
                 $(addprefix nn/,tensor.cpp context.cpp \
                   autograd.cpp layers.cpp model.cpp model_spec.cpp ops_basic.cpp ops_conv.cpp \
                   ops_norm.cpp ops_pool.cpp) \
                 $(addprefix kernels/,cast.cpp gpu.cpp batchnorm.cpp conv2d.cpp elementwise.cpp \
                   linear.cpp matmul_cpu.cpp onednn.cpp impl.cpp launch_plan.cpp parallel.cpp pool.cpp \
                   printable.cpp xxhash64.cpp) \
                 train/checkpoint/checkpoint.cpp train/setup/config.cpp
# The readers behind image_list.cpp: the labels of any list (list_rows), CSV lists (libcsv), and
# the terminal widths of names (text_width; the names themselves are made printable by
# kernels/printable.cpp, above).
FUZZ_LIB_CPP  += data/list_rows.cpp data/csv_list.cpp data/text_width.cpp
FUZZ_LIB      := $(FUZZ_BUILD)/libcutrain_fuzz.a
FUZZ_BINS     := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/bin/%_fuzz)
FUZZ_CORPUS_CPP := fuzz/make_corpus.cpp fuzz/corpus.cpp tests/data/test_images.cpp
fuzz_obj = $(patsubst %,$(FUZZ_BUILD)/%.o,$(1))
# Other compiler flags rebuild the fuzz objects (recorded only when a fuzz goal is asked for).
FUZZ_STAMP    := $(FUZZ_BUILD)/flags
ifneq ($(filter fuzz fuzz-run-% $(FUZZ_BUILD)/%,$(MAKECMDGOALS)),)
$(shell mkdir -p $(FUZZ_BUILD); [ "$$(cat $(FUZZ_STAMP) 2>/dev/null)" = "$(FUZZ_CXX) $(FUZZ_CXXFLAGS)" ] || \
        echo "$(FUZZ_CXX) $(FUZZ_CXXFLAGS)" > $(FUZZ_STAMP))
endif

# Every target runs even when one has a finding; make fails at the end, naming them.
fuzz: $(FUZZ_TARGETS:%=fuzz-run-%)
	@failed="$$(cd $(FUZZ_BUILD)/failed 2>/dev/null && ls $(FUZZ_TARGETS) 2>/dev/null | tr '\n' ' ')"; \
	if [ -n "$$failed" ]; then echo "make fuzz: FINDINGS in $$failed(see above)"; exit 1; fi; \
	echo "make fuzz: $(words $(FUZZ_TARGETS)) targets, $(FUZZ_SECONDS) s each: no finding"

fuzz-run-%: $(FUZZ_BUILD)/bin/%_fuzz $(FUZZ_BUILD)/corpus/.stamp
	@mkdir -p $(FUZZ_BUILD)/failed && rm -f $(FUZZ_BUILD)/failed/$*
	@fuzz/run.sh $* $(FUZZ_SECONDS) || touch $(FUZZ_BUILD)/failed/$*

$(FUZZ_BUILD)/%.cpp.o: %.cpp $(FUZZ_STAMP)
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -c $< -o $@

$(FUZZ_LIB): $(call fuzz_obj,$(FUZZ_LIB_CPP))
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/bin/%_fuzz: $(FUZZ_BUILD)/fuzz/%_fuzz.cpp.o $(call fuzz_obj,fuzz/feed.cpp fuzz/hdf5_guard.cpp) \
                         $(FUZZ_LIB)
	@mkdir -p $(@D)
	$(FUZZ_CXX) -fsanitize=fuzzer $(FUZZ_SAN) -pthread -o $@ $^ $(PKG_LIBS) -ldnnl

$(FUZZ_BUILD)/bin/make_corpus: $(call fuzz_obj,$(FUZZ_CORPUS_CPP)) $(FUZZ_LIB)
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_SAN) -pthread -o $@ $^ $(PKG_LIBS) -ldnnl

# The seeds, written afresh whenever the writer changes.
$(FUZZ_BUILD)/corpus/.stamp: $(FUZZ_BUILD)/bin/make_corpus
	rm -rf $(@D)
	$< $(@D)
	@touch $@

.SECONDARY: $(FUZZ_BINS) $(call fuzz_obj,$(FUZZ_FEED_CPP) $(FUZZ_CORPUS_CPP) $(FUZZ_LIB_CPP))

clean:
	rm -rf build bin bundle

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d) $(MINIMAL_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(patsubst %,$(BUILD)/%.d,$(BENCH_CPP))
-include $(wildcard $(FUZZ_BUILD)/*/*.d $(FUZZ_BUILD)/*/*/*.d)
