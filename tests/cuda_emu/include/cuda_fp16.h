#pragma once
// Emulator stand-in for cuda_fp16.h (tests/cuda_emu/README.md): IEEE binary16 through GCC's
// _Float16, conversions rounding to nearest even like the device's.
#include <cstring>

struct __half {
  unsigned short __x;
};

inline __half __float2half_rn(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  __half r;
  std::memcpy(&r.__x, &h, 2);
  return r;
}
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __half2float(__half h) {
  _Float16 v;
  std::memcpy(&v, &h.__x, 2);
  return static_cast<float>(v);
}
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
