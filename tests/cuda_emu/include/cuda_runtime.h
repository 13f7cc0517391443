#pragma once
// Emulator stand-in (tests/cuda_emu/README.md).
#include "cuda_runtime_api.h"
