// The plugin's descriptor: kind, name, version, description, aliases, options and the class.
#include "tessera/sdk/plugin.hpp"

#include "gradient_average.hpp"

// No options (the optimizer template, share/tessera/template, shows how to declare some: they
// become the [strategy.gradient_average] section of a config) and no capabilities.
TESSERA_PLUGIN(strategy, "gradient_average", "1.0.0",
               "data parallelism in its plainest form: one all-reduce of the whole gradient",
               TESSERA_NO_ALIASES, TESSERA_NO_OPTIONS, TESSERA_NO_CAPABILITIES,
               my_plugin::GradientAverage)
