#pragma once
// Emulator stand-in for cuda_bf16.h (tests/cuda_emu/README.md): the storage type only.
struct __nv_bfloat16 {
  unsigned short __x;
};
