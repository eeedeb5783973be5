"""A second, deliberately small runtime under test, written from docs/runtime-integration.md alone.

It implements three of the seven surfaces (wrapper_prompt, tool_policy, tool_descriptions) and
one tool (lookup_order). `mini_runtime/mini_target` is its Petri target agent (agent.py).
"""
