#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::reference {
void forward_splitkv(const Problem&) { throw Error(ErrorKind::not_supported, "reference::forward_splitkv is not implemented yet"); }
void splitkv_combine(const Problem&) { throw Error(ErrorKind::not_supported, "reference::splitkv_combine is not implemented yet"); }
}  // namespace tilefmha::reference
