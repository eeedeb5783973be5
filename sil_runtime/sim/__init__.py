"""The embedded simulated audit: a seeded runtime, auditor and judge for testing the loop.

    python -m sil_runtime.sim --measurement DIR --params FILE --tick N --pair-key K --audit-id ID

`world` is the generative model of audit scores (docs/statistics.md §4), `landscape` the
hidden effect of policy content. Every record it writes says it is simulated: it is a test
bed for the loop's plumbing and statistics, not a claim about any model. See README.md.
"""

from sil_runtime.sim.world import World, draw_candidate, draw_effect, effect_field

__all__ = ["World", "draw_candidate", "draw_effect", "effect_field"]
