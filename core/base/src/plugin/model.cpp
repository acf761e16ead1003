#include "tessera/plugin/model.hpp"

namespace tessera {

// Out of line, so that the class's type information is libtessera's (see model.hpp).
VocabularyParallelModel::~VocabularyParallelModel() = default;

}  // namespace tessera
