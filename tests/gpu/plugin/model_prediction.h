// The target model's prediction for the GPU check, behind a plain interface so that the
// CUDA translation unit (nvcc) never parses crystal's C++20 headers.
#pragma once

#include <cstddef>
#include <string>

// op: 0 all-reduce, 1 all-gather, 2 reduce-scatter, 3 send/recv; two ranks on two nodes.
// Returns microseconds and sets `choice` to "algo/proto/channels" (or "p2p").
double modelTimeUs(int op, std::size_t bytes, std::string& choice);
