"""The decisions of the pipeline, with Flask's `sansio` rule: nothing here does I/O.

Every module here is a plain function of its inputs (`now` and the random source are passed
in), so each rule can be tested with plain values. They import no psycopg, redis, rq,
requests, flask, PIL, urllib3, socket or werkzeug, and no pipeline module outside `core`
(tests/unit/test_layers.py checks the whole import closure). The thin modules around them
gather the inputs and apply the decisions: `pipeline.tasks.apply` is the one place an
outcome is written.

* `errors`: the pipeline's exception tree, and the providers' vocabulary it speaks;
* `states`: task statuses and kinds, the transition table and `check_transition`;
* `lease`: who may claim a task, and where a worker's fenced success leaves it (the specification of
  the PostgreSQL functions `attempt_claim` and `attempt_succeed`);
* `outcome`: `Outcome`, one decision about a task, and `Reason`, the code it carries;
* `policy`: what a failed attempt turns into, what a call's error means for money;
* `recovery`: what the reconciler does with a task, from the evidence it gathered;
* `content`: a save request validated, and the tasks a version needs;
* `principal`: who is calling (`Principal`: owner, role, team, the key if any), and what each role may do;
* `fingerprint`: canonical JSON, input fingerprints and idempotency keys;
* `records`: the records passed around (a claimed `Task`, a stored `Asset`).
"""
