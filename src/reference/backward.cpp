#include "tilefmha/error.hpp"
#include "tilefmha/reference.hpp"

namespace tilefmha::reference {
void backward_dot_do_o(const Problem&) { throw Error(ErrorKind::not_supported, "reference::backward_dot_do_o is not implemented yet"); }
void backward_dq_dk_dv(const Problem&) { throw Error(ErrorKind::not_supported, "reference::backward_dq_dk_dv is not implemented yet"); }
void backward_convert_dq(const Problem&) { throw Error(ErrorKind::not_supported, "reference::backward_convert_dq is not implemented yet"); }
void backward(const Problem&) { throw Error(ErrorKind::not_supported, "reference::backward is not implemented yet"); }
}  // namespace tilefmha::reference
