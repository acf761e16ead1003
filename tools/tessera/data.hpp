#pragma once
// `tessera data prepare [SOURCE] [--output FILE] [--validation FRACTION]`: one pass over a text
// corpus into the token file that the `text` data set maps.

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "data". Prints what it wrote (documents, tokens, split, checksum).
// Returns 0. Throws UsageError on bad arguments and DataError for an unreadable corpus or a
// failed write (the output then stays as it was).
int run_data(const std::vector<std::string>& args);

}  // namespace tessera::cli
