#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::reference {
void forward(const Problem&) { throw Error(ErrorKind::not_supported, "reference::forward is not implemented yet"); }
}  // namespace tilefmha::reference
