// Writes the Kineto trace of one rank of a config's generated graph, as the PyTorch profiler
// would record it (tests/record/kineto_writer.h). Made the traces under tests/record/data/:
//   make_kineto_trace config/examples/dense-8gpu.yaml 0
//   tests/record/data/dense-8gpu.rank0.kineto.json
#include <cstdio>
#include <fstream>
#include <string>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "tests/record/kineto_writer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: make_kineto_trace CONFIG RANK OUT\n");
    return 2;
  }
  try {
    const auto g = crystal::graph::buildGraph(crystal::loadConfig(argv[1]));
    const std::string trace = crystal::graph::testing::writeKinetoTrace(
        crystal::graph::recordingOf(*g, std::stoi(argv[2])));
    std::ofstream(argv[3]) << trace << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
