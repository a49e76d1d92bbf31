"""What the generation family's engines hand ``choice`` at ``gallery add`` besides the config's own parameters."""

PARAM_ENGINE_REASON = "tritonhf.engine_reason"  # why this engine, when another came first (the config's note)
PARAM_ENGINE_CHECK = "tritonhf.engine_check"  # an engine's weights' own account of how they were made and checked
