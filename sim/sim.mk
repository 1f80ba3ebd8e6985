# The simulator's part of the build (sim/README.md), included by the Makefile after its lists
# of objects. `make SIM=1` adds the runtime (sim/*.cpp) to the library and the simulator's own
# tests (sim/tests/) to the test binary; `make sim-test` builds that and runs the GPU test cases.

# The files sim/rewrite.py copies into build/sim/gen: every .cu, and the headers they include.
SIM_GEN       := build/sim/gen
SIM_GEN_HEADERS := $(wildcard kernels/*.h kernels/*.cuh kernels/*/*.h kernels/*/*.cuh \
                              sim/tests/*.h sim/tests/*.cuh)
SIM_GEN_STAMP := $(SIM_GEN)/.headers

ifeq ($(MODE),sim)
SIM_CPP      := $(wildcard sim/*.cpp)
SIM_TEST_SRC := $(wildcard sim/tests/*.cu sim/tests/*.cpp)
LIB_OBJ      += $(call obj,$(SIM_CPP))
TEST_OBJ     += $(call obj,$(SIM_TEST_SRC))
$(call obj,$(filter %.cpp,$(SIM_TEST_SRC))): CXXFLAGS += -Og
# The host's side of the trainer at -O1 (the Makefile's SIM section says why); kernels/ keeps -O2
# (the CPU references the GPU tests compare with).
$(call obj,$(filter train/% data/% nn/%,$(LIB_CPP) $(APP_CPP))): CXXFLAGS += -O1

# A header's copy is rewritten when any header changes (only changed copies are written).
$(SIM_GEN_STAMP): $(SIM_GEN_HEADERS) sim/rewrite.py
	@mkdir -p $(@D)
	python3 sim/rewrite.py $(SIM_GEN) $(SIM_GEN_HEADERS)
	@touch $@
$(SIM_GEN)/%.cu: %.cu sim/rewrite.py
	python3 sim/rewrite.py $(SIM_GEN) $<
$(call obj,$(LIB_CU) $(filter %.cu,$(SIM_TEST_SRC))): $(SIM_GEN_STAMP)
.SECONDARY: $(patsubst %,$(SIM_GEN)/%,$(LIB_CU) $(filter %.cu,$(SIM_TEST_SRC)))
endif

# The GPU test cases: the files that hold a REQUIRE_GPU, and the simulator's own tests. `make
# sim-test` builds them alone, with the test runner and its helpers, into
# build/sim/bin/cutrain_gpu_tests (the whole cutrain_tests of `make SIM=1` would compile a
# hundred CPU test files more, which `make test` runs anyway), and the program they run
# (build/sim/bin/cutrain). It runs the GPU cases (every case behind a REQUIRE_GPU has "[gpu]"
# in its name: tests/gpu_names_test.cpp checks) and the simulator's: the CPU cases beside them
# are `make test`'s.
SIM_GPU_TEST_FILES := $(shell grep -l 'REQUIRE_GPU()' $(TEST_CPP) 2>/dev/null)
SIM_TEST_HELPERS := tests/main.cpp tests/runner.cpp tests/test_util.cpp tests/data/test_images.cpp
ifeq ($(MODE),sim)
SIM_GPU_TEST_OBJ := $(call obj,$(SIM_TEST_HELPERS) $(SIM_GPU_TEST_FILES) $(SIM_TEST_SRC))
$(BIN)/cutrain_gpu_tests: $(SIM_GPU_TEST_OBJ) $(LIB_OBJ) $(MODE_STAMP)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $(SIM_GPU_TEST_OBJ) $(LIB_OBJ) $(LDLIBS)
endif

# Two simulated devices unless CUTRAIN_SIM_DEVICES says otherwise (the replica tests want two).
# SEEDS=N (or CUTRAIN_SIM_SEEDS=N) runs the GPU cases once more under each of the seeds 2 to N
# (CUTRAIN_SIM_SEED: other orders of blocks and threads), as a kernel author should before
# committing a kernel change; CI runs seed 1 alone, the same orders at every run.
SEEDS ?= $(or $(CUTRAIN_SIM_SEEDS),1)
sim-test:
	$(MAKE) SIM=1 build/sim/bin/cutrain build/sim/bin/cutrain_gpu_tests
	CUTRAIN_SIM_DEVICES=$${CUTRAIN_SIM_DEVICES:-2} OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} \
	  ./build/sim/bin/cutrain_gpu_tests -tc='*[gpu]*,sim: *,sim teeth: *' $(TEST_ARGS)
	@for seed in $$(seq 2 $(SEEDS)); do \
	  echo "== CUTRAIN_SIM_SEED=$$seed: the GPU cases under another order"; \
	  CUTRAIN_SIM_SEED=$$seed CUTRAIN_SIM_DEVICES=$${CUTRAIN_SIM_DEVICES:-2} \
	    OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} \
	    ./build/sim/bin/cutrain_gpu_tests -tc='*[gpu]*' $(TEST_ARGS) || \
	    { echo "== failed under CUTRAIN_SIM_SEED=$$seed"; exit 1; }; \
	done

# sim-test's 20 slowest test cases (the Makefile's `slowest`, on simulated GPUs).
sim-slowest:
	$(MAKE) SIM=1 build/sim/bin/cutrain build/sim/bin/cutrain_gpu_tests
	CUTRAIN_SIM_DEVICES=$${CUTRAIN_SIM_DEVICES:-2} OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} \
	  ./build/sim/bin/cutrain_gpu_tests -tc='*[gpu]*,sim: *,sim teeth: *' --duration=true \
	  $(TEST_ARGS) > build/sim/slowest.log 2>&1; tail -n 1 build/sim/slowest.log; \
	  echo "the 20 slowest test cases (seconds):"; grep -a '^[0-9.]* s: ' build/sim/slowest.log | sort -rn | head -n 20
