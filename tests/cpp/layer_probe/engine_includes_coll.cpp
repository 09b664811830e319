// A source of the engine layer that includes a header of the coll layer, above it: the build
// must refuse it (the layers.include_climb_fails test), as it refuses any include that climbs.
#include "coll/comm.hpp"

int layer_probe_climb() { return 0; }
