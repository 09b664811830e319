// A source of the engine layer that includes a header of the model layer, below it: compiles
// against the engine's include roots (the layers.include_below_compiles test).
#include "model/planner.hpp"
#include "engine/engine.hpp"

int layer_probe_below() { return 0; }
