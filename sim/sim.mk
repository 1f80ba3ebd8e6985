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

# The GPU test cases: the files that hold a REQUIRE_GPU (the CPU cases beside them run too),
# and the simulator's own tests, as one doctest source-file filter.
SIM_GPU_TEST_FILES := $(shell grep -l 'REQUIRE_GPU()' $(TEST_CPP) 2>/dev/null)
SIM_TEST_FILTER := $(subst $(eval) ,$(comma),$(patsubst %,*%,$(SIM_GPU_TEST_FILES)) *sim/tests/*)

# Two simulated devices unless CUTRAIN_SIM_DEVICES says otherwise (the replica tests want two).
sim-test:
	$(MAKE) SIM=1 all
	CUTRAIN_SIM_DEVICES=$${CUTRAIN_SIM_DEVICES:-2} OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-passive} \
	  ./build/sim/bin/cutrain_tests -sf='$(SIM_TEST_FILTER)' $(TEST_ARGS)
