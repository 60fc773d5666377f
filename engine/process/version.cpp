#include "engine/process/version.h"

namespace pt {
const char* version() { return "0.1.0"; }
}  // namespace pt
