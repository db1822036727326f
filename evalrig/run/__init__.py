"""A run: one sealed checkpoint evaluated on a task set into a run bundle.

`lifecycle.run_eval` is the outline; each step is a module of its own:

    settings    what the command asks for, its defaults, a resume's refusals
    inputs      checkpoint, seal, task set, plan (inputs ids), pins, secrets, network
    book        which trials are done and which run (again); a resume's repair
    loop        attempts handed to an executor, their records written, retries
    progress    what the person watching is told
    lifecycle   the bundle created or resumed under its lock, finished, registered
    provenance  the files a bundle is given once, at its start
    verify      a bundle re-derived from its stored evidence
    executors/  where attempts run: local threads or a Ray cluster
"""
