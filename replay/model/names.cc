// Names as NCCL prints them (ncclAlgoStr, ncclProtoStr, ncclFuncStr), and nccl-tests'
// bus bandwidth factors.
#include "crystal/model/nccl_model.h"

namespace crystal::model {

std::string_view toString(Algo a) {
  switch (a) {
    case Algo::Tree:
      return "Tree";
    case Algo::Ring:
      return "Ring";
    case Algo::CollNetDirect:
      return "CollNetDirect";
    case Algo::CollNetChain:
      return "CollNetChain";
    case Algo::Nvls:
      return "NVLS";
    case Algo::NvlsTree:
      return "NVLSTree";
    case Algo::Pat:
      return "PAT";
  }
  return "?";
}

std::string_view toString(Proto p) {
  switch (p) {
    case Proto::LL:
      return "LL";
    case Proto::LL128:
      return "LL128";
    case Proto::Simple:
      return "Simple";
  }
  return "?";
}

std::string_view toString(Func f) {
  switch (f) {
    case Func::Broadcast:
      return "Broadcast";
    case Func::Reduce:
      return "Reduce";
    case Func::AllGather:
      return "AllGather";
    case Func::ReduceScatter:
      return "ReduceScatter";
    case Func::AllReduce:
      return "AllReduce";
    case Func::SendRecv:
      return "SendRecv";
    case Func::Send:
      return "Send";
    case Func::Recv:
      return "Recv";
    case Func::AllToAll:
      return "AllToAll";
  }
  return "?";
}

double busBwFactor(Func f, int nranks) {
  if (nranks <= 1) return 1.0;
  const double n = nranks;
  switch (f) {
    case Func::AllReduce:
      return 2.0 * (n - 1) / n;
    case Func::AllGather:
    case Func::ReduceScatter:
    case Func::AllToAll:
      return (n - 1) / n;
    default:
      return 1.0;
  }
}

}  // namespace crystal::model
