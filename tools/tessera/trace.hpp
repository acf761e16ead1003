#pragma once
// `tessera trace merge -o OUT FILE...`: the per-rank traces of one run (`train --trace`) as one
// Chrome trace-event file, for viewers that open one file at a time (Perfetto,
// chrome://tracing). `tessera trace timeline FILE...`: the same traces drawn as text
// (trace_timeline.hpp).

#include <string>
#include <vector>

namespace tessera::cli {

// `args` are the words after "trace". Returns 0. Throws UsageError on bad arguments and Error
// naming the file for one that is not a tessera trace, a rank given twice, a failed write or
// (timeline) a step the traces do not hold.
int run_trace(const std::vector<std::string>& args);

}  // namespace tessera::cli
