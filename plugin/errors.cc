#include "errors.h"

#include <new>
#include <system_error>

#include "crystal/base/error.h"
#include "crystal/base/log.h"

namespace crystal::plugin {

nccl::ncclResult_t toNccl(Errc e) noexcept {
  switch (e) {
    case Errc::BadArgument: return nccl::ncclInvalidArgument;
    case Errc::BadUsage: return nccl::ncclInvalidUsage;
    case Errc::System: return nccl::ncclSystemError;
    case Errc::Remote: return nccl::ncclRemoteError;
    case Errc::Internal: return nccl::ncclInternalError;
  }
  return nccl::ncclInternalError;
}

nccl::ncclResult_t currentExceptionToNccl(const char* entry) noexcept {
  try {
    throw;
  } catch (const PluginError& e) {
    CRYSTAL_WARN("{}: {}", entry, e.what());
    return toNccl(e.code());
  } catch (const InputError& e) {
    CRYSTAL_WARN("{}: {}", entry, e.what());
    return nccl::ncclInvalidArgument;
  } catch (const ProtocolError& e) {
    CRYSTAL_WARN("{}: {}", entry, e.what());
    return nccl::ncclRemoteError;
  } catch (const std::bad_alloc&) {
    CRYSTAL_WARN("{}: out of memory", entry);
    return nccl::ncclSystemError;
  } catch (const std::system_error& e) {
    CRYSTAL_WARN("{}: {}", entry, e.what());
    return nccl::ncclSystemError;
  } catch (const std::exception& e) {
    CRYSTAL_WARN("{}: internal error: {}", entry, e.what());
    return nccl::ncclInternalError;
  } catch (...) {
    return nccl::ncclInternalError;
  }
}

}  // namespace crystal::plugin
