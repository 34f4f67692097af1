"""The typed edge: Kubernetes objects (event payloads and API answers) -> plain data.

One path for every body: pydantic validates JSON bytes straight into the schemas of this
package (about twice as fast as json.loads + validation, and unread fields never become
Python objects), reading exactly the fields the rules need and ignoring the rest
(managedFields, spec.containers, ...). A payload that does not validate is bad input (400);
the engine never sees a half-understood object.

One module per object family, so each parser reads alone: `base` (what every object shares,
and the one validation path), `pods`, `jobs` (training jobs), `intermediates` (a chain's JobSets
and batch Jobs), `nodes`, and `pages` (LIST pages, validated in one pass).
"""
