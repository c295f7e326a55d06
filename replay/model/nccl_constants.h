// Numbers NCCL 2.28.9 uses in its tuning model and chunking, collected in one place.
// Values are facts read from NCCL's source (file:symbol given per block); the code that
// uses them is ours.
#pragma once

#include <array>
#include <cstdint>

namespace crystal::model::nccl {

inline constexpr int kAlgos = 7;         // NCCL_NUM_ALGORITHMS
inline constexpr int kProtos = 3;        // NCCL_NUM_PROTOCOLS
inline constexpr int kFuncs = 5;         // NCCL_NUM_FUNCTIONS (Broadcast..AllReduce)
inline constexpr int kMaxChannels = 64;  // MAXCHANNELS (include/device.h)

enum HwIndex { kNvlink = 0, kPci = 1, kNet = 2 };  // NCCL_HW_*

// graph/tuning.cc: ncclTunerConstantsDefaults.baseLatencies [algo][proto], us.
inline constexpr double kBaseLat[kAlgos][kProtos] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0},
                                                     {0, 0, 0},        {0, 0, 0},        {0, 0, 0},
                                                     {8.0, 8.0, 8.0}};
// graph/tuning.cc: ncclTunerConstantsDefaults.hwLatencies [hw][algo][proto], us.
inline constexpr double kHwLat[3][kAlgos][kProtos] = {
    {{.6, 1.25, 4.0},
     {.6, 1.9, 3.4},
     {0, 0, 3.7},
     {0, 0, 2.8},
     {0, 0, 25},
     {0, 0, 25},
     {0, 0, 4.0}},
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}},
    {{5.0, 8.5, 14},
     {2.7, 4.0, 14.0},
     {0, 0, 31},
     {0, 0, 30},
     {0, 0, 18},
     {0, 0, 20.9},
     {0, 0, 14}}};
// graph/tuning.cc: llMaxBws [Volta/Ampere/Hopper/Blackwell (1 node) | Intel | AMD][N1,N2,N4].
// Row index for >1 node is the CPU vendor (0 = Intel, 1 = AMD); we assume Intel x86.
inline constexpr double kLlMaxBw[4][3] = {
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
inline constexpr double kPerChMaxRingLL128Bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {73.4, 34.6, 73.4}};
inline constexpr double kPerChMaxTreeLL128Bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
inline constexpr double kPerChMaxTreeBw[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};

// graph/tuning.cc: treeCorrectionFactor [proto][log2(bytes/64)], 64 B .. 256 MiB.
inline constexpr double kTreeCorrection[kProtos][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

// graph/search.cc: sm90SpeedArrayIntra / sm90SpeedArrayInter (GB/s per channel), and the
// pre-Hopper arrays speedArrayIntra / speedArrayInter.
inline constexpr std::array<double, 11> kSm90SpeedIntra = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0,
                                                           15.0, 12.0, 11.0, 6.0,  3.0};
inline constexpr std::array<double, 17> kSm90SpeedInter = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0,
                                                           22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                                                           3.0,  2.4,  1.2,  0.24, 0.12};
inline constexpr std::array<double, 13> kSpeedIntra = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0,
                                                       9.0,  7.0,  6.0,  5.0,  4.0,  3.0};
inline constexpr std::array<double, 19> kSpeedInter = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0,
                                                       12.0, 10.0, 9.0,  7.0,  6.0,  5.0,  4.0,
                                                       3.0,  2.4,  1.2,  0.24, 0.12};
inline constexpr double kPciBw = 12.0;  // graph/topo.h PCI_BW (Gen3 x16), simple-thread rule

// include/device.h and include/comm.h: threads, steps, buffers.
inline constexpr int kSteps = 8;  // NCCL_STEPS
inline constexpr int kWarp = 32;
inline constexpr int kMaxThreads = 640;            // NCCL_MAX_NTHREADS
inline constexpr int kSimpleMaxThreads = 512;      // NCCL_SIMPLE_MAX_NTHREADS
inline constexpr int kLlMaxThreads = 512;          // NCCL_LL_MAX_NTHREADS
inline constexpr int kLl128MaxThreads = 640;       // NCCL_LL128_MAX_NTHREADS
inline constexpr int kLlThreadThreshold = 8;       // NCCL_LL_THREAD_THRESHOLD
inline constexpr int kLl128ThreadThreshold = 8;    // NCCL_LL128_THREAD_THRESHOLD
inline constexpr int kSimpleThreadThreshold = 64;  // NCCL_SIMPLE_THREAD_THRESHOLD
// init.cc: DEFAULT_LL_BUFFSIZE = 8 lines/thread * 512 threads * 8 steps * 16 B,
// DEFAULT_LL128_BUFFSIZE = 120 elems * 640 threads * 8 steps * 8 B, DEFAULT_BUFFSIZE 4 MiB.
inline constexpr std::int64_t kBuffSize[kProtos] = {8LL * 512 * 8 * 16, 120LL * 640 * 8 * 8,
                                                    1LL << 22};
// include/collectives.h: ring Simple chunk = 4 steps, slice = 2 steps (ALLREDUCE_*STEPS).
inline constexpr int kRingChunkSteps = kSteps / 2;
inline constexpr int kRingSliceSteps = kSteps / 4;
// init.cc: NCCL_P2P_NET_CHUNKSIZE 128 KiB, NCCL_P2P_NVL_CHUNKSIZE 512 KiB.
inline constexpr std::int64_t kP2pNetChunk = 1 << 17;
inline constexpr std::int64_t kP2pNvlChunk = 1 << 19;
// graph/tuning.cc:getNetOverhead: x86 Intel 1 us per inter-node ring step (x3 for Simple).
inline constexpr double kNetOverheadUs = 1.0;

}  // namespace crystal::model::nccl
