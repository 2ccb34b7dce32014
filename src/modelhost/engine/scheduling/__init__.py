"""Schedulers: how requests of one model version reach its instances.

The seam is `Scheduler.execute(job)`: the default scheduler runs each request alone on the first free instance;
the dynamic and sequence batchers (later) form batches in front of the same instance pool.
"""
