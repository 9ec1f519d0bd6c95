// Constants of the softmax arithmetic shared by the CPU backends and the CUDA kernels.
#pragma once

namespace flashattn {

constexpr float kLog2e = 1.4426950408889634f;  // softmax in base 2: exp(x) = exp2(x * log2(e))
constexpr float kLn2 = 0.6931471805599453f;    // log(x) = log2(x) * ln(2)

}  // namespace flashattn
