"""The soak: an hour (CI: three minutes) of training jobs created, finished, crash-looping,
deleted and re-created on the real world, two function instances behind one front, the
PingSource ticking, an instance killed at intervals; judged from what the API server saw.

- churn.py: what the users do (the job plans, drawn from a seed) and the driver;
- timeline.py: every version of every pod and job the namespace had, from watches;
- judge.py: each of the function's DELETEs (the audit log) against the rules applied to the
  pod's version it deleted and its job's state then; what the rules still name at the end.
"""
