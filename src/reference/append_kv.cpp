#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::reference {
void append_kv(const Problem&) { throw Error(ErrorKind::not_supported, "reference::append_kv is not implemented yet"); }
}  // namespace tilefmha::reference
