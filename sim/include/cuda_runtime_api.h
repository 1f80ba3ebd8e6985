// The simulator's <cuda_runtime_api.h>: the same declarations as its <cuda_runtime.h>.
#pragma once
#include "cuda_runtime.h"
