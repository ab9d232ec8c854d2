// Host stand-in for <cuda_fp16.h> (emulator only), on the compiler's _Float16.
#pragma once
struct __half { _Float16 v; };
inline float __half2float(__half h) { return (float)h.v; }
inline __half __float2half_rn(float f) { return {(_Float16)f}; }
