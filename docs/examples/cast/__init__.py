"""The ``"cast"`` example plugin distribution's package. It imports nothing: listing
plugins imports this package (to reach ``cast.info``), so torch and Lightning stay out
of it; ``cast.plugin`` is imported on first use."""
