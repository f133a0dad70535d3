// Keeps mxdp_core non-empty while the library grows.
namespace mxdp {
const char* version() { return "0.1"; }
}  // namespace mxdp
