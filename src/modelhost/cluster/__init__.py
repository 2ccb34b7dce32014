"""A model repository served on a Ray cluster: each model (or group) a Ray Serve deployment, modelhost's
frontends in front (docs/ray.md). Imported only by `modelhost ray`; needs the `ray` extra."""
