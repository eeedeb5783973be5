"""Offline stand-ins for every Petri model role, served as the inspect-ai provider `scripted`.

    scripted/auditor        drives Petri's auditor tools from the seed text (auditor.py)
    scripted/target         a policy-sensitive target: its behaviour follows what the runtime
                            sends it (target.py)
    scripted/target-crash   raises on every call (a crashing runtime)
    scripted/target-longread  as scripted/target, each call reporting 250,000 more input tokens
                            (a runtime that sends its model a long context)
    scripted/judge          answers Petri's `answer()` schema for any rubric (judge.py)
    scripted/judge-refuse   never calls `answer()` (unparseable judge output)
    scripted/judge-partial  calls `answer()` without its first dimension

They prove the plumbing (task, roles, seeds, rubric, logs, trust checks, keep/revert), never
the quality of a model or a policy.
"""
