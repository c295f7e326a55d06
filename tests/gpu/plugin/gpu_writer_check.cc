// GPU check of the plugin's GPU writer (plugin/gpu_writer.h) on a real GPU, no NCCL: its
// kernel's copies, fills and releases land exactly (against a host model of the bytes), then
// its copy throughput for NCCL-like steps beside the copy engines' (cudaMemcpyAsync device to
// device, one call a step). Run by tests/gpu/plugin/run_writer.sh, once per
// CRYSTAL_GPU_WRITER_BLOCKS / CRYSTAL_GPU_COPY_CHUNK setting (the writer reads them when it is
// made). Exit 1 on any wrong byte or a command that does not finish within 5 s.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_writer.h"

namespace {

using crystal::plugin::GpuWriter;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kBuffer = std::size_t{512} << 20;

#define CUDA_OK(call)                                                                          \
  do {                                                                                         \
    if (const cudaError_t e = (call); e != cudaSuccess) {                                      \
      fmt::print(stderr, "{}:{}: {}: {}\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

// Waits until the writer ran command `n`; false after 5 s.
bool waitDone(const GpuWriter& w, std::uint64_t n) {
  const auto end = Clock::now() + std::chrono::seconds(5);
  while (w.done() < n)
    if (Clock::now() > end) return false;
  return true;
}

// Posts a copy, waiting for room in the ring; the command's number.
std::uint64_t postCopy(GpuWriter& w, char* dst, const char* src, std::size_t bytes) {
  for (;;) {
    if (const std::uint64_t n = w.postCopy(dst, src, bytes)) return n;
    std::this_thread::yield();  // ring full: the kernel frees a slot within microseconds
  }
}

struct Copy {
  std::size_t dst, src, bytes;
};

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    fmt::print("FAIL {}\n", what);
  }
}

// Every copy of `copies` (src to dst), posted back to back (the kernel sees them in batches of
// up to 32), against the same copies done on the host. The kernel runs a batch's copies in
// any order: the destinations of one call must not overlap.
void checkCopies(GpuWriter& w, char* dev_src, char* dev_dst, std::vector<char>& host_src,
                 const std::vector<Copy>& copies, const std::string& name) {
  std::vector<char> expected(kBuffer);
  CUDA_OK(cudaMemcpy(expected.data(), dev_dst, kBuffer, cudaMemcpyDeviceToHost));
  std::uint64_t last = 0;
  for (const Copy& c : copies) {
    last = postCopy(w, dev_dst + c.dst, dev_src + c.src, c.bytes);
    std::memcpy(expected.data() + c.dst, host_src.data() + c.src, c.bytes);
  }
  expect(waitDone(w, last), name + ": done within 5 s");
  std::vector<char> got(kBuffer);
  CUDA_OK(cudaMemcpy(got.data(), dev_dst, kBuffer, cudaMemcpyDeviceToHost));
  std::size_t wrong = 0, first = kBuffer;
  for (std::size_t i = 0; i < kBuffer; ++i)
    if (got[i] != expected[i]) ++wrong, first = std::min(first, i);
  expect(wrong == 0, fmt::format("{}: {} wrong bytes, the first at {}", name, wrong, first));
  fmt::print("check {}: {} copies, {} wrong bytes\n", name, copies.size(), wrong);
}

// GB/s of `total` bytes in steps of `step`, copied from src to dst (steps laid out as a
// ring's: consecutive, wrapping in the buffer), median of 5.
double writerRate(GpuWriter& w, char* src, char* dst, std::size_t step, std::size_t total) {
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    std::uint64_t last = 0;
    for (std::size_t off = 0; off < total; off += step) {
      const std::size_t at = off % (kBuffer - step);
      last = postCopy(w, dst + at, src + at, step);
    }
    if (!waitDone(w, last)) return 0;
    rates.push_back(static_cast<double>(total) /
                    std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

double engineRate(cudaStream_t s, char* src, char* dst, std::size_t step, std::size_t total) {
  std::vector<double> rates;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (std::size_t off = 0; off < total; off += step) {
      const std::size_t at = off % (kBuffer - step);
      CUDA_OK(cudaMemcpyAsync(dst + at, src + at, step, cudaMemcpyDeviceToDevice, s));
    }
    CUDA_OK(cudaStreamSynchronize(s));
    rates.push_back(static_cast<double>(total) /
                    std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[2];
}

}  // namespace

int main() {
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(nullptr));  // the primary context, current on this thread
  std::string why;
  std::shared_ptr<GpuWriter> w = GpuWriter::forCurrentContext(&why);
  if (!w) {
    fmt::print("FAIL no GPU writer: {}\n", why);
    return 1;
  }
  const char* blocks = std::getenv("CRYSTAL_GPU_WRITER_BLOCKS");
  const char* chunk = std::getenv("CRYSTAL_GPU_COPY_CHUNK");
  fmt::print("writer: CRYSTAL_GPU_WRITER_BLOCKS={} CRYSTAL_GPU_COPY_CHUNK={}\n",
             blocks ? blocks : "(default)", chunk ? chunk : "(default)");

  char *src = nullptr, *dst = nullptr;
  CUDA_OK(cudaMalloc(&src, kBuffer));
  CUDA_OK(cudaMalloc(&dst, kBuffer));
  std::vector<char> host(kBuffer);
  std::mt19937_64 rng(42);
  for (std::size_t i = 0; i < kBuffer; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(host.data() + i, &v, 8);
  }
  CUDA_OK(cudaMemcpy(src, host.data(), kBuffer, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dst, 0, kBuffer));

  // Exactness: sizes around the chunk and the 16-byte path, odd offsets (the byte path),
  // one large copy (many chunks), a burst of NCCL-like steps (batches of 32), and a batch too
  // large for 65535 chunks of the configured size (the kernel's larger chunks).
  checkCopies(*w, src, dst, host,
              {{0, 0, 1},
               {64, 3, 15},
               {128, 128, 16},
               {4096, 8192, 4096 + 3},
               {1 << 20, 5 << 20, 65536},
               {2 << 20, 7 << 20, 65536 + 16},
               {3 << 20, 9 << 20, 65536 * 3 + 7},
               {(4 << 20) + 5, (11 << 20) + 1, 200000}},
              "sizes and offsets");
  {
    std::vector<Copy> burst;
    for (std::size_t i = 0; i < 256; ++i)
      burst.push_back({(16u << 20) + i * 131072, (64u << 20) + ((i * 7) % 256) * 131072, 131072});
    checkCopies(*w, src, dst, host, burst, "256 steps of 128 KiB, back to back");
  }
  checkCopies(*w, src, dst, host, {{100 << 20, 200 << 20, 256u << 20}}, "one copy of 256 MiB");
  {
    std::vector<Copy> huge;
    for (std::size_t i = 0; i < 16; ++i)
      huge.push_back({i * (20u << 20), (300u << 20) + i * 4096, 20u << 20});
    checkCopies(*w, src, dst, host, huge,
                "16 copies of 20 MiB back to back (larger chunks with a 4 KiB chunk)");
  }

  // Fills: a value at a pitch, between copies (in the same batch, so elsewhere: a batch's
  // stores are not ordered against each other).
  {
    const std::uint64_t a = postCopy(*w, dst, src, 1 << 20);
    expect(w->post(dst + (1 << 20) + 4, 128, 0xC0FFEE01u, 1000), "fill posted");
    const std::uint64_t b = postCopy(*w, dst + (2 << 20), src + (2 << 20), 1 << 20);
    expect(b == a + 2 && waitDone(*w, b), "fill: done within 5 s");
    std::vector<std::uint32_t> got(1000 * 32);
    CUDA_OK(cudaMemcpy(got.data(), dst + (1 << 20), got.size() * 4, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < 1000; ++i)
      wrong += got[static_cast<std::size_t>(i) * 32 + 1] != 0xC0FFEE01u;
    expect(wrong == 0, fmt::format("fill: {} of 1000 words wrong", wrong));
    fmt::print("check fill: 1000 words, {} wrong\n", wrong);
  }

  // A release: its value is seen by the host only once the copy before it landed.
  {
    std::uint64_t* word = nullptr;
    CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&word), 8, cudaHostAllocMapped));
    *word = 0;
    void* word_dev = nullptr;
    CUDA_OK(cudaHostGetDevicePointer(&word_dev, word, 0));
    CUDA_OK(cudaMemset(dst, 0, 8 << 20));
    bool released = false;
    (void)w->postCopy(dst, src + (8 << 20), 8 << 20,
                      reinterpret_cast<crystal::plugin::cuda::DevicePtr>(word_dev), 77, &released);
    expect(released, "release posted");
    const auto end = Clock::now() + std::chrono::seconds(5);
    while (std::atomic_ref(*word).load() != 77 && Clock::now() < end) {
    }
    expect(std::atomic_ref(*word).load() == 77, "release: value seen within 5 s");
    std::vector<char> got(8 << 20);
    CUDA_OK(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost));
    const bool same = std::memcmp(got.data(), host.data() + (8 << 20), got.size()) == 0;
    expect(same, "release: the copy's bytes are there");
    fmt::print("check release: value {} , bytes {}\n", *word, same ? "right" : "WRONG");
    CUDA_OK(cudaFreeHost(word));
  }

  // Throughput, 256 MiB in NCCL-like steps.
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (const std::size_t step : {std::size_t{32} << 10, std::size_t{64} << 10,
                                 std::size_t{512} << 10, std::size_t{1} << 20}) {
    const std::size_t total = std::size_t{256} << 20;
    const double wr = writerRate(*w, src, dst, step, total);
    const double ce = engineRate(s, src, dst, step, total);
    expect(wr > 0, fmt::format("rate step {}: done within 5 s", step));
    fmt::print(
        "rate step {:>7} B: writer {:7.1f} GB/s, copy engines (a call a step) {:7.1f} GB/s\n", step,
        wr, ce);
  }
  CUDA_OK(cudaStreamDestroy(s));
  const GpuWriter::Counts c = w->counts();
  fmt::print("writer counts: {} posted, {} copies, {} launches, {} ring full\n", c.posted, c.copies,
             c.launches, c.ring_full);
  w.reset();
  CUDA_OK(cudaFree(src));
  CUDA_OK(cudaFree(dst));
  fmt::print("{}\n", failures == 0 ? "PASS" : fmt::format("FAIL {} checks", failures));
  return failures == 0 ? 0 : 1;
}
