// runtime_settings.cpp: names of the runtime lines' values.
#include "guardpolicy/runtime_settings.h"

namespace guardpolicy {

const char* OnErrorName(OnError e) {
  switch (e) {
    case OnError::kKeep: return "keep";
    case OnError::kDrop: return "drop";
    case OnError::kRaise: return "raise";
  }
  return "keep";
}

}  // namespace guardpolicy
