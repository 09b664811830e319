// IEEE half and bfloat16 <-> float on the host, bit-exact with CUDA's
// __half2float/__float2half_rn and __bfloat162float/__float2bfloat16_rn
// (round to nearest even; NaN stays NaN). Used by the CPU reductions and the tests.
#pragma once
#include <cstdint>
#include <cstring>

namespace gpustripe::coll {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

inline float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t float_to_half(float f) {
  uint32_t b = float_to_bits(f);
  uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;       // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;      // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                            // below the smallest normal half (2^-14)
    // subnormal: round abs/2^-24 to nearest even integer
    float v = bits_to_float(abs) * 16777216.0f;
    float r = v;
    uint32_t i = static_cast<uint32_t>(r);
    float frac = r - static_cast<float>(i);
    if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
    return sign | static_cast<uint16_t>(i);
  }
  uint32_t e = (abs >> 23) - 112, m = abs & 0x7fffffu;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into the exponent correctly
  return sign | static_cast<uint16_t>(h);
}

}  // namespace gpustripe::coll
