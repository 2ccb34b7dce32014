"""Schedulers: how requests of one model version reach its instances.

The seam is `Scheduler.execute(job)` (api.py): the default scheduler runs each request alone on the first free
instance; the dynamic and sequence batchers form batches in front of the same instance pool.
"""
